package helmcharts

import (
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestLint runs what `helm lint` runs, for each engine, and fails on any
// warning or error (helm lint itself fails only on errors).
func TestLint(t *testing.T) {
	for _, engine := range []string{"postgresql", "mysql", "mariadb"} {
		for _, replicas := range []int{1, 3} {
			values := map[string]any{"engine": engine, "version": "1", "replicas": replicas}
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
