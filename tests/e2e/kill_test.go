package e2e

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// A kill point is where the test's proxy kills the operator during a
// failover or a switchover: at (before it reaches the API server) or just
// after (reached, its answer lost) the first operator write match picks
// once armed. The operator's code has no hook: the kill is chosen from
// its writes to the API server.
type killPoint struct {
	name  string
	after bool
	match func(db *dbv1.Database, from, to string) func(*http.Request) bool
}

func isWrite(r *http.Request) bool {
	return r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch
}

// writeTo matches a write to the named object (path suffix, after the
// namespace).
func writeTo(suffix func(db *dbv1.Database, from, to string) string) func(db *dbv1.Database, from, to string) func(*http.Request) bool {
	return func(db *dbv1.Database, from, to string) func(*http.Request) bool {
		want := "/namespaces/" + db.Namespace + "/" + suffix(db, from, to)
		return func(r *http.Request) bool { return isWrite(r) && strings.HasSuffix(r.URL.Path, want) }
	}
}

var (
	leaseWrite    = writeTo(func(db *dbv1.Database, _, _ string) string { return "leases/" + db.Name + "-primary" })
	topologyWrite = writeTo(func(db *dbv1.Database, _, _ string) string { return "configmaps/" + db.Name + "-topology" })
	relabelOld    = bodyHas(func(_ *dbv1.Database, _, _ string) string { return "database.example.com/role" },
		writeTo(func(_ *dbv1.Database, from, _ string) string { return "pods/" + from }))
	// The status write that names the new primary, not a routine one.
	statusWrite = bodyHas(func(_ *dbv1.Database, _, to string) string { return `"currentPrimary":"` + to + `"` },
		writeTo(func(db *dbv1.Database, _, _ string) string { return "databases/" + db.Name + "/status" }))
)

// bodyHas narrows match to requests whose body holds what text says (the
// role label, not another annotation of the same pod).
func bodyHas(text func(db *dbv1.Database, from, to string) string, match func(db *dbv1.Database, from, to string) func(*http.Request) bool) func(db *dbv1.Database, from, to string) func(*http.Request) bool {
	return func(db *dbv1.Database, from, to string) func(*http.Request) bool {
		m, s := match(db, from, to), text(db, from, to)
		return func(r *http.Request) bool {
			if !m(r) || r.GetBody == nil {
				return false
			}
			body, err := r.GetBody()
			if err != nil {
				return false
			}
			defer body.Close()
			b, _ := io.ReadAll(body)
			return strings.Contains(string(b), s)
		}
	}
}

// The kill points: every write the operator makes to the API server
// between the steps of a failover or a switchover, in their order (the
// steps on the servers, fence, catch-up and promotion, fall between
// them). Events are sent on their own, later, so none is a kill point.
var (
	failoverKills = []killPoint{
		{"before the Lease hand-over", false, leaseWrite},
		{"after the Lease hand-over", true, leaseWrite},
		{"before the primary is recorded", false, topologyWrite},
		{"after the primary is recorded, before the promotion", true, topologyWrite},
		{"after the promotion, before the old primary's relabel", false, relabelOld},
		{"after the relabel, before the status write", false, statusWrite},
	}
	switchoverKills = []killPoint{
		{"after the fence and catch-up, before the Lease hand-over", false, leaseWrite},
		{"after the Lease hand-over", true, leaseWrite},
		{"before the primary is recorded", false, topologyWrite},
		{"after the primary is recorded, before the promotion", true, topologyWrite},
		{"after the promotion, before the old primary's relabel", false, relabelOld},
		{"after the relabel, before the status write", false, statusWrite},
	}
)

// armKill arms kp for a move of the primary from from to to and returns
// what waits for the kill and starts a new operator a second later, as a
// restarted pod or a new leader would; it fails t when the kill point was
// never reached.
func armKill(t testing.TB, kp killPoint, db *dbv1.Database, from, to string) (restarted func()) {
	arm := op.killAt
	if kp.after {
		arm = op.killAfter
	}
	killed := arm(kp.match(db, from, to))
	// It may run beside the test's goroutine: it reports, never stops it.
	return func() {
		select {
		case <-killed:
		case <-time.After(3 * time.Minute):
			op.disarm()
			t.Errorf("the operator never reached the kill point %q", kp.name)
		}
		time.Sleep(time.Second)
		if err := op.restart(); err != nil {
			t.Errorf("starting the operator again: %v", err)
		}
	}
}

// TestOperatorKilledDuringFailover: the partition scenario (the primary
// cut off, a client on its machine still writing) with the operator
// killed at each step of the failover and a new one started: no two
// servers ever take writes, the failover completes, and every write the
// old primary took that the new one lacks is set aside.
func TestOperatorKilledDuringFailover(t *testing.T) {
	fullTier(t)
	for _, d := range dialects {
		for _, kp := range failoverKills {
			t.Run(d.name()+"/"+kp.name, func(t *testing.T) {
				partitionWith(t, d, "kf", 2, func(db *dbv1.Database) {
					armKill(t, kp, db, db.Name+"-0", db.Name+"-1")()
				})
			})
		}
	}
}

