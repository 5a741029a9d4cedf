package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/engine"
)

// fakeInstance orders positions by LSN alone, as a PostgreSQL instance on
// one timeline would; GTID "x" marks a diverged position.
type fakeInstance struct{ engine.Instance }

func (fakeInstance) Compare(a, b engine.Position) (int, error) {
	if a.GTID == "x" || b.GTID == "x" {
		return 0, engine.ErrDiverged
	}
	switch {
	case a.LSN < b.LSN:
		return -1, nil
	case a.LSN > b.LSN:
		return 1, nil
	}
	return 0, nil
}

func (fakeInstance) Lag(replica, primary engine.Position) (int64, error) {
	if primary.LSN <= replica.LSN {
		return 0, nil
	}
	return int64(primary.LSN - replica.LSN), nil
}

func (fakeInstance) KeepSlots(context.Context, string, []string) (engine.Slots, error) {
	return engine.Slots{}, nil
}

func (fakeInstance) DropSlot(context.Context, string) error { return nil }

// ApplyParameters: a server with nothing to change.
func (fakeInstance) ApplyParameters(context.Context, map[string]string) ([]string, error) {
	return nil, nil
}

func cand(name string, role engine.Role, applied, received engine.LSN) candidate {
	return candidate{
		pod:    &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}},
		inst:   fakeInstance{},
		status: engine.Status{Role: role, Applied: engine.Position{LSN: applied}, Received: engine.Position{LSN: received}},
	}
}

