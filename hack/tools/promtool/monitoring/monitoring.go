// Package monitoring reads the project's alerts (the PrometheusRule in
// config/prometheus/rules) and Grafana dashboard (config/grafana) with
// Prometheus's own rule and PromQL parsers: the rule groups promtool checks
// and tests, and the metric names every alert and panel uses, which the
// tests compare with the metric contract (and a later check with real
// scrapes).
package monitoring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Files of the repository, relative to its root.
const (
	RulesFile     = "config/prometheus/rules/prometheusrule.yaml"
	RuleTestsFile = "config/prometheus/tests/alerts_test.yaml"
	DashboardFile = "config/grafana/database-operator.json"
	RunbookDir    = "docs/runbooks"
	// RunbookURL is where each alert's runbook_url points: the alert's
	// name and .md follow.
	RunbookURL = "https://example.com/database-operator/source/blob/main/docs/runbooks/"
)

var promql = parser.NewParser(parser.Options{})

// RuleGroupsYAML is the .spec of the PrometheusRule in root: the plain rule
// groups promtool and Prometheus read.
func RuleGroupsYAML(root string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, RulesFile))
	if err != nil {
		return nil, err
	}
	var pr struct {
		APIVersion string    `yaml:"apiVersion"`
		Kind       string    `yaml:"kind"`
		Spec       yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		return nil, fmt.Errorf("%s: %w", RulesFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("%s: %s %s is not a monitoring.coreos.com/v1 PrometheusRule", RulesFile, pr.APIVersion, pr.Kind)
	}
	if pr.Spec.Kind == 0 {
		return nil, fmt.Errorf("%s: no spec", RulesFile)
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "# The .spec of %s (extracted by hack/tools/promtool/monitoring): edit that file.\n", RulesFile)
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&pr.Spec); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

// RuleGroups parses and validates the PrometheusRule's groups as Prometheus
// does when it loads a rule file.
func RuleGroups(root string) (*rulefmt.RuleGroups, error) {
	b, err := RuleGroupsYAML(root)
	if err != nil {
		return nil, err
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", RulesFile, errors.Join(errs...))
	}
	return groups, nil
}

// MetricNames are the metric names one PromQL expression selects. Every
// selector must name its metric (a selector on __name__ alone, or a
// regular expression, names none this check can follow).
func MetricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			bad = errors.Join(bad, fmt.Errorf("selector %s names no metric", vs))
			return nil
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	slices.Sort(names)
	return names, bad
}

// AlertMetricNames maps each alerting rule (its alert name and severity)
// to the metric names its expression uses.
func AlertMetricNames(root string) (map[string][]string, error) {
	groups, err := RuleGroups(root)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	var errs error
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			key := r.Alert + "/" + r.Labels["severity"]
			names, err := MetricNames(r.Expr)
			if err != nil {
				errs = errors.Join(errs, fmt.Errorf("alert %s: %w", key, err))
			}
			out[key] = mergeNames(out[key], names)
		}
	}
	return out, errs
}

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel, or a row holding panels.
type Panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []Panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// ReadDashboard reads the dashboard in root.
func ReadDashboard(root string) (*Dashboard, error) {
	b, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return nil, err
	}
	d := &Dashboard{}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return d, nil
}

// Grafana's interval variables stand where PromQL wants a duration.
var grafanaDurations = strings.NewReplacer(
	"${__rate_interval}", "5m", "$__rate_interval", "5m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "1h", "$__range", "1h",
)

// labelValues is Grafana's label_values(<selector>, <label>) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// DashboardQuery turns a panel's or variable's query into PromQL: Grafana's
// interval variables become durations (other variables stand inside label
// values, where PromQL takes them as text), and label_values(...) is its
// selector.
func DashboardQuery(q string) string {
	if m := labelValues.FindStringSubmatch(q); m != nil {
		q = m[1]
	}
	return grafanaDurations.Replace(q)
}

// DashboardMetricNames maps each panel ("<row> / <title> / <refId>") and
// each query variable ("$<name>") to the metric names its PromQL uses.
func DashboardMetricNames(root string) (map[string][]string, error) {
	d, err := ReadDashboard(root)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	var errs error
	add := func(key, q string) {
		names, err := MetricNames(DashboardQuery(q))
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: %q: %w", key, q, err))
		}
		out[key] = mergeNames(out[key], names)
	}
	row := ""
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				row = p.Title
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				errs = errors.Join(errs, fmt.Errorf("panel %q has no query", p.Title))
			}
			for _, t := range p.Targets {
				add(fmt.Sprintf("%s / %s / %s", row, p.Title, t.RefID), t.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				errs = errors.Join(errs, fmt.Errorf("variable %s: query is neither text nor {query}", v.Name))
				continue
			}
			q = obj.Query
		}
		add("$"+v.Name, q)
	}
	return out, errs
}

// UsedMetricNames is every metric name the alerts and the dashboard use,
// sorted: what the agents' and the operator's scrapes must hold.
func UsedMetricNames(root string) ([]string, error) {
	alerts, err := AlertMetricNames(root)
	if err != nil {
		return nil, err
	}
	dash, err := DashboardMetricNames(root)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, m := range []map[string][]string{alerts, dash} {
		for _, names := range m {
			all = mergeNames(all, names)
		}
	}
	return all, nil
}

func mergeNames(a, b []string) []string {
	for _, n := range b {
		if !slices.Contains(a, n) {
			a = append(a, n)
		}
	}
	slices.Sort(a)
	return a
}
