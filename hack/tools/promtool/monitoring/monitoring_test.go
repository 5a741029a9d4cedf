package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestPromtool runs promtool (PROMTOOL, which make test-rules builds from
// this module) on the PrometheusRule's rule groups: check rules, then the
// unit tests of config/prometheus/tests.
func TestPromtool(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Skip("PROMTOOL is not set: make test-rules builds promtool and runs this")
	}
	dir := t.TempDir()
	rules, err := RuleGroupsYAML(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root, RuleTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", "rules.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}
}

// TestAlertsAreComplete: every alert has a severity, a summary, a
// description (their texts are pinned by the unit tests, with the labels
// they name), a runbook_url to its runbook, which
// exists with its four sections and is in the runbooks' index, and unit
// tests that make it fire and that keep it quiet.
func TestAlertsAreComplete(t *testing.T) {
	groups, err := RuleGroups(root)
	if err != nil {
		t.Fatal(err)
	}
	firing, quiet := ruleTests(t)
	index, err := os.ReadFile(filepath.Join(root, RunbookDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: recording rule %s: the PrometheusRule holds alerts only", g.Name, r.Record)
				continue
			}
			name := r.Alert
			if !regexp.MustCompile(`^Database[A-Z][A-Za-z]+$`).MatchString(name) {
				t.Errorf("alert %s: names start with Database and are CamelCase", name)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q, want critical, warning or info", name, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s: no %s annotation", name, a)
				}
			}
			if want := RunbookURL + name + ".md"; r.Annotations["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
			}
			if seen[name] {
				continue // a second severity of the same alert
			}
			seen[name] = true
			b, err := os.ReadFile(filepath.Join(root, RunbookDir, name+".md"))
			if err != nil {
				t.Errorf("alert %s: no runbook: %v", name, err)
			} else {
				for _, section := range []string{"# " + name, "## Meaning", "## Impact", "## Diagnosis", "## Mitigation"} {
					if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(section) + `\s*$`).Match(b) {
						t.Errorf("runbook %s.md: no %q section", name, section)
					}
				}
			}
			if !bytes.Contains(index, []byte("("+name+".md)")) {
				t.Errorf("alert %s: not in %s/README.md", name, RunbookDir)
			}
			if !firing[name] {
				t.Errorf("alert %s: no unit test in %s makes it fire", name, RuleTestsFile)
			}
			if !quiet[name] {
				t.Errorf("alert %s: no unit test in %s shows it quiet (exp_alerts: [])", name, RuleTestsFile)
			}
		}
	}
	// No runbook without its alert.
	files, _ := filepath.Glob(filepath.Join(root, RunbookDir, "*.md"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".md")
		if name != "README" && !seen[name] {
			t.Errorf("%s: no alert %s", f, name)
		}
	}
}

// ruleTests reads the unit tests: which alerts one expects firing, and which
// one expects quiet.
func ruleTests(t *testing.T) (firing, quiet map[string]bool) {
	b, err := os.ReadFile(filepath.Join(root, RuleTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTests []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	firing, quiet = map[string]bool{}, map[string]bool{}
	for _, g := range f.Tests {
		for _, c := range g.AlertRuleTests {
			if len(c.ExpAlerts) > 0 {
				firing[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	return firing, quiet
}

// TestAlertMetricsAreInTheContract: every alert reads only series the agents
// and the operator promise.
func TestAlertMetricsAreInTheContract(t *testing.T) {
	used, err := AlertMetricNames(root)
	if err != nil {
		t.Fatal(err)
	}
	checkContract(t, "alert", used)
}

// TestDashboard: the dashboard is one JSON object whose every panel and
// variable query parses as PromQL and reads only series in the contract,
// with the six rows the issue asks for, and the ConfigMap that ships it.
func TestDashboard(t *testing.T) {
	d, err := ReadDashboard(root)
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title")
	}
	var rows []string
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		}
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
	}
	if want := []string{"Overview", "Replication", "Connections", "Storage", "Backups", "Operator"}; !slices.Equal(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}
	used, err := DashboardMetricNames(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 30 {
		t.Errorf("only %d queries read", len(used))
	}
	checkContract(t, "dashboard query", used)

	k, err := os.ReadFile(filepath.Join(root, "config/grafana/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{filepath.Base(DashboardFile), `grafana_dashboard: "1"`} {
		if !bytes.Contains(k, []byte(want)) {
			t.Errorf("config/grafana/kustomization.yaml does not hold %s", want)
		}
	}
}

// TestContractIsTheDocumentedTables: the tables hold the series the
// agents and the operator promise (a few pinned here, so an emptied or
// reformatted table cannot pass).
func TestContractIsTheDocumentedTables(t *testing.T) {
	for name, typ := range map[string]string{"database_instance_up": "gauge", "database_wal_bytes_total": "counter",
		"database_operator_failover_duration_seconds": "histogram", "database_operator_backups_total": "counter"} {
		if Contract[name] != typ {
			t.Errorf("%s: %q in %s, want %s", name, Contract[name], ContractFile, typ)
		}
	}
	if len(Contract) < 30 {
		t.Errorf("%d series in %s's tables", len(Contract), ContractFile)
	}
}

// TestEveryContractMetricIsShown: each series of the contract is on the
// dashboard or in an alert (info series and histograms through their
// parts).
func TestEveryContractMetricIsShown(t *testing.T) {
	used, err := UsedMetricNames(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range Contract {
		if slices.Contains(used, name) || (typ == "histogram" && slices.Contains(used, name+"_bucket")) {
			continue
		}
		t.Errorf("%s (%s) is used by no alert and no panel", name, typ)
	}
	t.Logf("%d metric names used: %s", len(used), strings.Join(used, " "))
}

func checkContract(t *testing.T, what string, used map[string][]string) {
	t.Helper()
	keys := make([]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if len(used[k]) == 0 {
			t.Errorf("%s %s reads no metric", what, k)
		}
		for _, name := range used[k] {
			if !InContract(name) {
				t.Errorf("%s %s: %s is not in the metric contract", what, k, name)
			}
		}
	}
}

// TestMetricNames pins the parsing itself: names inside functions,
// aggregations, binary operators, subqueries and offsets, Grafana's
// variables and label_values, and a selector without a name refused.
func TestMetricNames(t *testing.T) {
	for q, want := range map[string]string{
		`sum by (a) (rate(x_total{a="$v"}[$__rate_interval])) / on (a) group_left y > 0 or vector(0)`: "x_total y",
		`label_values(database_instance_up{namespace=~"$namespace"}, database)`:                       "database_instance_up",
		`max_over_time(z[1h:5m] offset 1d) unless absent(up{job="j"} == 1)`:                           "up z",
		`{__name__="w"}`: "w",
	} {
		got, err := MetricNames(DashboardQuery(q))
		if err != nil {
			t.Errorf("%s: %v", q, err)
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s: %q, want %q", q, g, want)
		}
	}
	for _, q := range []string{`{__name__=~"database_.+"}`, `rate(x[`, `label_values(database)`} {
		if _, err := MetricNames(DashboardQuery(q)); err == nil {
			t.Errorf("%s: no error", q)
		}
	}
	if InContract("database_operator_failover_duration_seconds_bucket") != true || InContract("database_instance_up_bucket") {
		t.Errorf("histogram parts: wrong")
	}
}
