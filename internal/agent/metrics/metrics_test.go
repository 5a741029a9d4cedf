package metrics

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/logbuf"
)

const secret = "s3cret-Monitor-pw"

func newCollector(t *testing.T, e dbv1.Engine, port int, timeout time.Duration) (*Collector, *logbuf.Buffer) {
	t.Helper()
	log := &logbuf.Buffer{}
	c, err := New(Config{Database: "orders", Engine: e, Server: engine.Endpoint{Host: "127.0.0.1", Port: port},
		DataDir: filepath.Join(t.TempDir(), "not-yet"), Timeout: timeout,
		Credentials: func() (engine.Credentials, error) {
			return engine.Credentials{User: engine.MonitoringUser, Password: secret}, nil
		},
		Log: funcr.New(func(_, args string) { fmt.Fprintln(log, args) }, funcr.Options{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, log
}

// scrapeOnce serves one scrape and parses it: series name and labels -> value.
func scrapeOnce(t *testing.T, c *Collector) (map[string]float64, time.Duration) {
	t.Helper()
	rec := httptest.NewRecorder()
	start := time.Now()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	took := time.Since(start)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body.String())
	}
	if strings.Contains(rec.Body.String(), secret) {
		t.Fatal("the password is in the scrape")
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "database" {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				} else if l.GetValue() != "orders" {
					t.Errorf("%s: database=%q", name, l.GetValue())
				}
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return out, took
}

// TestLibraryDefaults: the community collectors' kingpin flags have their
// defaults (a flag's value is its type's zero until kingpin parses), and
// the postgres_exporter collectors the agent runs are on.
func TestLibraryDefaults(t *testing.T) {
	for range 2 { // once, whatever the number of collectors
		if err := initLibraries(); err != nil {
			t.Fatal(err)
		}
	}
	for flag, want := range map[string]string{
		"collect.info_schema.processlist.processes_by_user": "true", // mysqld_exporter, default true
		"collect.info_schema.tables.databases":              "*",
		"collector.stat_database":                           "true", // postgres_exporter, on by default
		"collector.stat_wal_receiver":                       "true", // off by default, turned on
		"collector.stat_statements":                         "false",
	} {
		f := kingpin.CommandLine.GetFlag(flag)
		if f == nil {
			t.Errorf("no flag %s", flag)
			continue
		}
		if got := f.Model().Value.String(); got != want {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
}

// TestServerThatDoesNotAnswer: a server that refuses connections, or
// accepts them and never answers, is up 0 in a scrape that succeeds within
// its deadline; the data volume's figures are there all the same (the
// parent of a data directory not made yet), and no password is anywhere.
func TestServerThatDoesNotAnswer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedPort := refusing.Addr().(*net.TCPAddr).Port
	refusing.Close()

	for _, e := range []dbv1.Engine{dbv1.EnginePostgreSQL, dbv1.EngineMariaDB} {
		for what, port := range map[string]int{"refused": refusedPort, "silent": silent.Addr().(*net.TCPAddr).Port} {
			t.Run(string(e)+"/"+what, func(t *testing.T) {
				c, log := newCollector(t, e, port, 500*time.Millisecond)
				for i := range 2 { // the second while the first's collectors may still wait
					got, took := scrapeOnce(t, c)
					if took > 2*time.Second {
						t.Errorf("scrape %d took %s", i, took)
					}
					up, ok := got["database_instance_up{}"]
					if !ok || up != 0 || got["database_last_scrape_error{}"] != 1 ||
						got["database_volume_capacity_bytes{}"] <= 0 || got["database_volume_used_bytes{}"] <= 0 {
						t.Errorf("scrape %d: %v", i, got)
					}
					if _, ok := got["database_instance_is_primary{}"]; ok {
						t.Errorf("scrape %d: a role without an answer", i)
					}
				}
				if strings.Contains(log.String(), secret) {
					t.Errorf("the password is in the log:\n%s", log)
				}
			})
		}
	}
}

// TestLagSeconds: a replica's lag is 0 when it applied all it received;
// behind, it is the time since its data was last known current: the
// server's own figure when it has one, else since it was last seen caught
// up (MySQL's and MariaDB's SQL thread stopped), else since the agent
// started.
func TestLagSeconds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &Collector{start: t0}
	behind := func(n int64) engine.Sample {
		return engine.Sample{Status: engine.Status{Role: engine.RoleReplica, Behind: n}}
	}
	known := func(n int64, lag float64) engine.Sample {
		s := behind(n)
		s.LagSeconds, s.LagKnown = lag, true
		return s
	}
	for _, step := range []struct {
		s    engine.Sample
		at   int
		want float64
	}{
		{behind(3), 10, 10},    // never seen current: since the start
		{behind(0), 20, 0},     // caught up at 20
		{behind(5), 25, 5},     // behind, no figure: since 20
		{known(5, 2), 30, 2},   // the server's figure: current at 28
		{behind(5), 40, 12},    // the SQL thread stopped: since 28
		{known(5, 30), 41, 13}, // a figure older than what is known does not move it back
		{behind(0), 50, 0},
	} {
		if got := c.lagSeconds(step.s, t0.Add(time.Duration(step.at)*time.Second)); got != step.want {
			t.Errorf("at %d s, behind %d (figure %v, %v): lag %v, want %v", step.at, step.s.Status.Behind, step.s.LagSeconds, step.s.LagKnown, got, step.want)
		}
	}
}

// TestFileCredentials: the Secret's files as they are; none yet is an error.
func TestFileCredentials(t *testing.T) {
	dir := t.TempDir()
	read := FileCredentials(dir)
	if _, err := read(); err == nil {
		t.Error("no error before the Secret is mounted")
	}
	for name, v := range map[string]string{"username": "monitor", "password": " pw with spaces\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := read()
	if err != nil || c.User != "monitor" || c.Password != " pw with spaces\n" {
		t.Errorf("read %v, %v", c, err)
	}
	if _, err := FileCredentials("")(); err == nil {
		t.Error("no error without a directory")
	}
}
