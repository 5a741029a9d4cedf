package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// ack is one acknowledged write and the server's clock just after it.
type ack struct {
	id int
	ms int64
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
		one = fmt.Sprintf(`psql -h 127.0.0.1 -U %s -d %s -qAt -c "INSERT INTO orders VALUES ($i, 'in-pod')" -c %q`, user, database, d.nowMillis())
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
			t.Fatalf("the writer in %s: %v: %s", pod, err, tail(string(out), 2000))
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
			acks = append(acks, ack{id, ms})
		}
	}
	return acks
}

// writeThroughRWTimed writes through the -rw Service, as an application
// in the cluster does, until stopped, and returns every acknowledged write
// with the server's clock right after it.
func writeThroughRWTimed(d dialect, db *dbv1.Database, open func(string) *sql.DB, from int) (stop func() []ack) {
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
				c := open(addrs[0])
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				if conn, err := c.Conn(ctx); err == nil {
					var ms int64
					if _, err := conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'rw')", i)); err == nil {
						if conn.QueryRowContext(ctx, d.nowMillis()).Scan(&ms) == nil {
							mu.Lock()
							acks = append(acks, ack{i, ms})
							mu.Unlock()
						}
					}
					_ = conn.Close()
				}
				cancel()
				_ = c.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() []ack {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return acks
	}
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

// partition is what one partition of a primary showed, by the servers'
// clocks: how long after the cut -rw took its first write, how long the
// two servers both took writes (0: never), and how many writes the old
// primary acknowledged that the new one lacks (set aside, or the run
// failed).
type partition struct {
	toRW, twoWriters time.Duration
	acked, lost      int
}

// partitionOnce runs the partition scenario on a new Database of n
// instances and fails t on any violation (see
// TestPartitionedPrimaryStopsTakingWrites); with synchronous replication
// (mutate), a single lost acknowledged write is one.
func partitionOnce(t testing.TB, d dialect, name string, n int32, mutate ...func(*dbv1.Database)) partition {
	db, open := haDatabase(t, d, name, n, mutate...)
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns := db.Namespace
	old := db.Name + "-0"

	inPod := writeInPod(t, d, db, old, 100000, 50*time.Second)
	time.Sleep(2 * time.Second) // the in-pod writer is under way
	if err := node.Partition(ns, old); err != nil {
		t.Fatal(err)
	}
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
	cut := time.Now()
	stopRW := writeThroughRWTimed(d, db, open, 200000)
	got := waitFailover(t, db, old, 2*time.Minute)
	repl := got.Status.CurrentPrimary
	t.Logf("%s promoted %s after the partition", repl, time.Since(cut).Round(time.Second))
	oldAcks := inPod()
	rwAcks := stopRW()
	if len(oldAcks) == 0 || len(rwAcks) == 0 {
		t.Fatalf("acknowledged writes: %d in the partitioned pod, %d through -rw; want some of each", len(oldAcks), len(rwAcks))
	}
	lastOld := slices.MaxFunc(oldAcks, func(a, b ack) int { return int(a.ms - b.ms) })
	firstNew := slices.MinFunc(rwAcks, func(a, b ack) int { return int(a.ms - b.ms) })
	res := partition{toRW: time.UnixMilli(firstNew.ms).Sub(cut), acked: len(oldAcks)}
	if lastOld.ms >= firstNew.ms {
		res.twoWriters = time.Duration(lastOld.ms-firstNew.ms) * time.Millisecond
	}
	t.Logf("the partitioned primary acknowledged %d writes, its last %s after the cut; -rw acknowledged %d, its first %s after the cut; gap %s",
		len(oldAcks), time.UnixMilli(lastOld.ms).Sub(cut).Round(time.Millisecond), len(rwAcks),
		res.toRW.Round(time.Millisecond), time.Duration(firstNew.ms-lastOld.ms)*time.Millisecond)
	if res.twoWriters > 0 {
		t.Errorf("two servers took writes at once: the partitioned primary acknowledged write %d at %s, after the new primary acknowledged write %d at %s",
			lastOld.id, time.UnixMilli(lastOld.ms).Format(time.StampMilli), firstNew.id, time.UnixMilli(firstNew.ms).Format(time.StampMilli))
	}
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), db.Name+"-primary", metav1.GetOptions{})
	if err != nil || holder(lease) != repl {
		t.Errorf("the primary Lease after the failover: %v (%v), want it held by %s", holder(lease), err, repl)
	}

	heal()
	waitRunning(t, db, n, 3*time.Minute)
	have := noAckedWriteLost(t, open(podIP(t, ns, repl)), ids(rwAcks))
	for _, a := range oldAcks {
		if !have[a.id] {
			res.lost++
		}
	}
	t.Logf("%d of the partitioned primary's %d acknowledged writes never reached the new primary", res.lost, len(oldAcks))
	if k := db.Spec.SynchronousReplicas(); k > 0 && res.lost > 0 {
		t.Errorf("synchronous replication (%d replica(s) per commit) lost %d acknowledged writes of the partitioned primary", k, res.lost)
	}
	if res.lost > 0 {
		// Asynchronous replication loses them; they must be kept aside.
		claim := claimDir(t, ns, "data-"+old)
		pattern := map[dbv1.Engine]string{dbv1.EnginePostgreSQL: "diverged-wal-*", dbv1.EngineMariaDB: "*rebuild*"}[d.engine]
		eventually(t, 3*time.Minute, "the former primary's diverged writes set aside", func() string {
			if aside, _ := filepath.Glob(filepath.Join(claim, pattern)); len(aside) == 0 {
				return "nothing set aside in " + claim
			}
			return ""
		})
	}
	return res
}

