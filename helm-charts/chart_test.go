package helmcharts

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/chart"
	enginepkg "example.com/database-operator/internal/engine"
)

// TestLint runs what `helm lint` runs, for each engine, and fails on any
// warning or error (helm lint itself fails only on errors).
func TestLint(t *testing.T) {
	for _, engine := range []string{"postgresql", "mysql", "mariadb"} {
		for _, replicas := range []int{1, 3} {
			p := enginepkg.ProfileOf(dbv1.Engine(engine))
			values := map[string]any{"engine": engine, "port": int64(p.Port), "portName": p.PortName, "version": "1", "replicas": replicas}
			res := lint.All("database", values, "default", false)
			for _, m := range res.Messages {
				t.Logf("%s replicas=%d: %s", engine, replicas, m)
				if m.Severity >= support.WarningSev {
					t.Errorf("%s replicas=%d: lint %s", engine, replicas, m)
				}
			}
		}
	}
}

// TestLintRefusesBadValues shows values.schema.json at work: helm lint (and
// every render) refuses values that break it.
func TestLintRefusesBadValues(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"unknown engine":   {"engine": "oracle"},
		"too many":         {"replicas": 11},
		"zero replicas":    {"replicas": 0},
		"bad storage size": {"storage": map[string]any{"size": "ten gigs"}},
		"unknown key":      {"replica": 3},
	} {
		res := lint.All("database", values, "default", false)
		if res.HighestSeverity < support.ErrorSev {
			t.Errorf("%s: lint passed, want a schema error; messages: %v", name, res.Messages)
		}
	}
}

// TestPortIsRequired: the chart never guesses the engine's port; a render
// without it fails and says what is missing.
func TestPortIsRequired(t *testing.T) {
	r, err := chart.Load(Database, "database")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Render(chart.Release{Name: "orders", Namespace: "shop"},
		map[string]any{"engine": "mariadb", "version": "10.11", "replicas": int64(1), "agentImage": "example.com/database-operator/manager:test"})
	if err == nil || !strings.Contains(err.Error(), "port: the engine's port") {
		t.Errorf("a render without port: %v, want the error naming port", err)
	}
}
