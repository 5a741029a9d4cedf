package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// scriptedServer is a server whose answers a test sets: its role, whether
// it refuses writes, its position, and what Promote does.
type scriptedServer struct {
	mu       sync.Mutex
	role     engine.Role
	readOnly bool
	applied  engine.LSN
	// promoteErr is what Promote returns; promoteTakes says whether the
	// server is promoted all the same (a pg_promote that timed out).
	promoteErr   error
	promoteTakes bool
	calls        []string
	// catchUpTo: each Status call applies 10 more, up to it (a replica
	// still replaying what its primary sent).
	catchUpTo engine.LSN
	// appliedAtPromote is what it had applied when promoted.
	appliedAtPromote engine.LSN
}

type scriptedInstance struct {
	fakeInstance
	s *scriptedServer
}

func (i scriptedInstance) Status(context.Context) (engine.Status, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	if i.s.applied < i.s.catchUpTo {
		i.s.applied = min(i.s.applied+10, i.s.catchUpTo)
	}
	return engine.Status{Role: i.s.role, ReadOnly: i.s.readOnly, Applied: engine.Position{LSN: i.s.applied}, Received: engine.Position{LSN: i.s.applied}}, nil
}

func (i scriptedInstance) do(call string, f func()) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	i.s.calls = append(i.s.calls, call)
	f()
}

func (i scriptedInstance) Fence(context.Context) error {
	i.do("fence", func() { i.s.readOnly = true })
	return nil
}

func (i scriptedInstance) Unfence(context.Context) error {
	i.do("unfence", func() { i.s.readOnly = false })
	return nil
}

func (i scriptedInstance) Promote(context.Context) error {
	var err error
	i.do("promote", func() {
		i.s.appliedAtPromote = i.s.applied
		if i.s.promoteErr == nil || i.s.promoteTakes {
			i.s.role, i.s.readOnly = engine.RolePrimary, false
		}
		err = i.s.promoteErr
	})
	return err
}

func (i scriptedInstance) Follow(context.Context, engine.Endpoint, engine.Credentials) error {
	i.do("follow", func() {})
	return nil
}

// ForkPoint: the scripted servers share one timeline.
func (i scriptedInstance) ForkPoint(context.Context, uint32) (engine.Position, bool, error) {
	return engine.Position{}, false, nil
}

func (i scriptedInstance) EnsureAccount(context.Context, engine.Account) error {
	i.do("account", func() {})
	return nil
}

func (i scriptedInstance) Close() error { return nil }

// readyPods are db's first two instance pods, Ready.
func readyPods(db *dbv1.Database) []client.Object {
	var pods []client.Object
	for i := range max(2, int(db.Spec.Replicas)) {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: fmt.Sprintf("%s-%d", db.Name, i), Labels: selectorLabels(db)},
			Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return pods
}

// scriptedConnector reaches servers[pod name].
func scriptedConnector(c client.Reader, servers map[string]*scriptedServer) *InstanceConnector {
	return &InstanceConnector{
		Client: c,
		Resolve: func(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
			return engine.Endpoint{Host: pod.Name, Port: port}, nil
		},
		Open: func(_ context.Context, _ dbv1.Engine, ep engine.Endpoint, _ engine.Credentials, _ engine.Options) (engine.Instance, error) {
			s, ok := servers[ep.Host]
			if !ok {
				return nil, fmt.Errorf("no server at %s", ep)
			}
			return scriptedInstance{s: s}, nil
		},
	}
}

