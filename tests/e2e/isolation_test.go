package e2e

import (
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// TestFailoverBesideHungDatabase: one Database's primary server hangs
// (SIGSTOP: connections are accepted by the kernel and never answered)
// at the moment another Database's primary machine is lost. The calls to
// the hung server wait out their deadlines on their own worker; the other
// Database fails over all the same (its time is in the log, and in
// BenchmarkFailoverBesideHungDatabase beside BenchmarkFailover's).
func TestFailoverBesideHungDatabase(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	d := dialects[0]
	db, _ := haDatabase(t, d, "lost", 2, func(db *dbv1.Database) { *db.Spec.Failover.DelaySeconds = 0 })
	hang := hungBeside(t, d)
	old := db.Name + "-0"
	start := time.Now()
	hang()
	if err := node.Down(db.Namespace, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Up(db.Namespace, old) })
	got := waitFailover(t, db, old, 2*time.Minute)
	t.Logf("%s promoted %s after its primary was lost, beside a hung Database", got.Status.CurrentPrimary, time.Since(start).Round(100*time.Millisecond))
}
