package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// nowMillis is the server's clock, in milliseconds since the epoch: every
// server runs on this machine, so their clocks compare.
func (d dialect) nowMillis() string {
	if d.engine == dbv1.EnginePostgreSQL {
		return "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
	}
	return "SELECT CAST(ROUND(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED)"
}

// ack is one acknowledged write and the server's clock just after it;
// host is the address written to, when not the pod's own loopback.
type ack struct {
	id   int
	ms   int64
	host string
}

// writeInPod writes rows ids from, from+1, ... on pod's own server over its
// loopback, as the application and as a client on the same machine would
// (a partition that cuts the pod off from the cluster does not cut it off
// from this client), for duration; it returns every acknowledged write
// with the server's clock read right after it, in the same session.
func writeInPod(t testing.TB, d dialect, db *dbv1.Database, pod string, from int, duration time.Duration) (wait func() []ack) {
	user, password, database := appCredentials(t, db)
	var one string
	if d.engine == dbv1.EnginePostgreSQL {
		one = fmt.Sprintf(`psql -h 127.0.0.1 -U %s -d %s -qAt -v ON_ERROR_STOP=1 -c "INSERT INTO orders VALUES ($i, 'in-pod')" -c %q`, user, database, d.nowMillis())
	} else {
		one = fmt.Sprintf(`mariadb -h127.0.0.1 -u%s %s -N -B -e "INSERT INTO orders VALUES ($i, 'in-pod'); %s"`, user, database, d.nowMillis())
	}
	script := fmt.Sprintf(`export PGPASSWORD=%q MYSQL_PWD=%q; i=%d; end=$(( $(date +%%s) + %d ))
while [ "$(date +%%s)" -lt "$end" ]; do
	if ms=$(%s 2>/dev/null) && [ -n "$ms" ]; then echo "ACK $i $ms"; fi
	i=$((i + 1)); sleep 0.05
done`, password, password, from, int(duration.Seconds()), one)
	var (
		out []byte
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err = node.Exec(db.Namespace, pod, "database", []string{"sh", "-c", script})
	}()
	return func() []ack {
		<-done
		if err != nil {
			// A pod whose machine was lost ends its writer: what it
			// printed before counts.
			t.Logf("the writer in %s ended early: %v: %s", pod, err, tail(string(out), 300))
		}
		return parseAcks(out)
	}
}

// ids are the acknowledged writes' ids.
func ids(acks []ack) []int {
	out := make([]int, len(acks))
	for i, a := range acks {
		out[i] = a.id
	}
	return out
}

func parseAcks(out []byte) []ack {
	var acks []ack
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ACK" {
			continue
		}
		id, err1 := strconv.Atoi(f[1])
		ms, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			acks = append(acks, ack{id: id, ms: ms})
		}
	}
	return acks
}

// writeThroughRWTimed writes through the -rw Service, as an application
// in the cluster does, until stopped, and returns every acknowledged write
// with the server's clock right after it.
func writeThroughRWTimed(d dialect, db *dbv1.Database, open func(string) *sql.DB, from int) (stop func() []ack) {
	stop, _ = writeThroughRWWatched(d, db, open, from)
	return stop
}

// writeThroughRWWatched is writeThroughRWTimed that also lets the test
// see the acknowledged writes so far (seen) while it runs.
func writeThroughRWWatched(d dialect, db *dbv1.Database, open func(string) *sql.DB, from int) (stop, seen func() []ack) {
	r := clusterResolver()
	var (
		mu   sync.Mutex
		acks []ack
	)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := from; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			addrs, err := r.LookupHost(ctx, fmt.Sprintf("%s-rw.%s.svc.cluster.local", db.Name, db.Namespace))
			cancel()
			if err == nil && len(addrs) == 1 {
				// A write to a server cut off mid-statement can hang in the
				// driver past its context (closing the connection): it is
				// left behind, unacknowledged, and the writer goes on.
				wrote := make(chan struct{})
				go func(id int, addr string) {
					defer close(wrote)
					if ms, ok := writeOne(d, open(addr), id); ok {
						mu.Lock()
						acks = append(acks, ack{id, ms, addr})
						mu.Unlock()
					}
				}(i, addrs[0])
				select {
				case <-wrote:
				case <-time.After(6 * time.Second):
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	seen = func() []ack {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(acks)
	}
	return func() []ack {
		close(quit)
		<-done
		return seen()
	}, seen
}

// writeOne inserts id through c and reads the server's clock in the same
// session; ok when both were acknowledged.
func writeOne(d dialect, c *sql.DB, id int) (ms int64, ok bool) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := c.Conn(ctx)
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'rw')", id)); err != nil {
		return 0, false
	}
	err = conn.QueryRowContext(ctx, d.nowMillis()).Scan(&ms)
	return ms, err == nil
}

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
