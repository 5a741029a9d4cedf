package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/database-operator/internal/engine"
)

// fakeServer is the local server as the handover sees it: a fence, a
// position (an LSN), compared by number.
type fakeServer struct {
	engine.Instance
	fenced atomic.Bool
	lsn    engine.LSN
}

func (s *fakeServer) Fence(context.Context) error { s.fenced.Store(true); return nil }
func (s *fakeServer) Close() error                { return nil }
func (s *fakeServer) Status(context.Context) (engine.Status, error) {
	p := engine.Position{Timeline: 1, LSN: s.lsn}
	return engine.Status{Role: engine.RolePrimary, ReadOnly: s.fenced.Load(), Applied: p, Received: p}, nil
}
func (s *fakeServer) Compare(a, b engine.Position) (int, error) {
	switch {
	case a.LSN < b.LSN:
		return -1, nil
	case a.LSN > b.LSN:
		return 1, nil
	}
	return 0, nil
}

// replicaPeer serves another member's peer channel: its replica has
// received *at.
func replicaPeer(t *testing.T, token string, at *atomic.Uint64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		p := engine.Position{Timeline: 1, LSN: engine.LSN(at.Load())}
		_ = json.NewEncoder(w).Encode(engine.Status{Role: engine.RoleReplica, ReadOnly: true, Streaming: true, Received: p, Applied: p})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// stopping starts db-0 as the primary of two members with failover on,
// a replica peer at *at, and returns the harness and the local server.
func stopping(t *testing.T, at *atomic.Uint64, failover string) (*harness, *fakeServer) {
	t.Helper()
	l := lease("db-0")
	l.Annotations = map[string]string{MembersAnnotation: "2", FailoverAnnotation: failover}
	token := PeerToken("replication password")
	peer := replicaPeer(t, token, at)
	local := &fakeServer{lsn: 1000}
	h := start(t, "db-0", l, true, func(a *Agent) {
		a.cfg.PeerToken = token
		a.cfg.HandoverTimeout = 500 * time.Millisecond
		a.cfg.Open = func(context.Context) (engine.Instance, error) { return local, nil }
		a.peerAddr = func(string) string { return peer }
	})
	waitFor(t, "the primary serving", 5*time.Second, func() bool { return h.agent.notReady() == "" && h.agent.holds() })
	return h, local
}

// stop stops the pod (the kubelet's signal: Run's context) and waits for
// the agent to return.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	select {
	case err := <-h.runErr:
		if err != nil {
			h.t.Fatalf("the agent ended with %v", err)
		}
		h.runErr <- nil // for the harness's cleanup
	case <-time.After(10 * time.Second):
		h.t.Fatal("the agent did not stop")
	}
}