func TestChooseCandidate(t *testing.T) {
	tests := []struct {
		name  string
		cands []candidate
		want  string
	}{
		{"the least lagging replica wins", []candidate{cand("db-1", engine.RoleReplica, 100, 100), cand("db-2", engine.RoleReplica, 300, 300)}, "db-2"},
		{"first by ordinal on a tie", []candidate{cand("db-1", engine.RoleReplica, 300, 300), cand("db-2", engine.RoleReplica, 300, 300)}, "db-1"},
		{"more received wins: promotion applies it", []candidate{cand("db-1", engine.RoleReplica, 350, 350), cand("db-2", engine.RoleReplica, 300, 400)}, "db-2"},
		{"equal received: more applied wins", []candidate{cand("db-1", engine.RoleReplica, 300, 400), cand("db-2", engine.RoleReplica, 390, 400)}, "db-2"},
		{"a primary is never a candidate", []candidate{cand("db-1", engine.RolePrimary, 900, 900), cand("db-2", engine.RoleReplica, 10, 10)}, "db-2"},
	}
	for _, tt := range tests {
		got, why, err := chooseCandidate(tt.cands, nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got.pod.Name != tt.want {
			t.Errorf("%s: chose %s, want %s (%s)", tt.name, got.pod.Name, tt.want, why)
		}
		if !strings.Contains(why, tt.want) {
			t.Errorf("%s: explanation %q does not name the choice", tt.name, why)
		}
	}
	if _, _, err := chooseCandidate(nil, nil); err == nil {
		t.Error("no candidates: no error")
	}
	if _, _, err := chooseCandidate([]candidate{cand("db-1", engine.RolePrimary, 1, 1)}, nil); err == nil {
		t.Error("only a primary: no error")
	}
}

// Replicas that diverged cannot be ordered: the choice (the lower ordinal)
// is never silent, the reason names the pair and what their rejoin will set
// aside.
func TestChooseCandidateDiverged(t *testing.T) {
	diverged := cand("db-2", engine.RoleReplica, 500, 500)
	diverged.status.Received.GTID = "x"
	got, why, err := chooseCandidate([]candidate{cand("db-1", engine.RoleReplica, 300, 300), diverged}, nil)
	if err != nil || got.pod.Name != "db-1" {
		t.Fatalf("chose %v (%v), want db-1, the first by ordinal", got.pod, err)
	}
	if !strings.Contains(why, "diverged") || !strings.Contains(why, "db-1 and db-2") || !strings.Contains(why, "set aside") {
		t.Errorf("explanation %q does not say db-1 and db-2 diverged", why)
	}
	// Ordered replicas: no word of divergence.
	if _, why, _ := chooseCandidate([]candidate{cand("db-1", engine.RoleReplica, 300, 300), cand("db-2", engine.RoleReplica, 500, 500)}, nil); strings.Contains(why, "diverged") {
		t.Errorf("explanation %q speaks of divergence", why)
	}
}

func TestChooseCandidateLagBound(t *testing.T) {
	bound := &lagBound{primary: engine.Position{LSN: 1000}, max: 100}
	// db-2 is within the bound; db-1, beyond it, is passed over and named.
	got, why, err := chooseCandidate([]candidate{cand("db-1", engine.RoleReplica, 850, 850), cand("db-2", engine.RoleReplica, 950, 950)}, bound)
	if err != nil || got.pod.Name != "db-2" {
		t.Fatalf("chose %v (%v), want db-2", got.pod, err)
	}
	if !strings.Contains(why, "beyond maxLag 100") || !strings.Contains(why, "db-1 lags 150") {
		t.Errorf("explanation %q does not say db-1 is beyond the bound", why)
	}
	// Every replica beyond the bound: no failover, and the error says why.
	_, _, err = chooseCandidate([]candidate{cand("db-1", engine.RoleReplica, 850, 850), cand("db-2", engine.RoleReplica, 880, 880)}, bound)
	if err == nil || !strings.Contains(err.Error(), "beyond spec.failover.maxLag 100") || !strings.Contains(err.Error(), "db-2 lags 120") {
		t.Errorf("every replica beyond the bound: %v", err)
	}
	// At the bound exactly is allowed.
	if got, _, err := chooseCandidate([]candidate{cand("db-1", engine.RoleReplica, 900, 900)}, bound); err != nil || got.pod.Name != "db-1" {
		t.Errorf("a replica exactly at the bound: %v %v", got.pod, err)
	}
}

// TestFailoverDuringRollout: a primary that is unready and does not answer
// while the pods roll out is failed over like any other, whatever its
// revision: the operator restarts a primary for a rollout only after a
// switchover (or in place when no failover could happen: one instance,
// servers out of reach), so sparing it would only keep failover off while
// the rollout waits for that very primary.
func TestFailoverDuringRollout(t *testing.T) {
	for _, tt := range []struct {
		name          string
		primaryRev    string
		wantCountdown bool
	}{
		{"on the new revision", "orders-2", true},
		{"on the old revision", "orders-1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 2
				db.Status.CurrentPrimary = "orders-0"
				db.Finalizers = []string{Finalizer}
			})
			var pods []client.Object
			for i := range 2 {
				ready, labels := corev1.ConditionTrue, selectorLabels(db)
				labels[appsv1.ControllerRevisionHashLabelKey] = "orders-1" // the replica not rolled yet
				if i == 0 {
					ready = corev1.ConditionFalse
					labels[appsv1.ControllerRevisionHashLabelKey] = tt.primaryRev
				}
				pods = append(pods, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: fmt.Sprintf("orders-%d", i), Labels: labels},
					Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
				})
			}
			writes := 0
			r, c := newFakeReconciler(t, &writes, append(pods, db)...)
			r.Instances = &InstanceConnector{Client: c, Resolve: func(context.Context, *corev1.Pod, int) (engine.Endpoint, error) {
				return engine.Endpoint{}, errors.New("no server answers")
			}}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			// The first reconcile applied the StatefulSet; now it is mid-rollout.
			sts := &appsv1.StatefulSet{}
			if err := c.Get(ctx, req.NamespacedName, sts); err != nil {
				t.Fatal(err)
			}
			sts.Status.CurrentRevision, sts.Status.UpdateRevision = "orders-1", "orders-2"
			sts.Status.UpdatedReplicas = 0 // the rollout goes on
			if tt.primaryRev == "orders-2" {
				sts.Status.UpdatedReplicas = 1
			}
			sts.Status.ObservedGeneration = sts.Generation
			if err := c.Status().Update(ctx, sts); err != nil {
				t.Fatal(err)
			}
			got := &dbv1.Database{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			got.Status.PrimaryUnhealthySince = nil
			if err := c.Status().Update(ctx, got); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if started := got.Status.PrimaryUnhealthySince != nil; started != tt.wantCountdown {
				t.Errorf("failover countdown started: %v, want %v (primaryUnhealthySince %v)", started, tt.wantCountdown, got.Status.PrimaryUnhealthySince)
			}
		})
	}
}