// TestOperatorKilledDuringSwitchover: the user moves the primary back and
// forth under writes (through -rw, and on each pod's machine as the
// application), the operator killed at each step of each switchover and a
// new one started: every move completes, no two servers take writes at
// once, and no acknowledged write is lost.
func TestOperatorKilledDuringSwitchover(t *testing.T) {
	fullTier(t)
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open := haDatabase(t, d, "ks", 2)
			for i, kp := range switchoverKills {
				from, to := db.Name+"-0", db.Name+"-1"
				if i%2 == 1 {
					from, to = to, from
				}
				switchoverKilled(t, d, db, open, kp, from, to)
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestAPIServerRestartedDuringFailover: the partition scenario while the
// API server goes down for 10 s and comes back, once the operator has
// seen the primary fail: the failover completes with no two writers and
// the old primary's lost writes set aside.
func TestAPIServerRestartedDuringFailover(t *testing.T) {
	fullTier(t)
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			partitionWith(t, d, "apirestart", 2, restartAPIServerOnceUnhealthy(t))
		})
	}
}

// restartAPIServerOnceUnhealthy restarts the API server (down for 10 s)
// once the operator has seen the primary fail, then the scheduler, as a
// control plane restarted as a whole would (left alone, its cache went
// corrupt after a few API server restarts and it scheduled nothing more:
// every later test's pods stayed Pending). It runs beside the test's
// goroutine: it reports, never stops it.
func restartAPIServerOnceUnhealthy(t testing.TB) func(db *dbv1.Database) {
	return func(db *dbv1.Database) {
		for start := time.Now(); !slices.ContainsFunc(eventsAbout(t, db.Namespace, db.Name), func(e string) bool {
			return strings.HasPrefix(e, "Warning PrimaryUnhealthy")
		}); time.Sleep(200 * time.Millisecond) {
			if time.Since(start) > time.Minute {
				t.Errorf("no PrimaryUnhealthy Event within a minute of the partition")
				return
			}
		}
		if err := cluster.RestartAPIServer(context.Background(), 10*time.Second); err != nil {
			t.Errorf("restarting the API server: %v", err)
		}
		if err := cluster.RestartScheduler(context.Background()); err != nil {
			t.Errorf("restarting the scheduler: %v", err)
		}
	}
}

func k8sDatabase(t testing.TB, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	got := &dbv1.Database{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// fullTierSet: E2E_FULL is set (make test-faults, make test-full).
var fullTierSet = os.Getenv("E2E_FULL") != ""

// fullTier skips a scenario matrix unless E2E_FULL is set (`make
// test-faults`, `make test-full`): `make test` proves each guarantee once
// and must fit CI's time.
func fullTier(t testing.TB) {
	if !fullTierSet {
		t.Skip("a scenario of the full tier: make test-faults runs it (E2E_FULL=1)")
	}
}

// switchoverKilled moves db's primary from from to to under the
// write-history checker (through -rw, and on both pods' machines as the
// application) with the operator killed at kp and a new one started, and
// fails t unless the move completes with no failover, no two writers and
// no acknowledged write lost.
func switchoverKilled(t testing.TB, d dialect, db *dbv1.Database, open func(string) *sql.DB, kp killPoint, from, to string) faultRun {
	ns := db.Namespace
	t.Logf("switchover %s → %s, the operator killed %s", from, to, kp.name)
	writes := watchWrites(t, d, db, open, 30*time.Second, from, to)
	time.Sleep(time.Second)
	restarted := armKill(t, kp, db, from, to)
	updateDatabase(t, db, func(db *dbv1.Database) { db.Spec.Primary = to })
	writes.faultNow()
	restarted()
	eventually(t, 3*time.Minute, to+" the primary behind -rw", func() string { return primaryBehindRW(t, db, to) })
	waitRunning(t, db, 2, 3*time.Minute)
	res := writes.stop(from)
	writes.lost(&res, open(podIP(t, ns, to)), "")
	if got := k8sDatabase(t, db); got.Status.LastFailover != nil {
		t.Fatalf("the switchover killed %s ended in a failover: %+v", kp.name, got.Status.LastFailover)
	}
	return res
}

// BenchmarkOperatorKilledDuringFailover: the partition scenario with the
// operator killed at each failover kill point in turn (`make bench-faults`).
func BenchmarkOperatorKilledDuringFailover(b *testing.B) {
	i := 0
	benchRuns(b, "operator killed during a failover (each step in turn)", func(b *testing.B, d dialect) faultRun {
		kp := failoverKills[i%len(failoverKills)]
		i++
		return partitionWith(b, d, "kf", 2, func(db *dbv1.Database) { armKill(b, kp, db, db.Name+"-0", db.Name+"-1")() })
	})
}

// BenchmarkOperatorKilledDuringSwitchover: a switchover under writes with
// the operator killed at each switchover kill point in turn.
func BenchmarkOperatorKilledDuringSwitchover(b *testing.B) {
	i := 0
	benchRuns(b, "operator killed during a switchover (each step in turn)", func(b *testing.B, d dialect) faultRun {
		kp := switchoverKills[i%len(switchoverKills)]
		i++
		db, open := haDatabase(b, d, "ks", 2)
		defer func() { _ = k8s.Delete(context.Background(), db) }()
		return switchoverKilled(b, d, db, open, kp, db.Name+"-0", db.Name+"-1")
	})
}

// BenchmarkAPIServerRestartedDuringFailover repeats
// TestAPIServerRestartedDuringFailover.
func BenchmarkAPIServerRestartedDuringFailover(b *testing.B) {
	benchRuns(b, "API server restarted during a failover", func(b *testing.B, d dialect) faultRun {
		return partitionWith(b, d, "apirestart", 2, restartAPIServerOnceUnhealthy(b))
	})
}
