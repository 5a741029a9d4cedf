package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
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
	// rwGap: the longest time -rw acknowledged no write, from the last
	// acknowledgement before the fault on. A planned move (a scale-down,
	// a rollout) keeps the old primary serving until it hands over: toRW
	// counts that time, rwGap only the pause the application sees.
	rwGap time.Duration
}

// ack is one acknowledged write and the server's clock just after it (the
// client's, on this same machine, when reading the server's failed after
// the write was acknowledged: an acknowledgement is never dropped); host
// is the address written to ("" for a pod's own loopback), server the
// incarnation that acknowledged it (pod name and UID), known once the
// checker stopped.
type ack struct {
	id     int
	ms     int64
	host   string
	server string
}

// The writers of a fault scenario, each with ids of its own (an offset
// from the checker's base): an application that opens a new connection to
// -rw for each write (resolved each time); one that keeps a session open
// to -rw until a write fails (a connection pool); one per pod that keeps a
// session to the pod's address (a stale pool that never resolves again);
// and, in the named pods, a client on the pod's own machine writing over
// its loopback, a new connection each time (a partition does not cut it
// off).
const (
	rwPerWriteIDs = 0
	rwSessionIDs  = 50000
	inPodIDs      = 100000 // + 100000 per named pod
	podSessionIDs = 600000 // + 50000 per pod
)

// checker records every acknowledged write of a fault scenario, each with
// the acknowledging server's clock read in the same session.
type checker struct {
	t     testing.TB
	d     dialect
	db    *dbv1.Database
	rw    []func() []ack          // the -rw writers, stopping them
	rwNow func() []ack            // the per-write -rw writer's so far
	inPod map[string]func() []ack // the in-pod writers, waiting for them
	pods  []func() []ack          // the pod-address writers, stopping them
	fault time.Time
	book  *addressBook
	acks  map[string][]ack // by server (pod@uid), once stopped
	rwAck []ack            // every -rw writer's, once stopped
	byPod map[string][]ack // by pod name, once stopped
}

var checkers atomic.Int32

// watchWrites starts the writers: through -rw and to every pod's address
// until stop, and in each of pods (on the pod's machine) for inPodFor.
func watchWrites(t testing.TB, d dialect, db *dbv1.Database, open func(string) *sql.DB, inPodFor time.Duration, pods ...string) *checker {
	c := &checker{t: t, d: d, db: db, inPod: map[string]func() []ack{}, fault: time.Now(), book: watchAddresses(db.Namespace)}
	// Ids of their own: a Database may see several scenarios, and a
	// write with an id taken already would fail as a duplicate.
	base := int(checkers.Add(1)) * 1000000
	for i, pod := range pods {
		c.inPod[pod] = writeInPod(t, d, db, pod, base+inPodIDs+100000*i, inPodFor)
	}
	list, err := cs.CoreV1().Pods(db.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + db.Name})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range list.Items {
		if ip := p.Status.PodIP; ip != "" {
			stop, _ := writeOnSession(d, open, func() string { return ip }, base+podSessionIDs+50000*i)
			c.pods = append(c.pods, stop)
		}
	}
	perWrite, now := writeThroughRWWatched(d, db, open, base+rwPerWriteIDs)
	session, _ := writeOnSession(d, open, rwResolver(db), base+rwSessionIDs)
	c.rw, c.rwNow = []func() []ack{perWrite, session}, now
	return c
}

// waitRW waits until the per-write -rw writer has had a write
// acknowledged, after the fault, by a server other than the one at notIP:
// the Database serves again, as its application sees it.
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

// waitRWFrom waits for a write through -rw, after the fault, on a server
// other than notServer (pod@uid): the pod made again may take the role
// back as another incarnation (at another address, or the same).
func (c *checker) waitRWFrom(notServer string, timeout time.Duration) {
	c.t.Helper()
	eventually(c.t, timeout, "a write through -rw after the fault", func() string {
		for _, a := range c.rwNow() {
			if a.ms >= c.fault.UnixMilli() && c.book.server(a.host, a.ms) != notServer {
				return ""
			}
		}
		return "none yet"
	})
}

