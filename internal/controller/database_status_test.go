package controller

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "example.com/database-operator/api/v1"
)

func pod(name, role string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelRole: role}},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func sts(replicas, ready, updated int32, converged bool) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.StatefulSetStatus{
			ObservedGeneration: 2, Replicas: replicas, ReadyReplicas: ready, UpdatedReplicas: updated,
			CurrentRevision: "r1", UpdateRevision: "r1",
		},
	}
	if !converged {
		s.Status.UpdateRevision = "r2"
	}
	return s
}

func TestComputeStatus(t *testing.T) {
	three := func(db *dbv1.Database) { db.Spec.Replicas = 3 }
	running := func(db *dbv1.Database) { db.Spec.Replicas = 3; db.Status.Phase = dbv1.PhaseRunning }
	tests := []struct {
		name                         string
		db                           *dbv1.Database
		obs                          observed
		phase                        dbv1.Phase
		ready, progressing, degraded metav1.ConditionStatus
		readyReason                  string
		primary                      string
		observedGenerationMoves      bool
	}{
		{
			name: "nothing created yet", db: newDB(dbv1.EnginePostgreSQL, three), obs: observed{},
			phase: dbv1.PhasePending, ready: "False", progressing: "True", degraded: "False", readyReason: dbv1.ReasonPrimaryNotReady,
			observedGenerationMoves: true,
		},
		{
			name: "first instance starting", db: newDB(dbv1.EnginePostgreSQL, three),
			obs:   observed{statefulSet: sts(1, 0, 1, true), pods: []corev1.Pod{pod("orders-0", rolePrimary, false)}},
			phase: dbv1.PhaseProvisioning, ready: "False", progressing: "True", degraded: "False", readyReason: dbv1.ReasonPrimaryNotReady,
			observedGenerationMoves: true,
		},
		{
			name: "all ready", db: newDB(dbv1.EnginePostgreSQL, three),
			obs: observed{statefulSet: sts(3, 3, 3, true), pods: []corev1.Pod{
				pod("orders-0", rolePrimary, true), pod("orders-1", roleReplica, true), pod("orders-2", roleReplica, true)}},
			phase: dbv1.PhaseRunning, ready: "True", progressing: "False", degraded: "False", readyReason: dbv1.ReasonAllInstancesReady,
			primary: "orders-0", observedGenerationMoves: true,
		},
		{
			name: "replica lost after running", db: newDB(dbv1.EnginePostgreSQL, running),
			obs: observed{statefulSet: sts(3, 2, 3, true), pods: []corev1.Pod{
				pod("orders-0", rolePrimary, true), pod("orders-1", roleReplica, true), pod("orders-2", roleReplica, false)}},
			phase: dbv1.PhaseDegraded, ready: "False", progressing: "False", degraded: "True", readyReason: dbv1.ReasonInstancesNotReady,
			primary: "orders-0", observedGenerationMoves: true,
		},
		{
			name: "rolling update", db: newDB(dbv1.EnginePostgreSQL, running),
			obs: observed{statefulSet: sts(3, 3, 1, false), pods: []corev1.Pod{
				pod("orders-0", rolePrimary, true), pod("orders-1", roleReplica, true), pod("orders-2", roleReplica, true)}},
			phase: dbv1.PhaseUpdating, ready: "True", progressing: "True", degraded: "False", readyReason: dbv1.ReasonAllInstancesReady,
			primary: "orders-0", observedGenerationMoves: true,
		},
		{
			name: "unlabelled primary is not serving", db: newDB(dbv1.EnginePostgreSQL),
			obs:   observed{statefulSet: sts(1, 1, 1, true), pods: []corev1.Pod{pod("orders-0", "", true)}},
			phase: dbv1.PhaseDegraded, ready: "False", progressing: "False", degraded: "True", readyReason: dbv1.ReasonPrimaryNotReady,
			observedGenerationMoves: true,
		},
		{
			name: "all ready but a replica does not replicate", db: newDB(dbv1.EnginePostgreSQL, running),
			obs: observed{statefulSet: sts(3, 3, 3, true), pods: []corev1.Pod{
				pod("orders-0", rolePrimary, true), pod("orders-1", roleReplica, true), pod("orders-2", roleReplica, true)},
				instancesObserved: true,
				replication:       replicationHealth{metav1.ConditionFalse, dbv1.ReasonReplicaNotReplicating, "not replicating from orders-0: orders-2 is Stopped (WAL replay is paused)"}},
			phase: dbv1.PhaseDegraded, ready: "False", progressing: "False", degraded: "True", readyReason: dbv1.ReasonReplicationUnhealthy,
			primary: "orders-0", observedGenerationMoves: true,
		},
		{
			name: "a new Database whose pod cannot start", db: newDB(dbv1.EnginePostgreSQL),
			obs: observed{statefulSet: sts(1, 0, 1, true), pods: []corev1.Pod{pod("orders-0", "", false)}, instancesObserved: true,
				instanceStates: []dbv1.InstanceStatus{{Name: "orders-0", Failure: &dbv1.InstanceFailure{Reason: "CreateContainerConfigError", Container: "database", Message: `secret "orders-tls" not found`}}}},
			phase: dbv1.PhaseFailed, ready: "False", progressing: "True", degraded: "True", readyReason: dbv1.ReasonPrimaryNotReady,
			observedGenerationMoves: true,
		},
		{
			name: "a phase failed with nothing ready", db: newDB(dbv1.EnginePostgreSQL),
			obs:   observed{failedPhase: "Apply", err: errors.New("applying StatefulSet orders: forbidden")},
			phase: dbv1.PhaseFailed, ready: "False", progressing: "True", degraded: "True", readyReason: dbv1.ReasonPrimaryNotReady,
		},
		{
			name: "a phase failed while serving", db: newDB(dbv1.EnginePostgreSQL, running),
			obs: observed{statefulSet: sts(3, 3, 3, true), failedPhase: "Apply", err: errors.New("boom"), pods: []corev1.Pod{
				pod("orders-0", rolePrimary, true), pod("orders-1", roleReplica, true), pod("orders-2", roleReplica, true)}},
			phase: dbv1.PhaseDegraded, ready: "True", progressing: "False", degraded: "True", readyReason: dbv1.ReasonAllInstancesReady,
			primary: "orders-0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.db.Generation = 7
			st := computeStatus(tt.db, &tt.obs)
			if st.Phase != tt.phase {
				t.Errorf("phase %s, want %s", st.Phase, tt.phase)
			}
			for typ, want := range map[string]metav1.ConditionStatus{dbv1.ConditionReady: tt.ready, dbv1.ConditionProgressing: tt.progressing, dbv1.ConditionDegraded: tt.degraded} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil || c.Status != want {
					t.Errorf("%s = %v, want %s", typ, c, want)
				} else if c.Message == "" || c.Reason == "" || c.ObservedGeneration != 7 {
					t.Errorf("%s lacks reason, message or generation: %+v", typ, c)
				}
			}
			if c := meta.FindStatusCondition(st.Conditions, dbv1.ConditionReady); c.Reason != tt.readyReason {
				t.Errorf("Ready reason %s, want %s", c.Reason, tt.readyReason)
			}
			if tt.obs.err != nil {
				if c := meta.FindStatusCondition(st.Conditions, dbv1.ConditionDegraded); c.Reason != "ApplyFailed" || c.Message != tt.obs.err.Error() {
					t.Errorf("Degraded %+v does not carry the failed phase and its error", c)
				}
			}
			if f := failingInstances(tt.obs.instanceStates); len(f) > 0 {
				for _, typ := range []string{dbv1.ConditionInstancesHealthy, dbv1.ConditionDegraded, dbv1.ConditionReady} {
					c := meta.FindStatusCondition(st.Conditions, typ)
					if c == nil || !strings.Contains(c.Message, f[0].Name) || !strings.Contains(c.Message, f[0].Failure.Reason) || !strings.Contains(c.Message, f[0].Failure.Message) {
						t.Errorf("%s %+v does not name %s, its reason and its message", typ, c, f[0].Name)
					}
				}
			}
			if rh := tt.obs.replication; rh.reason != "" {
				c := meta.FindStatusCondition(st.Conditions, dbv1.ConditionReplicationHealthy)
				if c == nil || c.Status != rh.status || c.Reason != rh.reason || c.Message != rh.message {
					t.Errorf("ReplicationHealthy %+v, want %+v", c, rh)
				}
				if r := meta.FindStatusCondition(st.Conditions, dbv1.ConditionReady); rh.status == metav1.ConditionFalse && !strings.Contains(r.Message, rh.message) {
					t.Errorf("Ready %q does not say why replication is unhealthy", r.Message)
				}
			}
			if st.CurrentPrimary != tt.primary {
				t.Errorf("currentPrimary %q, want %q", st.CurrentPrimary, tt.primary)
			}
			if moved := st.ObservedGeneration == 7; moved != tt.observedGenerationMoves {
				t.Errorf("observedGeneration %d (moved=%v), want moved=%v", st.ObservedGeneration, moved, tt.observedGenerationMoves)
			}
			if st.Endpoints.ReadWrite != "orders-rw.shop.svc:5432" || st.Endpoints.ReadOnly != "orders-ro.shop.svc:5432" {
				t.Errorf("endpoints %+v", st.Endpoints)
			}
			if st.Version != "17" || st.Selector != "app.kubernetes.io/instance=orders,app.kubernetes.io/name=database" {
				t.Errorf("version %q selector %q", st.Version, st.Selector)
			}
		})
	}
}

