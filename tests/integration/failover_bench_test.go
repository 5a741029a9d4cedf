package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
)

// BenchmarkFailover measures, per engine, the time from the loss of the
// primary (server killed, pod marked unready) to the first write that
// succeeds through the read-write Service (its ready endpoint's server),
// with spec.failover.delaySeconds 0 so that the figure is the operator's
// own work. It reports p50 and p95 over the iterations: run it with
// `make bench-failover` (-benchtime=Nx).
func BenchmarkFailover(b *testing.B) {
	for _, engine := range []dbv1.Engine{dbv1.EnginePostgreSQL, dbv1.EngineMariaDB} {
		b.Run(string(engine), func(b *testing.B) {
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				d := failoverOnce(b, engine, i)
				times = append(times, d)
				b.StartTimer()
			}
			slices.Sort(times)
			b.Logf("%s failover to first write, sorted: %v", engine, times)
			pct := func(p float64) float64 {
				return float64(times[min(len(times)-1, int(p*float64(len(times))))].Milliseconds())
			}
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// failoverOnce builds a three-instance Database over real servers, kills
// its primary and returns how long until a write through -rw succeeds.
func failoverOnce(b *testing.B, engine dbv1.Engine, i int) time.Duration {
	ctx := context.Background()
	name := fmt.Sprintf("bench%d", i)
	var (
		db   *dbv1.Database
		ns   string
		kill func()
		exec = map[string]func() error{} // pod -> a write to its server
	)
	switch engine {
	case dbv1.EnginePostgreSQL:
		var primary *testservers.Postgres
		var replicas []*testservers.Postgres
		ns, db, primary, replicas = postgresDatabase(b, name)
		kill = primary.Kill
		for i, s := range append([]*testservers.Postgres{primary}, replicas...) {
			exec[fmt.Sprintf("%s-%d", name, i)] = func() error { return pgExec(b, s, "INSERT INTO orders (note) VALUES ('after')") }
		}
	default:
		var servers []*testservers.MariaDB
		ns, db, servers = mariaDBWithServers(b, name)
		kill = servers[0].Kill
		for i, s := range servers {
			exec[fmt.Sprintf("%s-%d", name, i)] = func() error { return mariaExec(b, s, "INSERT INTO shop.orders (note) VALUES ('after')") }
		}
	}
	// Measure the operator's own work, not the configured grace period.
	updateSpec(b, db, func(db *dbv1.Database) { db.Spec.Failover.DelaySeconds = ptr.To[int32](0) })
	start := time.Now()
	kill()
	setPodReady(b, ns, name+"-0", false)
	for time.Since(start) < 2*time.Minute {
		eps := endpointPods(b, ns, name+"-rw")
		if len(eps) == 1 && eps[0] != name+"-0" {
			if err := exec[eps[0]](); err == nil {
				d := time.Since(start)
				_ = testEnv.client.Delete(ctx, db)
				return d
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := &dbv1.Database{}
	_ = testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), got)
	b.Fatalf("no write through %s-rw within 2 minutes; status %+v", name, got.Status)
	return 0
}