// faultNow marks the moment of the fault.
func (c *checker) faultNow() { c.fault = time.Now() }

// stop ends the writers (the in-pod ones when their time is up), and
// reports the time to a writable -rw (on a pod, or a server pod@uid,
// other than movedFrom, when given) and the longest time two servers took writes, failing t
// when two did. Servers are incarnations: a pod deleted and made again
// is another server, so an old incarnation still taking writes beside its
// replacement counts.
func (c *checker) stop(movedFrom string) faultRun {
	t := c.t
	t.Helper()
	c.acks, c.byPod = map[string][]ack{}, map[string][]ack{}
	var res faultRun
	for _, stop := range c.rw {
		c.rwAck = append(c.rwAck, stop()...)
	}
	var podAcks []ack
	for _, stop := range c.pods {
		podAcks = append(podAcks, stop()...)
	}
	for pod, wait := range c.inPod {
		for _, a := range wait() {
			a.host = pod // its own loopback
			podAcks = append(podAcks, a)
		}
	}
	c.book.stop()
	for _, a := range append(slices.Clone(c.rwAck), podAcks...) {
		a.server = c.book.server(a.host, a.ms)
		pod, _, _ := strings.Cut(a.server, "@")
		c.acks[a.server] = append(c.acks[a.server], a)
		c.byPod[pod] = append(c.byPod[pod], a)
	}
	for _, a := range c.rwAck {
		server := c.book.server(a.host, a.ms)
		pod, _, _ := strings.Cut(server, "@")
		if a.ms >= c.fault.UnixMilli() && pod != movedFrom && server != movedFrom && (res.toRW == 0 || time.UnixMilli(a.ms).Sub(c.fault) < res.toRW) {
			res.toRW = time.UnixMilli(a.ms).Sub(c.fault)
		}
	}
	if res.toRW == 0 {
		t.Errorf("no write through %s-rw after the fault", c.db.Name)
	}
	res.rwGap = longestGap(c.rwAck, c.fault)
	res.twoWriters = c.twoWriters()
	for _, acks := range c.acks {
		res.acked += len(acks)
	}
	t.Logf("writes acknowledged: %v; -rw writable %s after the fault; the longest pause of -rw %s", c.counts(), res.toRW.Round(time.Millisecond), res.rwGap.Round(time.Millisecond))
	return res
}

// longestGap is the longest time between two acknowledgements in a row
// (by their clocks) of which the later came after from.
func longestGap(acks []ack, from time.Time) time.Duration {
	ms := make([]int64, 0, len(acks))
	for _, a := range acks {
		ms = append(ms, a.ms)
	}
	slices.Sort(ms)
	var gap time.Duration
	for i := 1; i < len(ms); i++ {
		if ms[i] >= from.UnixMilli() {
			gap = max(gap, time.Duration(ms[i]-ms[i-1])*time.Millisecond)
		}
	}
	return gap
}

// twoWriters is the longest time two servers both took writes: each
// server took writes from its first acknowledged write to its last, and
// two such spans that overlap are two writers (each reported).
func (c *checker) twoWriters() time.Duration {
	type span struct {
		server      string
		first, last ack
	}
	var spans []span
	byTime := func(a, b ack) int { return int(a.ms - b.ms) }
	for server, acks := range c.acks {
		if len(acks) > 0 {
			spans = append(spans, span{server, slices.MinFunc(acks, byTime), slices.MaxFunc(acks, byTime)})
		}
	}
	var longest time.Duration
	for i := range spans {
		for j := range spans {
			a, b := spans[i], spans[j]
			if i == j || a.first.ms > b.first.ms {
				continue
			}
			if overlap := time.Duration(min(a.last.ms, b.last.ms)-b.first.ms) * time.Millisecond; overlap > longest {
				longest = overlap
				c.t.Errorf("two servers took writes at once for %s: %s acknowledged write %d at %s, after %s acknowledged write %d at %s",
					overlap, a.server, a.last.id, time.UnixMilli(a.last.ms).Format(time.StampMilli), b.server, b.first.id, time.UnixMilli(b.first.ms).Format(time.StampMilli))
			}
		}
	}
	return longest
}

