package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"example.com/database-operator/internal/engine"
)

// These tests run the agent with a fake API server and a stand-in server
// process (sleep), its status scripted; a one-second Lease keeps them short
// (renew every 333 ms, writes allowed until 800 ms after a renewal began).
// The chart's agent against real servers and a real API server is proven
// in tests/e2e (lease_test.go, ha_test.go).

type harness struct {
	t       *testing.T
	agent   *Agent
	cs      *fake.Clientset
	apiDown atomic.Bool // every Lease call fails, as in a partition
	// updatesDown: Lease writes fail (the API server reads but does not
	// answer writes in time, as when it comes back)
	updatesDown atomic.Bool
	status      atomic.Value
	answers     atomic.Bool
	dir         string
	runErr      chan error
	cancel      context.CancelFunc
	renewals    atomic.Int32
	// onUpdate, when set (a func(*coordinationv1.Lease)), sees every
	// Lease update as it is made.
	onUpdate atomic.Value
	// lostRace: every Lease update conflicts, as one does when another
	// renewal of this agent's won the race, which that renewal's success
	// (validUntil extended) stands for.
	lostRace atomic.Bool
}

func lease(holder string) *coordinationv1.Lease { return leaseFor(holder, 1) }

func leaseFor(holder string, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "db-primary", Namespace: "ns"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](seconds)},
	}
}