// TestSynchronousQuorum: with k of n replicas acknowledging each commit, a
// failover must see n-k+1 replicas' positions; a missing pod still counts
// as a replica that may have acknowledged.
func TestSynchronousQuorum(t *testing.T) {
	pods := func(n int) []corev1.Pod { return make([]corev1.Pod, n) }
	replicas := func(n int) []candidate {
		var out []candidate
		for i := range n {
			out = append(out, cand(fmt.Sprintf("orders-%d", i+1), engine.RoleReplica, 1, 1))
		}
		return out
	}
	for _, tt := range []struct {
		name           string
		replicas, k    int32
		pods           int
		cands          []candidate
		need, seen     int
		wantPromotable bool
	}{
		{name: "asynchronous", replicas: 3, pods: 3, cands: replicas(1), wantPromotable: true},
		{name: "any 1 of 2, both answer", replicas: 3, k: 1, pods: 3, cands: replicas(2), need: 2, seen: 2, wantPromotable: true},
		{name: "any 1 of 2, a standby lost with the primary", replicas: 3, k: 1, pods: 3, cands: replicas(1), need: 2, seen: 1},
		{name: "any 2 of 2, one answers", replicas: 3, k: 2, pods: 3, cands: replicas(1), need: 1, seen: 1, wantPromotable: true},
		{name: "any 1 of 1", replicas: 2, k: 1, pods: 2, cands: replicas(1), need: 1, seen: 1, wantPromotable: true},
		{name: "a replica's pod is missing", replicas: 3, k: 1, pods: 2, cands: replicas(1), need: 2, seen: 1},
		{name: "scaled down, pods not yet gone", replicas: 2, k: 1, pods: 3, cands: replicas(1), need: 2, seen: 1},
		{name: "a fenced primary is no replica", replicas: 2, k: 1, pods: 2,
			cands: []candidate{cand("orders-1", engine.RolePrimary, 1, 1)}, need: 1, seen: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = tt.replicas
				if tt.k > 0 {
					db.Spec.Replication = dbv1.ReplicationSpec{Mode: dbv1.ReplicationSynchronous, SynchronousReplicas: &tt.k}
				}
			})
			need, seen := synchronousQuorum(db, pods(tt.pods), tt.cands)
			if need != tt.need || seen != tt.seen || (seen >= need) != tt.wantPromotable {
				t.Errorf("need %d, seen %d; want need %d, seen %d, promotable %v", need, seen, tt.need, tt.seen, tt.wantPromotable)
			}
		})
	}
}

// failedPrimary is a Database of two whose primary orders-0 has been
// unready for a minute, past its failover delay (0), and its two pods.
func failedPrimary() (*dbv1.Database, []client.Object) {
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Replicas = 2
		db.Spec.Failover.DelaySeconds = ptr.To[int32](0)
		db.Status.CurrentPrimary = "orders-0"
		db.Status.PrimaryUnhealthySince = &metav1.Time{Time: time.Now().Add(-time.Minute)}
		db.Finalizers = []string{Finalizer}
	})
	pods := readyPods(db)
	pods[0].(*corev1.Pod).Status.Conditions[0].Status = corev1.ConditionFalse
	return db, pods
}