// counts are the acknowledged writes by pod.
func (c *checker) counts() map[string]int {
	n := map[string]int{}
	for pod, acks := range c.byPod {
		n[pod] = len(acks)
	}
	return n
}

// lost counts the acknowledged writes final (the primary once the
// Database converged) lacks. Only a former primary's (from) may be
// missing, through -rw or straight to it (the last ones it took before a
// fault, which asynchronous replication had not sent), and each of those
// must have been set aside on its volume; none at all may be missing with
// synchronous replication.
func (c *checker) lost(res *faultRun, final *sql.DB, from string) {
	t := c.t
	t.Helper()
	if len(c.rwAck) == 0 {
		t.Fatal("no write through -rw was acknowledged")
	}
	have := orderIDs(t, final)
	if last := slices.MaxFunc(c.rwAck, func(a, b ack) int { return int(a.ms - b.ms) }); !have[last.id] {
		t.Fatalf("the last write -rw acknowledged (%d) is not on the final primary: no write after the move", last.id)
	}
	var missing []int
	for pod, acks := range c.byPod {
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
	// Asynchronous replication loses them; they must be kept aside: each
	// of them, read back from the set-aside copy by a server started on it.
	claim := claimDir(t, c.db.Namespace, "data-"+from)
	pattern := map[dbv1.Engine]string{dbv1.EnginePostgreSQL: "diverged-wal-*/pgdata", dbv1.EngineMariaDB: "*rebuild*"}[c.d.engine]
	var aside []string
	eventually(t, 3*time.Minute, "the former primary's diverged writes set aside", func() string {
		found, _ := filepath.Glob(filepath.Join(claim, pattern))
		// Not one still being written (<dir>.tmp, renamed once complete).
		aside = slices.DeleteFunc(found, func(dir string) bool { return strings.Contains(dir, ".tmp") })
		if len(aside) == 0 {
			return "nothing set aside in " + claim
		}
		return ""
	})
	superuser, _ := credentials(t, c.db)
	saved := map[int]bool{}
	for _, dir := range aside {
		maps.Copy(saved, testservers.SetAsideIDs(t, c.d.engine, dir, superuser, "app", "orders"))
	}
	var notSaved []int
	for _, id := range missing {
		if !saved[id] {
			notSaved = append(notSaved, id)
		}
	}
	if len(notSaved) > 0 {
		t.Errorf("%d acknowledged writes are neither on the final primary nor in what was set aside (%v): %v", len(notSaved), aside, notSaved)
	}
	t.Logf("every one of the %d is in the set-aside copy %v", len(missing), aside)
}

// addressBook records which pod (and incarnation) had each address when,
// polling the Database's namespace: an address may pass from a deleted
// pod to another, and an acknowledgement belongs to the server that had
// the address at the time.
type addressBook struct {
	ns      string
	mu      sync.Mutex
	entries []addressEntry
	quit    chan struct{}
	done    chan struct{}
}

type addressEntry struct {
	ip, server string
	from, to   int64 // ms; to 0: still
}

func watchAddresses(ns string) *addressBook {
	b := &addressBook{ns: ns, quit: make(chan struct{}), done: make(chan struct{})}
	b.poll()
	go func() {
		defer close(b.done)
		for {
			select {
			case <-b.quit:
				return
			case <-time.After(100 * time.Millisecond):
				b.poll()
			}
		}
	}()
	return b
}

func (b *addressBook) stop() {
	close(b.quit)
	<-b.done
	b.poll()
}

func (b *addressBook) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the API server may be down in the scenario: keep what is known
	}
	now := time.Now().UnixMilli()
	have := map[[2]string]bool{}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			have[[2]string{p.Status.PodIP, p.Name + "@" + string(p.UID)}] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	open := map[[2]string]bool{}
	for i := range b.entries {
		e := &b.entries[i]
		if e.to != 0 {
			continue
		}
		if key := [2]string{e.ip, e.server}; have[key] {
			open[key] = true
		} else {
			e.to = now
		}
	}
	for key := range have {
		if !open[key] {
			b.entries = append(b.entries, addressEntry{ip: key[0], server: key[1], from: now})
		}
	}
}