// TestComputeStatusStable: computing twice from the same observation gives
// an equal status, so a steady Database causes no status write.
func TestComputeStatusStable(t *testing.T) {
	db := newDB(dbv1.EngineMariaDB)
	obs := &observed{statefulSet: sts(1, 1, 1, true), pods: []corev1.Pod{pod("orders-0", rolePrimary, true)}}
	db.Status = computeStatus(db, obs)
	again := computeStatus(db, obs)
	if !equalStatus(db.Status, again) {
		t.Errorf("status changed on recompute:\n%+v\n%+v", db.Status, again)
	}
}

// TestReadySaysServesWritesOnlyWhenChecked: a ready primary pod is not
// proof of a server taking writes; only the server's own answer is.
func TestReadySaysServesWritesOnlyWhenChecked(t *testing.T) {
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Spec.Replicas = 1 })
	pods := []corev1.Pod{pod(db.Name+"-0", rolePrimary, true)}
	for _, tc := range []struct {
		check primaryCheck
		want  string
	}{
		{primaryCheck{verified: true}, "1/1 instances ready; primary " + db.Name + "-0 serves writes"},
		{primaryCheck{detail: "dial tcp 10.244.0.1:5432: connect: no route to host"},
			"1/1 instances ready; primary " + db.Name + "-0: serving writes not verified (dial tcp 10.244.0.1:5432: connect: no route to host)"},
		{primaryCheck{}, "1/1 instances ready; primary " + db.Name + "-0: serving writes not verified (not checked)"},
	} {
		st := computeStatus(db, &observed{pods: pods, podsListed: true, statefulSet: sts(1, 1, 1, true), primaryCheck: tc.check})
		ready := meta.FindStatusCondition(st.Conditions, dbv1.ConditionReady)
		if ready == nil || ready.Message != tc.want {
			t.Errorf("check %+v: Ready %+v, want message %q", tc.check, ready, tc.want)
		}
	}
}
