package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// synchronous makes a Database's replication synchronous, k replicas per commit.
func synchronous(k int32) func(*dbv1.Database) {
	return func(db *dbv1.Database) {
		db.Spec.Replication = dbv1.ReplicationSpec{Mode: dbv1.ReplicationSynchronous, SynchronousReplicas: ptr.To(k)}
	}
}

// TestSynchronousPartitionLosesNoWrite: the partition scenario (the
// primary cut off from everything but a client on its own machine) with
// synchronous replication, one replica of two per commit. The partitioned
// primary can no longer have a commit acknowledged (no replica receives
// it), so no write it acknowledged is missing from the new primary: zero
// lost, where asynchronous replication loses (and sets aside) some.
func TestSynchronousPartitionLosesNoWrite(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			res := partitionOnce(t, d, "syncpart", 3, synchronous(1))
			t.Logf("synchronous partition: -rw writable after %s, two-writer time %s, %d of %d acknowledged writes lost",
				res.toRW.Round(time.Millisecond), res.twoWriters, res.lost, res.acked)
		})
	}
}

// BenchmarkSynchronousPartition repeats TestSynchronousPartitionLosesNoWrite
// (`make bench-faults`).
func BenchmarkSynchronousPartition(b *testing.B) {
	benchRuns(b, "synchronous (1 of 2 replicas): primary cut off, then healed", func(b *testing.B, d dialect) faultRun {
		return partitionOnce(b, d, "syncpart", 3, synchronous(1))
	})
}

// TestSynchronousPrimaryAndStandbyLost: three instances, each commit on one
// of the two replicas. The primary's machine and one replica's are lost
// together. The replica left may not hold every acknowledged write (the
// lost one may have been the only one to), so nothing is promoted: the
// Database stays without a writable primary and says why, in an Event and
// the Degraded condition. When the lost replica's machine returns, the
// operator sees both replicas' positions, promotes the furthest, and no
// acknowledged write is lost.
//
// make test runs it on PostgreSQL: the decision is the operator's, from the
// positions it reads, the same for both engines; MariaDB's semi-synchronous
// settings are proven by TestSynchronousPartitionLosesNoWrite. The full tier
// runs both.
func TestSynchronousPrimaryAndStandbyLost(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			if d.engine != dbv1.EnginePostgreSQL {
				fullTier(t)
			}
			db, open := haDatabase(t, d, "synclost", 3, synchronous(1), func(db *dbv1.Database) { *db.Spec.Failover.DelaySeconds = 0 })
			ns := db.Namespace
			old, lost, left := db.Name+"-0", db.Name+"-1", db.Name+"-2"
			stopRW := writeThroughRWTimed(d, db, open, 1000)
			time.Sleep(3 * time.Second) // writes under way
			for _, pod := range []string{old, lost} {
				if err := node.Down(ns, pod); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _ = node.Up(ns, old); _ = node.Up(ns, lost) })
			// Until the refusal is said, and then past the Lease's expiry and
			// the failover delay many times over: never a promotion.
			got := &dbv1.Database{}
			refused := time.Time{}
			for start := time.Now(); refused.IsZero() || time.Since(refused) < 20*time.Second; {
				if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
					t.Fatal(err)
				}
				if got.Status.CurrentPrimary != old || got.Status.LastFailover != nil {
					t.Fatalf("with the primary and a synchronous replica lost: primary %s, last failover %+v; want %s kept and no failover",
						got.Status.CurrentPrimary, got.Status.LastFailover, old)
				}
				if refused.IsZero() && slices.ContainsFunc(eventsAbout(t, ns, db.Name), func(e string) bool {
					return strings.HasPrefix(e, "Warning SynchronousStandbysUnreachable")
				}) {
					refused = time.Now()
				}
				if refused.IsZero() && time.Since(start) > 2*time.Minute {
					t.Fatalf("no SynchronousStandbysUnreachable Event within 2 minutes: %v", eventsAbout(t, ns, db.Name))
				}
				time.Sleep(500 * time.Millisecond)
			}
			if role := podRole(ns, left); role == "primary" {
				t.Fatalf("%s is labelled primary", left)
			}
			t.Logf("no promotion with one of two replicas; conditions %+v", got.Status.Conditions)

			if err := node.Up(ns, lost); err != nil {
				t.Fatal(err)
			}
			got = waitFailover(t, db, old, 3*time.Minute)
			acked := stopRW()
			t.Logf("%s promoted once %s returned; %d writes acknowledged through -rw", got.Status.CurrentPrimary, lost, len(acked))
			noAckedWriteLost(t, open(podIP(t, ns, got.Status.CurrentPrimary)), ids(acked))
			if err := node.Up(ns, old); err != nil {
				t.Fatal(err)
			}
			waitRunning(t, db, 3, 3*time.Minute)
		})
	}
}
