package e2e

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	benchFault(b, "failover to first write", func(b *testing.B, _ dialect, ns, pod string) {
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
	benchFault(b, "failover beside a hung Database to first write", func(b *testing.B, _ dialect, ns, pod string) {
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
// per engine (see faultOnce).
func benchFault(b *testing.B, what string, fault func(b *testing.B, d dialect, ns, pod string), moved bool, beside ...func(testing.TB, dialect) func()) {
	benchRuns(b, what, func(b *testing.B, d dialect) faultRun { return faultOnce(b, d, fault, moved, beside...) })
}

// benchRuns runs one fault scenario b.N times per engine, reports p50 and
// p95 of the time to a writable -rw, the longest two-writer time and the
// writes lost (set aside), and keeps the runs for the table TestMain
// prints (`make bench-faults`).
func benchRuns(b *testing.B, scenario string, once func(b *testing.B, d dialect) faultRun) {
	for _, d := range dialects {
		b.Run(d.name(), func(b *testing.B) {
			if n := requestedRuns(); n > 1 && b.N != n {
				// The testing package calls a benchmark once with N=1
				// before N=n: minutes per run here, so that call is
				// skipped.
				b.ReportMetric(0, "ns/op")
				return
			}
			var runs []faultRun
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runs = append(runs, once(b, d))
				b.StartTimer()
			}
			faultTable[[2]string{scenario, d.name()}] = runs
			var toRW []time.Duration
			var two, gap time.Duration
			lost := 0
			for _, r := range runs {
				toRW, two, lost, gap = append(toRW, r.toRW), max(two, r.twoWriters), lost+r.lost, max(gap, r.rwGap)
			}
			slices.Sort(toRW)
			b.Logf("%s %s: time to writable -rw, sorted: %v", d.name(), scenario, toRW)
			b.ReportMetric(float64(percentile(toRW, 0.5).Milliseconds()), "p50-ms")
			b.ReportMetric(float64(percentile(toRW, 0.95).Milliseconds()), "p95-ms")
			b.ReportMetric(float64(two.Milliseconds()), "two-writers-ms")
			b.ReportMetric(float64(lost), "lost-set-aside")
			b.ReportMetric(float64(gap.Milliseconds()), "max-rw-pause-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// faultOnce builds a three-instance Database, applies fault to its
// primary under the write-history checker, waits for a write through -rw
// (on another primary when moved, on the same when not), brings the
// primary's machine back and, once the Database converged, counts the
// acknowledged writes the final primary lacks.
func faultOnce(b *testing.B, d dialect, fault func(b *testing.B, d dialect, ns, pod string), moved bool, beside ...func(testing.TB, dialect) func()) faultRun {
	db, open := haDatabase(b, d, "bench", 3, func(db *dbv1.Database) { *db.Spec.Failover.DelaySeconds = 0 })
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	var also []func()
	for _, prepare := range beside {
		also = append(also, prepare(b, d))
	}
	ns, old := db.Namespace, db.Name+"-0"
	oldIP := podIP(b, ns, old)
	writes := watchWrites(b, d, db, open, 30*time.Second, old)
	time.Sleep(time.Second) // the writers are under way
	for _, f := range also {
		f()
	}
	fault(b, d, ns, old)
	// After the fault is in place: a write acknowledged just before it
	// must not count as the first one after.
	writes.faultNow()
	from := ""
	if moved {
		from = old
	}
	notIP := ""
	if moved {
		notIP = oldIP
	}
	writes.waitRW(notIP, 2*time.Minute)
	res := writes.stop(from)
	_ = node.Up(ns, old)
	got := waitRunning(b, db, 3, 3*time.Minute)
	writes.lost(&res, open(podIP(b, ns, got.Status.CurrentPrimary)), from)
	return res
}

// requestedRuns is N of -benchtime=Nx, or 0.
func requestedRuns() int {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSuffix(f.Value.String(), "x"))
	if err != nil || !strings.HasSuffix(f.Value.String(), "x") {
		return 0
	}
	return n
}

// percentile is the p-th of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// BenchmarkRecoveryPoint repeats the recovery point of TestPointInTimeRecovery:
// a PostgreSQL Database archiving with a 10 s timeout and a physical Backup,
// its primary's machine lost after 25 s of writes and the Database deleted with its
// volumes, the latest moment recovered into a new Database. It prints the
// acknowledged writes lost and the recovery point per run and their p50/max.
// restoreRates reads the recover program's rates from its result.
var restoreRates = regexp.MustCompile(`unpacked [0-9.]+ MB in [^ ]+ \(([0-9.]+) MB/s\), replayed [0-9.]+ MB of WAL in [^ ]+ \(([0-9.]+) MB/s\)`)

func BenchmarkRecoveryPoint(b *testing.B) {
	var points []time.Duration
	var lost []int
	var unpack, replay []float64
	for i := 0; i < b.N; i++ {
		p := newPITRSource(b, fmt.Sprintf("rpo%d", i), 1)
		p.backup("base")
		// Writes for longer than the archive timeout: the figure is the
		// archiving's, not the writer's.
		n, point, msg := p.recoveryPoint("base", fmt.Sprintf("rpo%d-latest", i), 25*time.Second)
		b.Logf("run %d: %d acknowledged writes lost, recovery point %s", i+1, n, point.Round(time.Millisecond))
		points, lost = append(points, point), append(lost, n)
		if m := restoreRates.FindStringSubmatch(msg); m != nil {
			u, _ := strconv.ParseFloat(m[1], 64)
			r, _ := strconv.ParseFloat(m[2], 64)
			unpack, replay = append(unpack, u), append(replay, r)
		}
	}
	if len(unpack) > 0 {
		slices.Sort(unpack)
		slices.Sort(replay)
		b.ReportMetric(unpack[len(unpack)/2], "unpack-MB/s-p50")
		b.ReportMetric(replay[len(replay)/2], "replay-MB/s-p50")
		fmt.Printf("restore over %d runs: base backup checked and unpacked at p50 %.1f MB/s (min %.1f), WAL replayed at p50 %.1f MB/s (min %.1f)\n",
			len(unpack), unpack[len(unpack)/2], unpack[0], replay[len(replay)/2], replay[0])
	}
	reportRecoveryPoint(b, "recovery point", points, lost)
}

// reportRecoveryPoint reports and prints the recovery points and the
// acknowledged writes lost over the runs.
func reportRecoveryPoint(b *testing.B, what string, points []time.Duration, lost []int) {
	slices.Sort(points)
	slices.Sort(lost)
	b.ReportMetric(points[len(points)/2].Seconds(), "rpo-p50-s")
	b.ReportMetric(points[len(points)-1].Seconds(), "rpo-max-s")
	b.ReportMetric(float64(lost[len(lost)/2]), "lost-writes-p50")
	fmt.Printf("%s over %d runs (archive timeout 10 s): p50 %s, max %s; acknowledged writes lost p50 %d, max %d\n",
		what, len(points), points[len(points)/2].Round(time.Millisecond), points[len(points)-1].Round(time.Millisecond), lost[len(lost)/2], lost[len(lost)-1])
}

// BenchmarkMariaDBRecoveryPoint is BenchmarkRecoveryPoint for MariaDB: its
// binary log archived by the primary's agent (timeout 10 s), the primary's
// machine lost under writes, the Database deleted with its volumes, the
// latest moment the archive holds restored from a dump into a new
// Database. It prints the recovery point and the replay's rate.
func BenchmarkMariaDBRecoveryPoint(b *testing.B) {
	var points []time.Duration
	var lost []int
	var rates []float64
	for i := 0; i < b.N; i++ {
		p := newMariaPITRSource(b, fmt.Sprintf("mrpo%d", i))
		p.backup("base")
		n, point, msg := p.recoveryPoint("base", fmt.Sprintf("mrpo%d-latest", i), 25*time.Second)
		b.Logf("run %d: %d acknowledged writes lost, recovery point %s", i+1, n, point.Round(time.Millisecond))
		points, lost = append(points, point), append(lost, n)
		if m := replayRate.FindStringSubmatch(msg); m != nil {
			tx, _ := strconv.ParseFloat(m[1], 64)
			if d, err := time.ParseDuration(m[2]); err == nil && d > 0 {
				rates = append(rates, tx/d.Seconds())
			}
		}
	}
	if len(rates) > 0 {
		slices.Sort(rates)
		b.ReportMetric(rates[len(rates)/2], "replay-tx/s-p50")
		fmt.Printf("binary log replay over %d runs: p50 %.0f transactions/s (min %.0f)\n", len(rates), rates[len(rates)/2], rates[0])
	}
	reportRecoveryPoint(b, "MariaDB recovery point", points, lost)
}

// replayRate reads the restore's binary log replay from its result.
var replayRate = regexp.MustCompile(`replayed ([0-9]+) transactions of the binary log \([^)]*applied in ([^ )]+)\)`)