// TestSwitchoverNeverUndoesAPromotion: a Promote that returns an error may
// have promoted the target all the same, or may still be promoting it
// (pg_promote timed out or cancelled, the server still in recovery for a
// moment). The old primary must then stay fenced (unfencing it makes two
// writable primaries) and the next reconcile finish the switchover; only a
// target never asked to promote that answers as a read-only replica lets
// the switchover be abandoned and the old primary take writes again.
func TestSwitchoverNeverUndoesAPromotion(t *testing.T) {
	for _, tt := range []struct {
		name         string
		promoteErr   error
		promoteTakes bool
		abandon      bool
	}{
		{"the promotion went through", errors.New("timed out waiting for promotion"), true, false},
		{"the promotion was asked for and may still be under way", errors.New("canceling statement due to statement timeout"), false, false},
		{"the promotion was never asked for", fmt.Errorf("%w: connection reset", engine.ErrPromotionNotStarted), false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 2
				db.Spec.Primary = "orders-1"
				db.Status.CurrentPrimary = "orders-0"
				db.Finalizers = []string{Finalizer}
			})
			objs := append([]client.Object{db}, readyPods(db)...)
			servers := map[string]*scriptedServer{
				"orders-0": {role: engine.RolePrimary, applied: 100},
				"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 100,
					promoteErr: tt.promoteErr, promoteTakes: tt.promoteTakes},
			}
			writes := 0
			r, c := newFakeReconciler(t, &writes, objs...)
			r.Instances = scriptedConnector(c, servers)
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
			topology := func() string {
				cm := &corev1.ConfigMap{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, cm); err != nil {
					t.Fatal(err)
				}
				return cm.Data[topologyPrimaryKey]
			}

			_, err := r.Reconcile(ctx, req)
			old := servers["orders-0"]
			if tt.abandon {
				if err == nil || !strings.Contains(err.Error(), "abandoned") {
					t.Errorf("reconcile: %v, want the switchover abandoned", err)
				}
				if !slices.Contains(old.calls, "unfence") || old.readOnly {
					t.Errorf("the old primary was not unfenced (calls %v)", old.calls)
				}
				if got := topology(); got != "orders-0" {
					t.Errorf("topology names %s the primary, want orders-0 again", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "incomplete") {
				t.Errorf("reconcile: %v, want the switchover incomplete", err)
			}
			if slices.Contains(old.calls, "unfence") || !old.readOnly {
				t.Fatalf("the old primary was unfenced while the target may be promoted (calls %v): two writable primaries", old.calls)
			}
			if got := topology(); got != "orders-1" {
				t.Errorf("topology names %s the primary, want orders-1 (rolling forward)", got)
			}

			if !tt.promoteTakes {
				// The promotion the call gave up on finishes meanwhile.
				next := servers["orders-1"]
				next.role, next.readOnly, next.promoteErr = engine.RolePrimary, false, nil
			}
			// The next reconcile finishes it.
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			got := &dbv1.Database{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.CurrentPrimary != "orders-1" {
				t.Errorf("currentPrimary %s after the retry, want orders-1", got.Status.CurrentPrimary)
			}
			if slices.Contains(old.calls, "unfence") || !old.readOnly {
				t.Errorf("the old primary was unfenced (calls %v)", old.calls)
			}
		})
	}
}

