package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// BenchmarkFailover measures, per engine, the time from the loss of the
// primary's machine (processnode's Down: its containers killed and not
// restarted) to the first write that succeeds through the read-write
// Service's DNS name. Detection is the cluster's own: the node reports the
// pod's containers terminated, the operator sees the pod unready and its
// server gone. spec.failover.delaySeconds is 0, so the figure is detection,
// the wait for the dead primary's Lease to expire (it cannot be fenced)
// and the operator's work. It reports p50 and p95 over the iterations: run
// it with `make bench-failover` (-benchtime=Nx).
func BenchmarkFailover(b *testing.B) {
	benchFault(b, "failover to first write", func(b *testing.B, d dialect, ns, pod string) {
		if err := node.Down(ns, pod); err != nil {
			b.Fatal(err)
		}
	}, true)
}

// BenchmarkHungServer measures detection by the pod's own agent: the
// primary's server hangs (SIGSTOP), its agent stops renewing the Lease,
// kills the server once its Lease time is up and starts it again, still
// the Lease's holder; the figure is the time to the first write through
// -rw, on the same primary.
func BenchmarkHungServer(b *testing.B) {
	benchFault(b, "hung server to first write", func(b *testing.B, d dialect, ns, pod string) {
		hangServer(b, d, ns, pod)
	}, false)
}

// BenchmarkFailoverBesideHungDatabase is BenchmarkFailover while, at the
// same moment, another Database's primary server hangs (SIGSTOP): the
// operator's calls to it wait out their deadlines on their own worker and
// must not delay this failover. Compare with BenchmarkFailover's figure.
func BenchmarkFailoverBesideHungDatabase(b *testing.B) {
	benchFault(b, "failover beside a hung Database to first write", func(b *testing.B, d dialect, ns, pod string) {
		if err := node.Down(ns, pod); err != nil {
			b.Fatal(err)
		}
	}, true, hungBeside)
}

// hungBeside makes another two-instance Database of d's engine and
// returns what hangs its primary's server (SIGSTOP; its agent kills and
// restarts it after the Lease's time).
func hungBeside(t testing.TB, d dialect) func() {
	other, _ := haDatabase(t, d, "hung", 2)
	return func() {
		hangServer(t, d, other.Namespace, other.Name+"-0")
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), other) })
	}
}

// hangServer stops (SIGSTOP) pod's database server process.
func hangServer(t testing.TB, d dialect, ns, pod string) {
	t.Helper()
	pid := map[dbv1.Engine]string{
		dbv1.EnginePostgreSQL: `"$(head -1 "$PGDATA/postmaster.pid")"`,
		dbv1.EngineMariaDB:    `"$(cat "$DATADIR/$(hostname).pid")"`,
	}[d.engine]
	if out, err := node.Exec(ns, pod, "database", []string{"sh", "-c", "kill -STOP " + pid}); err != nil {
		t.Fatalf("kill -STOP the server of %s: %v: %s", pod, err, out)
	}
}

// benchFault runs fault on a three-instance Database's primary b.N times
// per engine and reports p50 and p95 of the time to the first write
// through -rw (on another primary when moved, on the same when not).
// beside, when given, prepares another fault applied at the same moment.
func benchFault(b *testing.B, what string, fault func(b *testing.B, d dialect, ns, pod string), moved bool, beside ...func(testing.TB, dialect) func()) {
	for _, d := range dialects {
		b.Run(d.name(), func(b *testing.B) {
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				times = append(times, faultOnce(b, d, fault, moved, beside...))
				b.StartTimer()
			}
			slices.Sort(times)
			b.Logf("%s %s, sorted: %v", d.name(), what, times)
			b.ReportMetric(float64(percentile(times, 0.5).Milliseconds()), "p50-ms")
			b.ReportMetric(float64(percentile(times, 0.95).Milliseconds()), "p95-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// faultOnce builds a three-instance Database, applies fault to its
// primary and returns how long until a write through -rw succeeds.
func faultOnce(b *testing.B, d dialect, fault func(b *testing.B, d dialect, ns, pod string), moved bool, beside ...func(testing.TB, dialect) func()) time.Duration {
	db, open := haDatabase(b, d, "bench", 3, func(db *dbv1.Database) { *db.Spec.Failover.DelaySeconds = 0 })
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	var also []func()
	for _, prepare := range beside {
		also = append(also, prepare(b, d))
	}
	old := db.Name + "-0"
	r := clusterResolver()
	start := time.Now()
	for _, f := range also {
		f()
	}
	fault(b, d, db.Namespace, old)
	// A new id per attempt: a write whose answer was lost may have been
	// committed, and retrying its id would fail for ever as a duplicate.
	var last error
	for id := 1; time.Since(start) < 2*time.Minute; id++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := r.LookupHost(ctx, db.Name+"-rw."+db.Namespace+".svc.cluster.local")
		cancel()
		switch {
		case err != nil:
			last = err
		case len(addrs) != 1:
			last = fmt.Errorf("-rw resolves to %v", addrs)
		default:
			c := open(addrs[0])
			err := execTimeout(c, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'after')", id))
			_ = c.Close()
			if err == nil && (podRole(db.Namespace, old) != "primary") == moved {
				return time.Since(start)
			}
			last = err
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := &dbv1.Database{}
	_ = k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got)
	b.Fatalf("no write through %s-rw within 2 minutes (last: %v); status %+v", db.Name, last, got.Status)
	return 0
}

// percentile is the p-th of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
