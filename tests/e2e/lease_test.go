package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// TestPartitionedPrimaryStopsTakingWrites: the primary is cut off from the
// operator, the API server and the other instances, but not from a client
// on its own machine, which keeps writing to it; another client writes
// through -rw. The primary's agent cannot renew the primary Lease, so it
// stops its server before the Lease expires; the operator promotes the
// replica only once the Lease has expired. Required: no write acknowledged
// by the old primary after the new one acknowledged its first (zero time
// with two servers taking writes, by the servers' own clocks), and every
// write the old primary took that the new one lacks is set aside, not
// deleted, once the partition heals.
func TestPartitionedPrimaryStopsTakingWrites(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) { partitionOnce(t, d, "part", 2) })
	}
}

// partitionOnce runs the partition scenario on a new Database of n
// instances and fails t on any violation (see
// TestPartitionedPrimaryStopsTakingWrites); with synchronous replication
// (mutate), a single lost acknowledged write is one.
func partitionOnce(t testing.TB, d dialect, name string, n int32, mutate ...func(*dbv1.Database)) faultRun {
	return partitionWith(t, d, name, n, nil, mutate...)
}

// partitionWith is partitionOnce with another fault during the failover:
// during, when given, runs in its own goroutine from the moment of the
// cut, and the failover must complete in spite of it.
func partitionWith(t testing.TB, d dialect, name string, n int32, during func(db *dbv1.Database), mutate ...func(*dbv1.Database)) faultRun {
	db, open := haDatabase(t, d, name, n, mutate...)
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns := db.Namespace
	old := db.Name + "-0"
	oldIP := podIP(t, ns, old)

	writes := watchWrites(t, d, db, open, 50*time.Second, old)
	time.Sleep(2 * time.Second) // the in-pod writer is under way
	if err := node.Partition(ns, old); err != nil {
		t.Fatal(err)
	}
	writes.faultNow()
	healed := false
	heal := func() {
		if !healed {
			healed = true
			if err := node.Heal(ns, old); err != nil {
				t.Error(err)
			}
		}
	}
	defer heal()
	duringDone := make(chan struct{})
	go func() {
		defer close(duringDone)
		if during != nil {
			during(db)
		}
	}()
	got := waitFailover(t, db, old, 3*time.Minute)
	<-duringDone
	repl := got.Status.CurrentPrimary
	t.Logf("%s promoted %s after the partition", repl, time.Since(writes.fault).Round(time.Second))
	// Status may name the new primary before -rw reaches it.
	// After an API server restart the control plane's controllers (and
	// the operator's cache) take a minute or more to catch up.
	writes.waitRW(oldIP, 3*time.Minute)
	res := writes.stop(old)
	if n := writes.counts(); n[old] == 0 {
		t.Fatalf("acknowledged writes %v: want some in the partitioned pod", n)
	}
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), db.Name+"-primary", metav1.GetOptions{})
	if err != nil || holder(lease) != repl {
		t.Errorf("the primary Lease after the failover: %v (%v), want it held by %s", holder(lease), err, repl)
	}

	heal()
	waitRunning(t, db, n, 3*time.Minute)
	writes.lost(&res, open(podIP(t, ns, repl)), old)
	return res
}

// BenchmarkPartition repeats the partition scenario (FAILOVER_RUNS times
// per engine: `make bench-failover`) and reports the time to a writable
// -rw (p50, p95), the longest time two servers took writes (required: 0)
// and the old primary's writes lost to asynchronous replication, all set
// aside (a run whose lost writes are not set aside fails).
func BenchmarkPartition(b *testing.B) {
	benchRuns(b, "primary cut off (a client on its machine still writes), then healed", func(b *testing.B, d dialect) faultRun {
		return partitionOnce(b, d, "part", 2)
	})
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestControlPlaneOutageKeepsThePrimary: the database pods lose the API
// server for three Lease durations while they still reach each other. The
// primary's agent cannot renew its Lease; it stays writable because its
// replica confirms, over the agents' peer channel, that it still follows
// it (the failsafe). Nothing is promoted, and renewals resume afterwards.
func TestControlPlaneOutageKeepsThePrimary(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) { controlPlaneOutage(t, d) })
	}
}

// BenchmarkControlPlaneOutage repeats TestControlPlaneOutageKeepsThePrimary
// (`make bench-faults`); its time to a writable -rw is the longest time the
// primary refused writes (0: never).
func BenchmarkControlPlaneOutage(b *testing.B) {
	benchRuns(b, "API server unreachable for 3 Lease durations (the failsafe)", func(b *testing.B, d dialect) faultRun {
		return controlPlaneOutage(b, d)
	})
}

// controlPlaneOutage runs the scenario on a new Database and fails t
// unless the primary took every write and nothing was promoted.
func controlPlaneOutage(t testing.TB, d dialect) faultRun {
	db, _, primary, _ := replicatedPair(t, d, "cpo")
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns := db.Namespace
	node.BlockAPI()
	defer node.UnblockAPI()
	outage := time.Now()
	var failed []string
	var res faultRun
	var refusedSince time.Time
	for id := 1000; time.Since(outage) < 45*time.Second; id++ {
		if err := execTimeout(primary, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'outage')", id)); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", time.Since(outage).Round(time.Second), err))
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			res.toRW = max(res.toRW, time.Since(refusedSince))
		} else {
			res.acked++
			refusedSince = time.Time{}
		}
		time.Sleep(200 * time.Millisecond)
	}
	node.UnblockAPI()
	if len(failed) > 0 {
		t.Errorf("the primary refused %d writes during the control-plane outage (the failsafe should keep it): %v", len(failed), failed[:min(len(failed), 5)])
	}
	got := k8sDatabase(t, db)
	if got.Status.CurrentPrimary != db.Name+"-0" || got.Status.LastFailover != nil {
		t.Errorf("after the outage: primary %s, last failover %+v; want %s-0 and none", got.Status.CurrentPrimary, got.Status.LastFailover, db.Name)
	}
	before, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), db.Name+"-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the primary Lease renewed again", func() string {
		l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), db.Name+"-primary", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if holder(l) != db.Name+"-0" || l.ResourceVersion == before.ResourceVersion {
			return fmt.Sprintf("holder %s, version %s", holder(l), l.ResourceVersion)
		}
		return ""
	})
	return res
}