// server is the incarnation that had ip at ms (host "" never happens: an
// in-pod writer's acknowledgements carry the pod's name as host, and get
// the incarnation that had the pod's name then).
func (b *addressBook) server(host string, ms int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, bestGap := "", int64(-1)
	for _, e := range b.entries {
		pod, _, _ := strings.Cut(e.server, "@")
		if e.ip != host && pod != host {
			continue
		}
		// The entry that covers ms; else the nearest (polls are 100 ms apart).
		var gap int64
		switch {
		case ms < e.from:
			gap = e.from - ms
		case e.to != 0 && ms > e.to:
			gap = ms - e.to
		}
		if bestGap < 0 || gap < bestGap {
			best, bestGap = e.server, gap
		}
	}
	if best == "" {
		return host
	}
	return best
}

// nowMillis is the server's clock, in milliseconds since the epoch: every
// server runs on this machine, so their clocks compare.
func (d dialect) nowMillis() string {
	if d.engine == dbv1.EnginePostgreSQL {
		return "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
	}
	return "SELECT CAST(ROUND(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED)"
}

// writeInPod writes rows ids from, from+1, ... on pod's own server over its
// loopback, as the application and as a client on the same machine would
// (a partition that cuts the pod off from the cluster does not cut it off
// from this client), a new connection for each, for duration; it returns
// every acknowledged write with the server's clock read right after it in
// the same session (the pod's clock when that read failed: the write was
// acknowledged all the same).
func writeInPod(t testing.TB, d dialect, db *dbv1.Database, pod string, from int, duration time.Duration) (wait func() []ack) {
	user, password, database := appCredentials(t, db)
	var one string
	if d.engine == dbv1.EnginePostgreSQL {
		one = fmt.Sprintf(`psql -h 127.0.0.1 -U %s -d %s -qAt -v ON_ERROR_STOP=1 -c "INSERT INTO orders VALUES ($i, 'in-pod')" -c '\echo acked' -c %q`, user, database, d.nowMillis())
	} else {
		one = fmt.Sprintf(`mariadb -h127.0.0.1 -u%s %s -N -B -e "INSERT INTO orders VALUES ($i, 'in-pod'); SELECT 'acked'; %s"`, user, database, d.nowMillis())
	}
	script := fmt.Sprintf(`export PGPASSWORD=%q MYSQL_PWD=%q; i=%d; end=$(( $(date +%%s) + %d ))
while [ "$(date +%%s)" -lt "$end" ]; do
	out=$(%s 2>/dev/null)
	case "$out" in acked*)
		ms=$(printf '%%s\n' "$out" | sed -n 2p)
		[ -n "$ms" ] || ms=$(date +%%s%%3N)
		echo "ACK $i $ms" ;;
	esac
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

// rwResolver resolves db's -rw Service through the cluster's DNS, as an
// application in the cluster does ("" when it has no one address).
func rwResolver(db *dbv1.Database) func() string {
	r := clusterResolver()
	return func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := r.LookupHost(ctx, fmt.Sprintf("%s-rw.%s.svc.cluster.local", db.Name, db.Namespace))
		if err != nil || len(addrs) != 1 {
			return ""
		}
		return addrs[0]
	}
}

// writeThroughRWTimed writes through the -rw Service, as an application
// in the cluster does, until stopped, and returns every acknowledged write
// with the server's clock right after it.
func writeThroughRWTimed(d dialect, db *dbv1.Database, open func(string) *sql.DB, from int) (stop func() []ack) {
	stop, _ = writeThroughRWWatched(d, db, open, from)
	return stop
}

// writeThroughRWWatched writes one row at a time through the -rw Service,
// resolved and connected anew for each (a pool after a failed write), and
// also lets the test see the acknowledged writes so far (seen).
func writeThroughRWWatched(d dialect, db *dbv1.Database, open func(string) *sql.DB, from int) (stop, seen func() []ack) {
	resolve := rwResolver(db)
	return writer(func(id int) (ack, bool) {
		addr := resolve()
		if addr == "" {
			return ack{}, false
		}
		c := open(addr)
		defer c.Close()
		return writeOne(d, c, id, addr)
	}, from)
}

// writeOnSession writes one row at a time on one long-lived session, as a
// connection pool does: the session stays open across writes (so a server
// that lets open sessions go on committing shows it), and after a failed
// write it is closed and another opened to addr() (addr may resolve anew,
// or not).
func writeOnSession(d dialect, open func(string) *sql.DB, addr func() string, from int) (stop, seen func() []ack) {
	type session struct {
		pool *sql.DB
		conn *sql.Conn
		host string
	}
	var cur atomic.Pointer[session]
	return writer(func(id int) (ack, bool) {
		s := cur.Load()
		if s == nil {
			s = &session{host: addr()}
			if s.host == "" {
				return ack{}, false
			}
			s.pool = open(s.host)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			c, err := s.pool.Conn(ctx)
			cancel()
			if err != nil {
				_ = s.pool.Close()
				return ack{}, false
			}
			s.conn = c
			cur.Store(s)
		}
		a, ok := writeOnConn(d, s.conn, id, s.host)
		if !ok && cur.CompareAndSwap(s, nil) {
			_ = s.conn.Close()
			_ = s.pool.Close()
		}
		return a, ok
	}, from, func() {
		// A write hangs on it: leave it (and its write) behind.
		cur.Store(nil)
	})
}

// writer runs write for ids from, from+1, ... until stopped, every 20 ms,
// keeping what was acknowledged. A write to a server cut off
// mid-statement can hang in the driver past its context: it is left
// behind after 6 s, unacknowledged, abandon called, and the writer goes on.
func writer(write func(id int) (ack, bool), from int, abandon ...func()) (stop, seen func() []ack) {
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
			wrote := make(chan struct{})
			go func(id int) {
				defer close(wrote)
				if a, ok := write(id); ok {
					mu.Lock()
					acks = append(acks, a)
					mu.Unlock()
				}
			}(i)
			select {
			case <-wrote:
			case <-time.After(6 * time.Second):
				for _, f := range abandon {
					f()
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
// session; ok when the write was acknowledged (with the local clock when
// only the clock read failed: the write counts).
func writeOne(d dialect, c *sql.DB, id int, host string) (ack, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := c.Conn(ctx)
	if err != nil {
		return ack{}, false
	}
	defer conn.Close()
	return writeOnConn(d, conn, id, host)
}

// writeOnConn inserts id on conn and reads the server's clock in the same
// session (see writeOne).
func writeOnConn(d dialect, conn *sql.Conn, id int, host string) (ack, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'rw')", id)); err != nil {
		return ack{}, false
	}
	var ms int64
	if err := conn.QueryRowContext(ctx, d.nowMillis()).Scan(&ms); err != nil {
		ms = time.Now().UnixMilli() // acknowledged: after it, by this machine's clock
	}
	return ack{id: id, ms: ms, host: host}, true
}

// faultTable collects the runs of the fault benchmarks (`make
// bench-faults`) by scenario and engine; TestMain prints it.
var faultTable = map[[2]string][]faultRun{}

// printFaultTable prints the table docs/figures.md keeps: per scenario and
// engine, the runs, writes lost (all set aside when any), the longest
// two-writer time, p50/p95 of the time to a writable -rw and the longest
// pause of -rw.
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
	fmt.Println("\n| scenario | engine | runs | acknowledged writes lost (set aside) | max two-writer time | p50 / p95 time to writable -rw | longest pause of -rw |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, k := range keys {
		runs := faultTable[k]
		var toRW []time.Duration
		var two, gap time.Duration
		lost, acked := 0, 0
		for _, r := range runs {
			toRW, two, gap = append(toRW, r.toRW), max(two, r.twoWriters), max(gap, r.rwGap)
			lost, acked = lost+r.lost, acked+r.acked
		}
		slices.Sort(toRW)
		fmt.Printf("| %s | %s | %d | %d of %d | %s | %s / %s | %s |\n", k[0], k[1], len(runs), lost, acked, two,
			percentile(toRW, 0.5).Round(100*time.Millisecond), percentile(toRW, 0.95).Round(100*time.Millisecond), gap.Round(100*time.Millisecond))
	}
}
