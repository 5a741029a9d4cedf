package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// faultRun is what the write-history checker saw in one fault scenario,
// by the servers' own clocks (every server runs on this machine).
type faultRun struct {
	// toRW: from the fault to the first write -rw acknowledged on the
	// server that serves after it.
	toRW time.Duration
	// twoWriters: the longest time two servers both acknowledged writes
	// (required: 0).
	twoWriters time.Duration
	// acked writes in all; lost: those the final primary lacks (with
	// asynchronous replication each must be set aside, never deleted).
	acked, lost int
}

// checker records every acknowledged write of a fault scenario: an
// application writing through -rw (resolved at each write) and, on each
// named pod, a client on the pod's own machine writing to its server as
// the application account (a stale pooled client the fault does not cut
// off), each write with its server's clock read in the same session.
type checker struct {
	t     testing.TB
	d     dialect
	db    *dbv1.Database
	rw    func() []ack
	rwNow func() []ack // -rw's so far
	inPod map[string]func() []ack
	rwAck []ack // -rw's, once stopped
	fault time.Time
	acks  map[string][]ack // by pod, once stopped
	// ips names the pods by address, as they were at the start and at
	// the end (a recreated pod may change address).
	ips map[string]string
}

func (c *checker) learnAddresses() {
	pods, err := cs.CoreV1().Pods(c.db.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			c.ips[p.Status.PodIP] = p.Name
		}
	}
}

var checkers atomic.Int32

// watchWrites starts the writers: through -rw until stop, and in each of
// pods for inPodFor.
func watchWrites(t testing.TB, d dialect, db *dbv1.Database, open func(string) *sql.DB, inPodFor time.Duration, pods ...string) *checker {
	c := &checker{t: t, d: d, db: db, inPod: map[string]func() []ack{}, fault: time.Now(), ips: map[string]string{}}
	c.learnAddresses()
	// Ids of their own: a Database may see several scenarios, and a
	// write with an id taken already would fail as a duplicate.
	base := int(checkers.Add(1)) * 1000000
	for i, pod := range pods {
		c.inPod[pod] = writeInPod(t, d, db, pod, base+100000*(i+1), inPodFor)
	}
	c.rw, c.rwNow = writeThroughRWWatched(d, db, open, base)
	return c
}

// waitRW waits until the -rw writer has had a write acknowledged, after
// the fault, by a server other than the one at notIP: the Database serves
// again, as its application sees it.
func (c *checker) waitRW(notIP string, timeout time.Duration) {
	c.t.Helper()
	eventually(c.t, timeout, "a write through -rw after the fault", func() string {
		for _, a := range c.rwNow() {
			if a.host != notIP && a.ms >= c.fault.UnixMilli() {
				return ""
			}
		}
		return "none yet"
	})
}

// faultNow marks the moment of the fault.
func (c *checker) faultNow() { c.fault = time.Now() }

// stop ends the -rw writer, waits for the in-pod ones, and reports the
// time to a writable -rw (on a server other than moved from, when
// given) and the longest time two servers took writes, failing t when
// two did.
func (c *checker) stop(movedFrom string) faultRun {
	t := c.t
	t.Helper()
	c.learnAddresses()
	c.acks = map[string][]ack{}
	var res faultRun
	c.rwAck = c.rw()
	for _, a := range c.rwAck {
		pod := c.ips[a.host]
		c.acks[pod] = append(c.acks[pod], a)
		if a.ms >= c.fault.UnixMilli() && pod != movedFrom && (res.toRW == 0 || time.UnixMilli(a.ms).Sub(c.fault) < res.toRW) {
			res.toRW = time.UnixMilli(a.ms).Sub(c.fault)
		}
	}
	for pod, wait := range c.inPod {
		c.acks[pod] = append(c.acks[pod], wait()...)
	}
	if res.toRW == 0 {
		t.Errorf("no write through %s-rw after the fault", c.db.Name)
	}
	// Each server took writes from its first acknowledged write to its
	// last: two such spans that overlap are two writers.
	type span struct {
		pod         string
		first, last ack
	}
	var spans []span
	for pod, acks := range c.acks {
		res.acked += len(acks)
		if len(acks) == 0 {
			continue
		}
		byTime := func(a, b ack) int { return int(a.ms - b.ms) }
		spans = append(spans, span{pod, slices.MinFunc(acks, byTime), slices.MaxFunc(acks, byTime)})
	}
	for i := range spans {
		for j := range spans {
			a, b := spans[i], spans[j]
			if i == j || a.first.ms > b.first.ms {
				continue
			}
			if overlap := time.Duration(min(a.last.ms, b.last.ms)-b.first.ms) * time.Millisecond; overlap > res.twoWriters {
				res.twoWriters = overlap
				t.Errorf("two servers took writes at once for %s: %s acknowledged write %d at %s, after %s acknowledged write %d at %s",
					overlap, a.pod, a.last.id, time.UnixMilli(a.last.ms).Format(time.StampMilli), b.pod, b.first.id, time.UnixMilli(b.first.ms).Format(time.StampMilli))
			}
		}
	}
	t.Logf("writes acknowledged: %v; -rw writable %s after the fault", c.counts(), res.toRW.Round(time.Millisecond))
	return res
}