func (h *harness) lease() *coordinationv1.Lease {
	h.t.Helper()
	l, err := h.cs.CoordinationV1().Leases("ns").Get(context.Background(), "db-primary", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// TestStoppingPrimaryHandsOver: the pod of the primary stops; its agent
// fences the server, waits until the replica has received its last
// position, stops the server, and only then releases the Lease with a
// record of the handover.
func TestStoppingPrimaryHandsOver(t *testing.T) {
	var at atomic.Uint64
	at.Store(900) // behind: the replica catches up a moment after the stop
	h, local := stopping(t, &at, "enabled")
	pid := h.pid()
	var releasedWhileRunning atomic.Bool
	h.onUpdate.Store(func(l *coordinationv1.Lease) {
		if l.Spec.HolderIdentity == nil && alive(pid) {
			releasedWhileRunning.Store(true)
		}
	})
	go func() {
		time.Sleep(200 * time.Millisecond)
		at.Store(1000)
	}()
	h.stop()
	if !local.fenced.Load() {
		t.Error("the server was not fenced before the pod stopped")
	}
	if alive(pid) {
		t.Error("the server still runs after its agent returned")
	}
	l := h.lease()
	ho, ok := ParseHandover(l)
	if holderOf(l) != "" || !ok || !ho.Released || ho.Replica != "db-1" || ho.From != "db-0" || ho.Position.LSN != 1000 {
		t.Fatalf("after the stop: holder %q, handover %+v (%v); want the Lease released, db-1 holding position 1000", holderOf(l), ho, ok)
	}
	if _, ok := l.Annotations[HolderUIDAnnotation]; ok {
		t.Errorf("a released Lease kept a holder's UID: %v", l.Annotations)
	}
	if releasedWhileRunning.Load() {
		t.Error("the Lease was released while the server still ran")
	}
}

// TestStoppingPrimaryKeepsTheLeaseWhenNoReplicaCatchesUp: no replica
// receives the last position within the bound: the Lease stays held (the
// failover rules apply once it expires), and the record says why.
func TestStoppingPrimaryKeepsTheLeaseWhenNoReplicaCatchesUp(t *testing.T) {
	var at atomic.Uint64
	at.Store(900)
	h, local := stopping(t, &at, "enabled")
	h.stop()
	l := h.lease()
	ho, ok := ParseHandover(l)
	if holderOf(l) != "db-0" || !ok || ho.Released || !strings.Contains(ho.Reason, "no replica received") || !local.fenced.Load() {
		t.Fatalf("after the stop: holder %q, handover %+v (%v), fenced %v; want the Lease kept with why, the server fenced", holderOf(l), ho, ok, local.fenced.Load())
	}
}

// TestStoppingPrimaryWithoutFailoverKeepsTheLease: with failover off, a
// released Lease would leave the Database without a primary: the server
// is fenced and stopped, the Lease kept.
func TestStoppingPrimaryWithoutFailoverKeepsTheLease(t *testing.T) {
	var at atomic.Uint64
	at.Store(1000)
	h, local := stopping(t, &at, "disabled")
	h.stop()
	if l := h.lease(); holderOf(l) != "db-0" || l.Annotations[HandoverAnnotation] != "" || !local.fenced.Load() {
		t.Fatalf("holder %q, annotations %v, fenced %v: want the Lease kept, no handover, the server fenced", holderOf(l), l.Annotations, local.fenced.Load())
	}
}

// TestNewIncarnationWaitsForTheOldOne: the Lease names this pod, but
// renewed by an earlier incarnation of it (deleted without a grace period:
// it may still run on a node that lost the API server). The server does
// not start until that renewal has expired; then this incarnation takes
// the Lease under its own UID, and the old one, were it to come back, no
// longer holds it.
func TestNewIncarnationWaitsForTheOldOne(t *testing.T) {
	l := lease("db-0")
	l.Annotations = map[string]string{HolderUIDAnnotation: "old"}
	h := start(t, "db-0", l, true, func(a *Agent) { a.cfg.PodUID = "new" })
	time.Sleep(900 * time.Millisecond) // within the old incarnation's duration plus margin (1.2 s)
	if h.pid() != 0 {
		t.Fatal("the server started while the Lease may still be held by the pod's earlier incarnation")
	}
	waitFor(t, "the server started", 5*time.Second, func() bool { return h.pid() != 0 })
	if uid := h.lease().Annotations[HolderUIDAnnotation]; uid != "new" {
		t.Errorf("the Lease names incarnation %q, want new", uid)
	}
	old := New(Config{Pod: "db-0", PodUID: "old"})
	old.holder, old.holderUID = "db-0", "new"
	if old.holds() {
		t.Error("the earlier incarnation still counts itself the holder")
	}
}

// TestLeaseDurationNeverShorterThanStarted: a Lease that says less than
// the pod was started with does not shorten the agent's; a longer one is
// taken.
func TestLeaseDurationNeverShorterThanStarted(t *testing.T) {
	h := start(t, "db-1", leaseFor("db-0", 1), false, func(a *Agent) { a.cfg.LeaseDuration = 3 * time.Second })
	waitFor(t, "the Lease read", 5*time.Second, func() bool { return h.agent.holder == "db-0" })
	h.agent.mu.Lock()
	d := h.agent.duration
	h.agent.mu.Unlock()
	if d != 3*time.Second {
		t.Errorf("duration %s, want the pod's 3 s (the Lease says 1 s)", d)
	}
	l := h.lease()
	l.Spec.LeaseDurationSeconds = ptrTo[int32](5)
	if _, err := h.cs.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the longer duration taken", 5*time.Second, func() bool {
		h.agent.mu.Lock()
		defer h.agent.mu.Unlock()
		return h.agent.duration == 5*time.Second
	})
}

func ptrTo[T any](v T) *T { return &v }
