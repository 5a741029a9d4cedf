package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent/metrics"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// BenchmarkScrape is the cost of one scrape of an agent's /metrics, per
// engine, of a real primary holding a table of 10000 rows: the time to
// answer (ns/op, and ms/scrape), the bytes of the answer (the text
// format, uncompressed) and its series. make bench-metrics runs it.
func BenchmarkScrape(b *testing.B) {
	ctx := context.Background()
	acct := engine.Account{User: engine.MonitoringUser, Password: monitorPassword, Monitoring: true}
	servers := []struct {
		engine dbv1.Engine
		start  func(b *testing.B) (port int, data string)
	}{
		{dbv1.EnginePostgreSQL, func(b *testing.B) (int, string) {
			p := testservers.StartPostgresPrimary(b)
			if err := p.Instance(b).EnsureAccount(ctx, acct); err != nil {
				b.Fatal(err)
			}
			if err := p.Exec(ctx, "CREATE TABLE orders AS SELECT g AS id, repeat('x', 100) AS note FROM generate_series(1, 10000) g"); err != nil {
				b.Fatal(err)
			}
			return p.Port, p.Data()
		}},
		{dbv1.EngineMariaDB, func(b *testing.B) (int, string) {
			m := testservers.StartMariaDBPrimary(b)
			if err := m.Instance(b).EnsureAccount(ctx, acct); err != nil {
				b.Fatal(err)
			}
			for _, s := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.orders (id int PRIMARY KEY, note text) AS SELECT seq AS id, REPEAT('x', 100) AS note FROM shop.seq_1_to_10000"} {
				if err := m.RootExec(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			return m.Port, m.Data()
		}},
	}
	for _, srv := range servers {
		b.Run(string(srv.engine), func(b *testing.B) {
			port, data := srv.start(b)
			a := newAgentMetrics(b, "orders", srv.engine, port, data, monitorPassword, 10*time.Second)
			first := a.scrape(b) // connected, and checked once
			if !first.is(1, "database_instance_up") || !first.is(0, "database_last_scrape_error") {
				b.Fatalf("the first scrape:\n%s", first.series())
			}
			series := 0
			for _, f := range first.fams {
				series += len(f.GetMetric())
			}
			var bytes int
			start := time.Now()
			for b.Loop() {
				rec := httptest.NewRecorder()
				a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.Path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("answered %d", rec.Code)
				}
				bytes += rec.Body.Len()
			}
			b.ReportMetric(float64(time.Since(start))/float64(time.Millisecond)/float64(b.N), "ms/scrape")
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/scrape")
			b.ReportMetric(float64(series), "series/scrape")
		})
	}
}