// TestFailoverWaitsForTheFencedPrimary: the old primary's pod is not ready
// but its server answers (its agent made it read-only when it lost the
// Lease): the failover fences it and promotes the replica only once that
// has applied everything the old primary wrote, never with less.
func TestFailoverWaitsForTheFencedPrimary(t *testing.T) {
	ctx := context.Background()
	db, pods := failedPrimary()
	servers := map[string]*scriptedServer{
		"orders-0": {role: engine.RolePrimary, readOnly: true, applied: 100},
		"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 40, catchUpTo: 100},
	}
	writes := 0
	r, c := newFakeReconciler(t, &writes, append(pods, db)...)
	r.Instances = scriptedConnector(c, servers)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	for range 3 {
		_, _ = r.Reconcile(ctx, req)
		if slices.Contains(servers["orders-1"].calls, "promote") {
			break
		}
	}
	next := servers["orders-1"]
	if !slices.Contains(next.calls, "promote") {
		t.Fatalf("orders-1 was never promoted (calls %v)", next.calls)
	}
	if !slices.Contains(servers["orders-0"].calls, "fence") {
		t.Errorf("the old primary was not fenced (calls %v)", servers["orders-0"].calls)
	}
	if next.appliedAtPromote != 100 {
		t.Errorf("orders-1 promoted at %d, before it applied the fenced primary's 100: its writes past that lost", next.appliedAtPromote)
	}
}

// failoverEvents are the reasons of the Failover Events r emitted so far,
// in order.
func failoverEvents(r *DatabaseReconciler) []string {
	var reasons []string
	ch := r.Recorder.(*events.FakeRecorder).Events
	for {
		select {
		case e := <-ch:
			if f := strings.Fields(e); len(f) > 1 && strings.HasPrefix(f[1], "Failover") {
				reasons = append(reasons, f[1])
			}
		default:
			return reasons
		}
	}
}

// TestFailoverSteps: a failover is named steps, each reported in an Event
// in order once done; a step that must wait (the Lease of a primary that
// could not be fenced has not expired) stops the steps after it, so
// nothing is recorded or promoted before it.
func TestFailoverSteps(t *testing.T) {
	all := []string{"FailoverReplicasSurveyed", "FailoverCandidateChosen", "FailoverOldPrimaryFenced", "FailoverLeaseTaken",
		"FailoverFailsafeCleared", "FailoverStarted", "FailoverRecorded", "FailoverPromoted", "FailoverSlotsKept",
		"FailoverCompleted", "FailoverReplicasRepointed"}
	for _, tt := range []struct {
		name         string
		oldReachable bool
		want         []string
		promoted     bool
	}{
		{"the old primary fenced: every step", true, all, true},
		{"the old primary unreachable: waits for its Lease", false, append(all[:2:2], "FailoverOldPrimaryUnreachable"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db, pods := failedPrimary()
			servers := map[string]*scriptedServer{"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 100}}
			if tt.oldReachable {
				servers["orders-0"] = &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 100}
			}
			writes := 0
			r, c := newFakeReconciler(t, &writes, append(pods, db)...)
			r.Instances = scriptedConnector(c, servers)
			res, _ := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
			if got := failoverEvents(r); !slices.Equal(got, tt.want) {
				t.Errorf("Failover Events\n got %v\nwant %v", got, tt.want)
			}
			if promoted := slices.Contains(servers["orders-1"].calls, "promote"); promoted != tt.promoted {
				t.Errorf("orders-1 promoted: %v, want %v (calls %v)", promoted, tt.promoted, servers["orders-1"].calls)
			}
			if !tt.promoted && (res.RequeueAfter <= 0 || res.RequeueAfter > r.leaseDuration()+agent.Margin(r.leaseDuration())) {
				t.Errorf("waiting for the Lease: requeue after %s, want within the Lease's expiry", res.RequeueAfter)
			}
		})
	}
}