func (c *checker) counts() map[string]int {
	n := map[string]int{}
	for pod, acks := range c.acks {
		n[pod] = len(acks)
	}
	return n
}

// lost counts the acknowledged writes final (the primary once the
// Database converged) lacks. Every write -rw acknowledged must be there;
// a former primary's (from) that are not must have been set aside on its
// volume, and none at all may be missing with synchronous replication.
func (c *checker) lost(res *faultRun, final *sql.DB, from string) {
	t := c.t
	t.Helper()
	have := noAckedWriteLost(t, final, ids(c.rwAck))
	var missing []int
	for pod, acks := range c.acks {
		for _, a := range acks {
			if !have[a.id] {
				missing = append(missing, a.id)
				if pod != from {
					t.Errorf("write %d acknowledged by %s is not on the final primary", a.id, pod)
				}
			}
		}
	}
	res.lost = len(missing)
	t.Logf("%d of %d acknowledged writes never reached the final primary", res.lost, res.acked)
	if k := c.db.Spec.SynchronousReplicas(); k > 0 && res.lost > 0 {
		t.Errorf("synchronous replication (%d replica(s) per commit) lost %d acknowledged writes: %v", k, res.lost, missing)
	}
	if res.lost == 0 || from == "" {
		return
	}
	// Asynchronous replication loses them; they must be kept aside.
	claim := claimDir(t, c.db.Namespace, "data-"+from)
	pattern := map[dbv1.Engine]string{dbv1.EnginePostgreSQL: "diverged-wal-*", dbv1.EngineMariaDB: "*rebuild*"}[c.d.engine]
	eventually(t, 3*time.Minute, "the former primary's diverged writes set aside", func() string {
		if aside, _ := filepath.Glob(filepath.Join(claim, pattern)); len(aside) == 0 {
			return "nothing set aside in " + claim
		}
		return ""
	})
}

// faultTable collects the runs of the fault benchmarks (`make
// bench-faults`) by scenario and engine; TestMain prints it.
var faultTable = map[[2]string][]faultRun{}

// printFaultTable prints the table the README keeps: per scenario and
// engine, the runs, writes lost (all set aside when any), the longest
// two-writer time and p50/p95 of the time to a writable -rw.
func printFaultTable() {
	if len(faultTable) == 0 {
		return
	}
	keys := make([][2]string, 0, len(faultTable))
	for k := range faultTable {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if a[0] != b[0] {
			return strings.Compare(a[0], b[0])
		}
		return strings.Compare(a[1], b[1])
	})
	fmt.Println("\n| scenario | engine | runs | acknowledged writes lost (set aside) | max two-writer time | p50 / p95 time to writable -rw |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, k := range keys {
		runs := faultTable[k]
		var toRW []time.Duration
		var two time.Duration
		lost, acked := 0, 0
		for _, r := range runs {
			toRW, two = append(toRW, r.toRW), max(two, r.twoWriters)
			lost, acked = lost+r.lost, acked+r.acked
		}
		slices.Sort(toRW)
		fmt.Printf("| %s | %s | %d | %d of %d | %s | %s / %s |\n", k[0], k[1], len(runs), lost, acked, two,
			percentile(toRW, 0.5).Round(100*time.Millisecond), percentile(toRW, 0.95).Round(100*time.Millisecond))
	}
}