// BenchmarkPartition repeats the partition scenario (FAILOVER_RUNS times
// per engine: `make bench-failover`) and reports the time to a writable
// -rw (p50, p95), the longest time two servers took writes (required: 0)
// and the old primary's writes lost to asynchronous replication, all set
// aside (a run whose lost writes are not set aside fails).
func BenchmarkPartition(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.name(), func(b *testing.B) {
			var runs []partition
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runs = append(runs, partitionOnce(b, d, "part", 2))
				b.StartTimer()
			}
			toRW := make([]time.Duration, len(runs))
			var twoWriters time.Duration
			lost, acked := 0, 0
			for i, r := range runs {
				toRW[i], twoWriters = r.toRW, max(twoWriters, r.twoWriters)
				lost, acked = lost+r.lost, acked+r.acked
			}
			slices.Sort(toRW)
			b.Logf("%s partition: %d runs; time to writable -rw, sorted: %v; longest two-writer time %s; the old primary's acknowledged writes lost (set aside) %d of %d",
				d.name(), len(runs), toRW, twoWriters, lost, acked)
			b.ReportMetric(float64(percentile(toRW, 0.5).Milliseconds()), "p50-ms")
			b.ReportMetric(float64(percentile(toRW, 0.95).Milliseconds()), "p95-ms")
			b.ReportMetric(float64(twoWriters.Milliseconds()), "two-writers-ms")
			b.ReportMetric(float64(lost), "lost-set-aside")
			b.ReportMetric(0, "ns/op")
		})
	}
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
		t.Run(d.name(), func(t *testing.T) {
			db, _, primary, _ := replicatedPair(t, d, "cpo")
			ns := db.Namespace
			node.BlockAPI()
			t.Cleanup(node.UnblockAPI)
			outage := time.Now()
			var failed []string
			for id := 1000; time.Since(outage) < 45*time.Second; id++ {
				if err := execTimeout(primary, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'outage')", id)); err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", time.Since(outage).Round(time.Second), err))
				}
				time.Sleep(200 * time.Millisecond)
			}
			node.UnblockAPI()
			if len(failed) > 0 {
				t.Errorf("the primary refused %d writes during the control-plane outage (the failsafe should keep it): %v", len(failed), failed[:min(len(failed), 5)])
			}
			got := &dbv1.Database{}
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
				t.Fatal(err)
			}
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
		})
	}
}