// TestPrimaryRecordWins: a reconcile promoted orders-1 (the topology, written
// before the promotion, names it) and ended before status said so; orders-0,
// the old primary, is back and writable too. The next reconcile must take
// the promoted server as the primary and fence the old one, never the
// reverse (which fences the server the replicas follow). When the recorded
// server was never promoted, status's primary stays and the record is
// written back.
func TestPrimaryRecordWins(t *testing.T) {
	for _, promoted := range []bool{true, false} {
		t.Run(fmt.Sprintf("promoted=%t", promoted), func(t *testing.T) {
			ctx := context.Background()
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 2
				db.Status.CurrentPrimary = "orders-0"
				db.Finalizers = []string{Finalizer}
			})
			objs := append([]client.Object{db, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: topologyName(db)},
				Data: map[string]string{topologyPrimaryKey: "orders-1", topologyInitializedKey: "true",
					topologyFailoverKey: `{"time":"2026-12-04T10:00:00Z","from":"orders-0","to":"orders-1","reason":"primary not ready"}`},
			}}, readyPods(db)...)
			recorded := &scriptedServer{role: engine.RolePrimary, applied: 200}
			if !promoted {
				recorded = &scriptedServer{role: engine.RoleReplica, readOnly: true, applied: 100}
			}
			servers := map[string]*scriptedServer{"orders-0": {role: engine.RolePrimary, applied: 150}, "orders-1": recorded}
			writes := 0
			r, c := newFakeReconciler(t, &writes, objs...)
			r.Instances = scriptedConnector(c, servers)
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
			_, _ = r.Reconcile(ctx, req)

			got := &dbv1.Database{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, cm); err != nil {
				t.Fatal(err)
			}
			want, other := "orders-1", "orders-0"
			if !promoted {
				want, other = "orders-0", "orders-1"
			}
			if got.Status.CurrentPrimary != want || cm.Data[topologyPrimaryKey] != want {
				t.Errorf("primary: status %s, topology %s; want %s", got.Status.CurrentPrimary, cm.Data[topologyPrimaryKey], want)
			}
			if slices.Contains(servers[want].calls, "fence") {
				t.Errorf("the primary %s was fenced (calls %v)", want, servers[want].calls)
			}
			if promoted && !slices.Contains(servers[other].calls, "fence") {
				t.Errorf("the old primary %s, writable, was not fenced (calls %v)", other, servers[other].calls)
			}
			// The failover the lost reconcile made (recorded in the topology
			// before the promotion) is in status all the same.
			if f := got.Status.LastFailover; promoted != (f != nil) || promoted && (f.From != "orders-0" || f.To != "orders-1" || f.Reason != "primary not ready") {
				t.Errorf("status.lastFailover %+v; want one from orders-0 to orders-1 only when it happened", f)
			}
		})
	}
}

// TestRejoinNeedsAWritablePrimary: status names orders-0 the primary and
// its pod looks ready (a stale cache after the API server came back), but
// its server does not answer, while orders-1 serves as a writable primary
// (a promotion whose status write was lost). Rejoin must not fence
// orders-1: the recorded primary was not seen writable. An API server
// restart during a failover did exactly that on real pods.
func TestRejoinNeedsAWritablePrimary(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Spec.Replicas = 2
		db.Status.CurrentPrimary = "orders-0"
		db.Finalizers = []string{Finalizer}
	})
	objs := append([]client.Object{db}, readyPods(db)...)
	servers := map[string]*scriptedServer{"orders-1": {role: engine.RolePrimary, applied: 200}} // orders-0 answers nothing
	writes := 0
	r, c := newFakeReconciler(t, &writes, objs...)
	r.Instances = scriptedConnector(c, servers)
	_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	if calls := servers["orders-1"].calls; slices.Contains(calls, "fence") || slices.Contains(calls, "follow") {
		t.Errorf("orders-1, the writable primary, was fenced or re-pointed at an unreachable orders-0 (calls %v)", calls)
	}
}

// TestTopologyNeverGoesBackOnAPromotion: the cache is behind (a watch not
// caught up after the API server came back): it holds an old topology and
// a status naming orders-0, while the API server's topology already names
// orders-1, promoted and serving writes. The Topology phase must read the
// record afresh before writing and leave it naming orders-1.
func TestTopologyNeverGoesBackOnAPromotion(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Spec.Replicas = 2
		db.Status.CurrentPrimary = "orders-0"
		db.Finalizers = []string{Finalizer}
	})
	topology := func(primary string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: topologyName(db)},
			Data:       map[string]string{topologyPrimaryKey: primary, topologyInitializedKey: "true"},
		}
	}
	writes := 0
	r, cache := newFakeReconciler(t, &writes, append([]client.Object{db, topology("orders-2")}, readyPods(db)...)...)
	_, apiServer := newFakeReconciler(t, &writes, topology("orders-1"))
	r.APIReader = apiServer
	servers := map[string]*scriptedServer{"orders-1": {role: engine.RolePrimary, applied: 200}} // orders-0 answers nothing
	r.Instances = scriptedConnector(cache, servers)
	_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	got := &corev1.ConfigMap{}
	if err := cache.Get(ctx, client.ObjectKeyFromObject(topology("")), got); err != nil {
		t.Fatal(err)
	}
	if got.Data[topologyPrimaryKey] == "orders-0" {
		t.Errorf("the topology was written back to orders-0 over orders-1's promotion")
	}
}