func start(t *testing.T, pod string, l *coordinationv1.Lease, writable bool, opts ...func(*Agent)) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), runErr: make(chan error, 1)}
	if l != nil {
		h.cs = fake.NewClientset(l)
	} else {
		h.cs = fake.NewClientset()
	}
	h.cs.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if h.apiDown.Load() || (h.updatesDown.Load() && action.GetVerb() == "update") {
			return true, nil, errors.New("the API server is unreachable")
		}
		if action.GetVerb() == "update" && h.lostRace.Load() {
			h.agent.mu.Lock()
			h.agent.validUntil = time.Now().Add(300 * time.Millisecond)
			h.agent.mu.Unlock()
			return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), "db-primary", errors.New("the object has been modified"))
		}
		if action.GetVerb() == "update" {
			h.renewals.Add(1)
			if f, ok := h.onUpdate.Load().(func(*coordinationv1.Lease)); ok {
				if l, ok := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok {
					f(l)
				}
			}
		}
		return false, nil, nil
	})
	h.setWritable(writable)
	h.answers.Store(true)
	cfg := Config{
		Namespace: "ns", Pod: pod, LeaseName: "db-primary", Leases: h.cs.CoordinationV1().Leases("ns"),
		TopologyDir: h.dir, Listen: "127.0.0.1:0", LeaseDuration: time.Second,
		Command: []string{"sh", "-c", `echo "$AGENT_PRIMARY${AGENT_FENCED:+ $AGENT_FENCED}" >>"$0"; exec sleep 600`, filepath.Join(h.dir, "starts")},
		Log:     testr.New(t),
		Check: func(ctx context.Context) (engine.Status, error) {
			if !h.answers.Load() {
				<-ctx.Done() // hung: never answers
				return engine.Status{}, ctx.Err()
			}
			return h.status.Load().(engine.Status), nil
		},
	}
	h.agent = New(cfg)
	for _, o := range opts {
		o(h.agent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.runErr <- h.agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.runErr:
			if err != nil {
				t.Logf("the agent ended: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	return h
}

func (h *harness) setWritable(w bool) {
	if w {
		h.status.Store(engine.Status{Role: engine.RolePrimary})
	} else {
		h.status.Store(engine.Status{Role: engine.RoleReplica, ReadOnly: true, Streaming: true})
	}
}

// pid is the running server's process id, 0 when none runs.
func (h *harness) pid() int {
	h.agent.mu.Lock()
	running := h.agent.running
	h.agent.mu.Unlock()
	if !running {
		return 0
	}
	return h.agent.serverPid()
}

func (h *harness) starts() []string {
	b, _ := os.ReadFile(filepath.Join(h.dir, "starts"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive: pid exists (signal 0 probes without signalling; the agent reaps
// what it killed).
func alive(pid int) bool { return pid != 0 && syscall.Kill(pid, 0) == nil }

// TestHolderStopsItsServerWhenItCannotRenew: the server runs as long as
// renewals succeed, and is stopped within the duration minus the margin
// once the API server is gone; it starts again only once it is back.
func TestHolderStopsItsServerWhenItCannotRenew(t *testing.T) {
	h := start(t, "db-0", lease("db-0"), true)
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
	pid := h.pid()
	time.Sleep(3 * time.Second) // three Lease durations
	if h.pid() != pid || !alive(pid) {
		t.Fatalf("the server (pid %d) was stopped while its agent renewed the Lease (%d renewals)", pid, h.renewals.Load())
	}
	if h.renewals.Load() < 5 {
		t.Errorf("%d renewals in 3 s of a 1 s Lease, want one every third of it", h.renewals.Load())
	}
	if got := h.starts(); len(got) != 1 || got[0] != "db-0" {
		t.Errorf("the server started as %q, want AGENT_PRIMARY=db-0", got)
	}
	cut := time.Now()
	h.apiDown.Store(true)
	waitFor(t, "the server stopped", 3*time.Second, func() bool { return !alive(pid) })
	// Last renewal began at most a renew interval before the cut; writes
	// end 800 ms after it. Scheduling slack is allowed, not a whole duration.
	if took := time.Since(cut); took > time.Second+200*time.Millisecond {
		t.Errorf("the server ran %s after the API server went away, want at most the duration minus the margin", took)
	}
	time.Sleep(time.Second)
	if h.pid() != 0 {
		t.Errorf("a server started again while the Lease cannot be read (pid %d)", h.pid())
	}
	// The API server is back and the Lease still names this pod: it
	// starts again, writable, after a renewal.
	h.apiDown.Store(false)
	waitFor(t, "the server started again", 5*time.Second, func() bool { return h.pid() != 0 })
}

// TestLostRenewalRaceKeepsTheServer: the guard and the Lease loop both
// renew; when the guard's write conflicts because the loop's won (the
// Lease still names this pod, valid for a while), the server is kept. It
// was killed, found under load right after a switchover.
func TestLostRenewalRaceKeepsTheServer(t *testing.T) {
	h := start(t, "db-0", lease("db-0"), true)
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
	pid := h.pid()
	h.lostRace.Store(true)
	time.Sleep(2 * time.Second)
	if h.pid() != pid || !alive(pid) {
		t.Fatalf("the server (pid %d) was stopped while its Lease stayed valid (renewed by the other writer of the race)", pid)
	}
}

// TestHungServerIsStoppedAndStartedAgain: a server that stops answering is
// no longer renewed for, so it is stopped and (its agent still holding the
// Lease) started again.
func TestHungServerIsStoppedAndStartedAgain(t *testing.T) {
	h := start(t, "db-0", lease("db-0"), true)
	waitFor(t, "the server answering", 5*time.Second, func() bool { return h.agent.notReady() == "" })
	pid := h.pid()
	h.answers.Store(false)
	waitFor(t, "the hung server stopped", 5*time.Second, func() bool { return !alive(pid) })
	h.answers.Store(true)
	waitFor(t, "the server started again", 5*time.Second, func() bool { return h.pid() != 0 && h.pid() != pid })
}

// TestNonHolderThatTakesWritesIsStopped: a server that takes writes while
// another pod holds the Lease is stopped, and started again fenced.
func TestNonHolderThatTakesWritesIsStopped(t *testing.T) {
	h := start(t, "db-0", lease("db-1"), false)
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
	pid := h.pid()
	h.setWritable(true)
	waitFor(t, "the second writable server stopped", 3*time.Second, func() bool { return !alive(pid) })
	h.setWritable(false)
	waitFor(t, "the server started again", 5*time.Second, func() bool { return len(h.starts()) == 2 })
	if got := h.starts(); got[0] != "db-1" || got[1] != "db-1 1" {
		t.Errorf("starts %q, want as a replica of db-1, then the same fenced (AGENT_FENCED=1)", got)
	}
}

// moveLease makes the Lease name db-1, as the operator does when it hands
// it over.
func (h *harness) moveLease(t *testing.T) {
	t.Helper()
	l, err := h.cs.CoordinationV1().Leases("ns").Get(context.Background(), "db-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("db-1")
	if _, err := h.cs.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSwitchedOverPrimaryIsNotKilled: a switchover fences the primary and
// hands the Lease on within a second, before the agent's next check sees
// the fence. The guard, finding the Lease moved, asks the server again:
// fenced, it is left to stop cleanly (a kill would make its next start a
// crash recovery); one that still took writes would be stopped at once
// (TestNonHolderThatTakesWritesIsStopped).
func TestSwitchedOverPrimaryIsNotKilled(t *testing.T) {
	h := start(t, "db-0", leaseFor("db-0", 6), true)
	waitFor(t, "the server answering", 5*time.Second, func() bool { return h.agent.notReady() == "" })
	pid := h.pid()
	h.setWritable(false) // the operator fenced it
	h.moveLease(t)
	// The last check, older than the fence, said writable.
	h.agent.mu.Lock()
	h.agent.writable = true
	h.agent.mu.Unlock()
	if _, err := h.agent.getLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if h.pid() != pid || !alive(pid) {
		t.Fatalf("the fenced former primary (pid %d) was killed: %v", pid, h.starts())
	}
	if alive(pid) && h.agent.demoted {
		t.Error("the agent recorded a demotion of a fenced server")
	}
}

// TestPromotedReplicaKeepsRunning: the operator hands the Lease to a
// replica and promotes it at once; its agent's check finds it writable
// before its next renewal (a 6 s Lease: renewals 2 s apart) and
// renews right then, never stopping it.
func TestPromotedReplicaKeepsRunning(t *testing.T) {
	h := start(t, "db-1", leaseFor("db-0", 6), false)
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
	pid := h.pid()
	h.moveLease(t)
	h.setWritable(true)
	time.Sleep(3 * time.Second)
	if h.pid() != pid || !alive(pid) {
		t.Fatalf("the promoted server (pid %d) was stopped: %v", pid, h.starts())
	}
	if why := h.agent.notReady(); why != "" {
		t.Errorf("the promoted server is not ready: %s", why)
	}
}

// TestPromotedReplicaOutlivesASlowLeaseRead: the operator hands the Lease
// to a replica and promotes it while the API server does not answer the
// agent: its guard tries again for the margin instead of killing the
// server the operator just promoted (a busy API server made the e2e
// eviction test's failover go round twice). A Lease that stays unreadable
// still stops it once the margin ran out.
func TestPromotedReplicaOutlivesASlowLeaseRead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		downFor  time.Duration
		survives bool
	}{
		{name: "read again in time", downFor: 800 * time.Millisecond, survives: true},
		{name: "never read", downFor: 3 * time.Second, survives: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, "db-1", leaseFor("db-0", 6), false)
			waitFor(t, "the server answering", 5*time.Second, func() bool { return h.agent.notReady() == "" })
			pid := h.pid()
			h.moveLease(t)
			h.apiDown.Store(true)
			h.setWritable(true) // promoted
			waitFor(t, "the agent finding its server writable", 5*time.Second, func() bool {
				h.agent.mu.Lock()
				defer h.agent.mu.Unlock()
				return h.agent.writable
			})
			time.Sleep(tc.downFor)
			h.apiDown.Store(false)
			time.Sleep(time.Second)
			stopped := h.pid() != pid || !alive(pid)
			if tc.survives && stopped {
				t.Fatalf("the promoted server (pid %d) was stopped for a Lease read that failed once: %v", pid, h.starts())
			}
			if !tc.survives && !stopped {
				t.Fatalf("the promoted server (pid %d) kept running although its Lease could not be read for %s (margin %s)", pid, tc.downFor, Margin(6*time.Second))
			}
		})
	}
}

// TestPrimaryWaitsForTheLease: the topology names this pod, and there is
// no Lease yet: the server does not start until the Lease names it.
func TestPrimaryWaitsForTheLease(t *testing.T) {
	h := start(t, "db-0", nil, true)
	time.Sleep(1500 * time.Millisecond)
	if h.pid() != 0 {
		t.Fatal("the primary's server started without the Lease")
	}
	if _, err := h.cs.CoordinationV1().Leases("ns").Create(context.Background(), lease("db-0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
}

// TestReplicaStartsWithoutTheAPIServer: a pod the topology does not name
// as primary starts (read-only, as its start script makes it) even when
// the Lease cannot be read.
func TestReplicaStartsWithoutTheAPIServer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "primary"), []byte("db-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is unreachable")
	})
	a := New(Config{Namespace: "ns", Pod: "db-0", LeaseName: "db-primary", Leases: cs.CoordinationV1().Leases("ns"),
		TopologyDir: dir, Listen: "127.0.0.1:0", Command: []string{"sh", "-c", "exec sleep 600"}, Log: testr.New(t),
		Check: func(context.Context) (engine.Status, error) {
			return engine.Status{Role: engine.RoleReplica, ReadOnly: true}, nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("the agent ended: %v", err)
		}
	}()
	waitFor(t, "the replica started", 5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.running
	})
}

// confirmingPair starts a primary (db-0) and its replica (db-1), two
// members whose agents reach each other over the peer channel (the
// replica's address and token returned).
func confirmingPair(t *testing.T) (primary, replica *harness, peerAddr, token string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peerAddr = ln.Addr().String()
	ln.Close()
	token = PeerToken("replication password")
	twoMembers := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		l.Annotations = map[string]string{MembersAnnotation: "2"}
		return l
	}
	replica = start(t, "db-1", twoMembers(lease("db-0")), false, func(a *Agent) {
		a.cfg.PeerListen, a.cfg.PeerToken = peerAddr, token
	})
	primary = start(t, "db-0", twoMembers(lease("db-0")), true, func(a *Agent) {
		a.cfg.PeerToken = token
		a.peerAddr = func(string) string { return peerAddr }
	})
	waitFor(t, "both servers started", 5*time.Second, func() bool { return primary.pid() != 0 && replica.pid() != 0 })
	return primary, replica, peerAddr, token
}

// TestFailsafeKeepsAConfirmedPrimary: the primary's agent loses the API
// server; its one replica confirms it over the peer channel, so its server
// keeps running. Once the replica reads a Lease naming another pod it
// refuses, and the primary's server is stopped. A member told that it is
// being promoted reports how long its last confirmation still runs, and
// confirms no more.
func TestFailsafeKeepsAConfirmedPrimary(t *testing.T) {
	primary, replica, peerAddr, token := confirmingPair(t)
	pid := primary.pid()
	primary.apiDown.Store(true)
	time.Sleep(3 * time.Second) // three Lease durations without the API server
	if !alive(pid) {
		t.Fatal("the primary's server was stopped although its replica confirms it")
	}
	if why := primary.agent.notReady(); why != "" {
		t.Errorf("the confirmed primary is not ready: %s", why)
	}
	// The operator moves the Lease (the replica's API server still answers).
	replica.moveLease(t)
	moved := time.Now()
	waitFor(t, "the unconfirmed primary's server stopped", 3*time.Second, func() bool { return !alive(pid) })
	// The replica's view of the Lease is at most a renew interval old:
	// then the primary's last confirmed round runs out (duration minus
	// margin); scheduling slack on top.
	if took := time.Since(moved); took > 1500*time.Millisecond {
		t.Errorf("the primary ran %s after the Lease moved, want at most a renew interval plus the duration minus the margin", took)
	}
	p, err := AskPromoting(context.Background(), peerAddr, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.ConfirmedFor != "db-0" || p.RemainingMillis <= 0 || p.RemainingMillis > 1200 {
		t.Errorf("promoting: %+v, want db-0's last confirmation with at most duration plus margin left", p)
	}
	if _, err := AskPromoting(context.Background(), peerAddr, "wrong token", nil); err == nil {
		t.Error("the peer channel answered a caller with the wrong token")
	}
}

// TestFailsafeCoversAFailedRenewal: the primary's agent reads the Lease
// but its renewals go unanswered (an API server coming back from an
// outage, or overloaded). That is an outage too: its replica confirms it,
// and its server keeps running. (Only a read that failed counted before:
// a MariaDB primary was killed as the API server came back, and a replica
// promoted, in the e2e control-plane outage test.)
func TestFailsafeCoversAFailedRenewal(t *testing.T) {
	primary, _, _, _ := confirmingPair(t)
	waitFor(t, "the primary answering", 5*time.Second, func() bool { return primary.agent.notReady() == "" })
	pid := primary.pid()
	primary.updatesDown.Store(true)
	time.Sleep(3 * time.Second) // three Lease durations without a renewal
	if !alive(pid) || primary.pid() != pid {
		t.Fatalf("the primary's server was stopped although its replica confirms it: %v", primary.starts())
	}
	if why := primary.agent.notReady(); why != "" {
		t.Errorf("the confirmed primary is not ready: %s", why)
	}
}

// TestOrphansAreReaped: a process the start script leaves behind (its
// parent gone) becomes the agent's child, and is reaped when it exits
// rather than left a zombie.
func TestOrphansAreReaped(t *testing.T) {
	h := start(t, "db-0", lease("db-0"), true)
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
	// The agent is this test process: an orphan of anything below it
	// comes to it.
	orphan := exec.Command("sh", "-c", "(sleep 0.3 &); exit 0")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if z := zombieChildren(os.Getpid()); len(z) > 0 {
		t.Errorf("zombie children left: %v", z)
	}
}

// TestReplicaReadiness: a replica is ready for -ro only while it
// replicates (a grace after it stops: a new primary to follow) and, with
// spec.failover.maxLag on the Lease, while what it received but has not
// applied stays within it.
func TestReplicaReadiness(t *testing.T) {
	defer func(g time.Duration) { replicationGrace = g }(replicationGrace)
	replicationGrace = 300 * time.Millisecond
	l := lease("db-0")
	l.Annotations = map[string]string{MaxLagAnnotation: "100"}
	h := start(t, "db-1", l, false)
	ready := func(want string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("readiness %q", want), 5*time.Second, func() bool {
			why := h.agent.notReady()
			return (want == "") == (why == "") && strings.Contains(why, want)
		})
	}
	ready("")
	h.status.Store(engine.Status{Role: engine.RoleReplica, ReadOnly: true, Streaming: true, Behind: 101})
	ready("beyond spec.failover.maxLag 100")
	h.status.Store(engine.Status{Role: engine.RoleReplica, ReadOnly: true, Streaming: true, Behind: 100})
	ready("")
	h.status.Store(engine.Status{Role: engine.RoleReplica, ReadOnly: true})
	ready("the replica has not replicated for")
	h.status.Store(engine.Status{Role: engine.RoleReplica, ReadOnly: true, Streaming: true})
	ready("")
}

// TestAfterPromotion: the agent acts once when it sees its replica turn
// writable (it hands the old primary's unarchived WAL to the archiver),
// and never for a server that started as the primary.
func TestAfterPromotion(t *testing.T) {
	var promoted, primary atomic.Int32
	h := start(t, "db-1", nil, false, func(a *Agent) { a.cfg.AfterPromotion = func(context.Context) { promoted.Add(1) } })
	start(t, "db-0", nil, true, func(a *Agent) { a.cfg.AfterPromotion = func(context.Context) { primary.Add(1) } })
	time.Sleep(2500 * time.Millisecond)
	if promoted.Load() != 0 {
		t.Fatal("acted on a promotion before any")
	}
	h.setWritable(true)
	deadline := time.Now().Add(10 * time.Second)
	for promoted.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond)
	if n := promoted.Load(); n != 1 {
		t.Errorf("acted %d times on one promotion, want once", n)
	}
	if n := primary.Load(); n != 0 {
		t.Errorf("acted %d times for a server that started as the primary", n)
	}
}

// TestReadinessTurnsAreLogged: each turn of readiness is logged with its
// reason, a steady answer is not, and a changing reason (a growing lag)
// at most every readinessRelog: an HTTP probe's Event says only 503.
func TestReadinessTurnsAreLogged(t *testing.T) {
	var lines []string
	a := &Agent{cfg: Config{Log: funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})}}
	for _, why := range []string{"", "", "the server does not answer", "the server does not answer",
		"the replica is 6 behind", "the replica is 7 behind", ""} {
		a.logReadiness(why)
	}
	want := []string{`"msg"="ready: the server can serve its role"`, `"msg"="not ready" "reason"="the server does not answer"`,
		`"msg"="ready: the server can serve its role"`}
	if len(lines) != len(want) {
		t.Fatalf("logged %q, want %d lines", lines, len(want))
	}
	for i := range want {
		if !strings.Contains(lines[i], want[i]) {
			t.Errorf("line %d: %s, want %s", i, lines[i], want[i])
		}
	}
	// A reason that changed once readinessRelog passed is logged.
	a.logReadiness("the replica is 6 behind")
	a.readyLoggedAt = time.Now().Add(-readinessRelog)
	a.logReadiness("the replica is 9 behind")
	if last := lines[len(lines)-1]; !strings.Contains(last, "9 behind") {
		t.Errorf("after %s: last line %s, want the new reason", readinessRelog, last)
	}
}
