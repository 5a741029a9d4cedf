// Package metrics tests the agent's database metrics against real
// PostgreSQL and MariaDB servers (tests/utils/testservers): each value is
// checked against what the test did to the servers.
package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent/metrics"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/logbuf"
)

// monitorPassword is the monitoring account's password in these tests: it
// must never show in a scrape or a log line.
const monitorPassword = "m0nitor-Secret-pw"

// agentMetrics is one server's metrics as its agent serves them.
type agentMetrics struct {
	name    string
	c       *metrics.Collector
	handler http.Handler
	log     *logbuf.Buffer
}

// newAgentMetrics makes the collector an agent of Database db runs for
// the server on port (its data directory dataDir), reading it with the
// monitoring account.
func newAgentMetrics(t testing.TB, db string, e dbv1.Engine, port int, dataDir, password string, timeout time.Duration) *agentMetrics {
	t.Helper()
	buf := &logbuf.Buffer{}
	log := funcr.New(func(prefix, args string) {
		fmt.Fprintln(buf, prefix, args)
		t.Log(db, args)
	}, funcr.Options{})
	c, err := metrics.New(metrics.Config{
		Database: db, Engine: e, Server: engine.Endpoint{Host: "127.0.0.1", Port: port}, DataDir: dataDir, Timeout: timeout,
		Credentials: func() (engine.Credentials, error) {
			return engine.Credentials{User: engine.MonitoringUser, Password: password}, nil
		},
		Log: logr.Logger(log),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &agentMetrics{name: db, c: c, handler: c.Handler(), log: buf}
}

// scraped is one scrape, parsed.
type scraped struct {
	fams map[string]*dto.MetricFamily
	raw  string
	took time.Duration
}

// scrape gets /metrics as Prometheus does (its timeout header) and parses
// it with Prometheus's own parser; every series must carry the Database's
// label, and neither the answer nor the log the password.
func (a *agentMetrics) scrape(t testing.TB) scraped {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, metrics.Path, nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
	rec := httptest.NewRecorder()
	start := time.Now()
	a.handler.ServeHTTP(rec, req)
	took := time.Since(start)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: /metrics answered %d: %s", a.name, rec.Code, rec.Body.String())
	}
	raw := rec.Body.String()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: the exposition does not parse: %v\n%s", a.name, err, raw)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if v := labelValue(m, "database"); v != a.name {
				t.Fatalf("%s: a series of %s has database=%q, want %q", a.name, name, v, a.name)
			}
		}
	}
	if strings.Contains(raw, monitorPassword) || strings.Contains(a.log.String(), monitorPassword) {
		t.Fatalf("%s: the monitoring account's password shows in the scrape or the log", a.name)
	}
	return scraped{fams: fams, raw: raw, took: took}
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value is the series name{labels...} (name=value pairs), and whether it
// is there.
func (s scraped) value(name string, labels ...string) (float64, bool) {
	f, ok := s.fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if labelValue(m, labels[i]) != labels[i+1] {
				continue next
			}
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		default:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// must is name{labels}, failing the test when it is missing.
func (s scraped) must(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in the scrape:\n%s", name, labels, s.series())
	}
	return v
}

// series lists the contract's series of the scrape (for failure messages).
func (s scraped) series() string {
	var out []string
	for _, line := range strings.Split(s.raw, "\n") {
		if strings.HasPrefix(line, "database_") {
			out = append(out, line)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// contractTypes are the agent's series of the documented metric table
// (docs/monitoring.md, the one source of the contract the alerts and the
// dashboard are checked against by make test-rules), by type: every
// database_ series a scrape has must be one of them, of its type, and each
// engine's scrapes together must have each (seenAll).
var contractTypes = documentedAgentSeries()

func documentedAgentSeries() map[string]dto.MetricType {
	b, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		panic(err)
	}
	types := map[string]dto.MetricType{"gauge": dto.MetricType_GAUGE, "counter": dto.MetricType_COUNTER, "histogram": dto.MetricType_HISTOGRAM}
	out := map[string]dto.MetricType{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(database_[a-z0-9_]+)` \\| (gauge|counter|histogram) \\|").FindAllStringSubmatch(string(b), -1) {
		if !strings.HasPrefix(m[1], "database_operator_") {
			out[m[1]] = types[m[2]]
		}
	}
	if len(out) < 10 {
		panic(fmt.Sprintf("docs/monitoring.md documents %d agent series", len(out)))
	}
	return out
}

// seenAll fails unless the scrapes, together, have every documented
// series but those the engine does not have (notOn).
func seenAll(t testing.TB, notOn []string, scrapes ...scraped) {
	t.Helper()
	for name := range contractTypes {
		if slices.Contains(notOn, name) {
			continue
		}
		if !slices.ContainsFunc(scrapes, func(s scraped) bool { _, ok := s.fams[name]; return ok }) {
			t.Errorf("no scrape has the documented series %s", name)
		}
	}
}

// checkTypes fails on a database_ series that is not in the contract or
// not of its type.
func (s scraped) checkTypes(t testing.TB) {
	t.Helper()
	for name, f := range s.fams {
		if !strings.HasPrefix(name, "database_") {
			continue
		}
		want, ok := contractTypes[name]
		if !ok {
			t.Errorf("series %s is not in the metric contract", name)
		} else if f.GetType() != want {
			t.Errorf("series %s is a %s, want %s", name, f.GetType(), want)
		}
	}
}

// eventually scrapes until ok says the scrape shows what it waits for.
func (a *agentMetrics) eventually(t testing.TB, what string, timeout time.Duration, ok func(s scraped) bool) scraped {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := a.scrape(t)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s: not after %s; last scrape:\n%s", a.name, what, timeout, s.series())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// is says whether the series name (no other label than database) is
// there with value v.
func (s scraped) is(v float64, name string) bool {
	got, ok := s.value(name)
	return ok && got == v
}

// checkCommon checks what every answering server shows: up, the version it
// reports, connections within the maximum, the data volume, no failed
// collector; and the community collectors' series.
func (s scraped) checkCommon(t testing.TB, e dbv1.Engine, version string, maxConns float64, library ...string) {
	t.Helper()
	s.checkTypes(t)
	if v := s.must(t, "database_instance_up"); v != 1 {
		t.Errorf("database_instance_up %v, want 1", v)
	}
	s.must(t, "database_instance_info", "engine", string(e), "version", version)
	if v := s.must(t, "database_connections"); v < 1 || v > maxConns {
		t.Errorf("database_connections %v, want 1 to %v (the collector's own at least)", v, maxConns)
	}
	if v := s.must(t, "database_connections_max"); v != maxConns {
		t.Errorf("database_connections_max %v, want %v", v, maxConns)
	}
	used, capacity := s.must(t, "database_volume_used_bytes"), s.must(t, "database_volume_capacity_bytes")
	if used <= 0 || capacity < used {
		t.Errorf("volume used %v of %v", used, capacity)
	}
	if v := s.must(t, "database_last_scrape_error"); v != 0 {
		t.Errorf("database_last_scrape_error %v, want 0:\n%s", v, s.raw)
	}
	for _, name := range library {
		if _, ok := s.fams[name]; !ok {
			t.Errorf("no community collector series %s", name)
		}
	}
}

// withTimeout is a context for one step of a test.
func withTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
