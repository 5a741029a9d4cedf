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
// server gone. spec.failover.delaySeconds is 0, so the figure is detection
// plus the operator's work. It reports p50 and p95 over the iterations:
// run it with `make bench-failover` (-benchtime=Nx).
func BenchmarkFailover(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.name(), func(b *testing.B) {
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				times = append(times, failoverOnce(b, d))
				b.StartTimer()
			}
			slices.Sort(times)
			b.Logf("%s failover to first write, sorted: %v", d.name(), times)
			pct := func(p float64) float64 {
				return float64(times[min(len(times)-1, int(p*float64(len(times))))].Milliseconds())
			}
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// failoverOnce builds a three-instance Database, takes its primary's pod
// Down and returns how long until a write through -rw succeeds.
func failoverOnce(b *testing.B, d dialect) time.Duration {
	db, open := haDatabase(b, d, "bench", 3, func(db *dbv1.Database) { *db.Spec.Failover.DelaySeconds = 0 })
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	old := db.Name + "-0"
	r := clusterResolver()
	start := time.Now()
	if err := node.Down(db.Namespace, old); err != nil {
		b.Fatal(err)
	}
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
			if err == nil && podRole(db.Namespace, old) != "primary" {
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
