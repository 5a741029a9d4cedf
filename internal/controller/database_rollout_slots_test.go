package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "example.com/database-operator/api/v1"
)

// TestRolloutsAFewAtATime: with one slot, of two Databases whose template
// changed at once (an operator upgrade), one rolls and the other waits,
// saying why, until the first has no pod left on the old template.
func TestRolloutsAFewAtATime(t *testing.T) {
	writes := 0
	r, _ := newFakeReconciler(t, &writes)
	r.Rollouts = &RolloutSlots{Max: 1}
	roll := func(name, podRevision string) *observed {
		t.Helper()
		db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
			db.Name, db.UID, db.Status.CurrentPrimary = name, types.UID(name), name+"-0"
		})
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: "new"}}
		pod := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name + "-0", Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: podRevision}},
			Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
		if podRevision == "" {
			pod = corev1.Pod{} // deleted, not made again yet
		}
		obs := &observed{statefulSet: sts, pods: []corev1.Pod{pod}, podsListed: true}
		if podRevision == "" {
			obs.pods = nil
		}
		if err := r.reconcileRollout(context.Background(), db, obs); err != nil {
			t.Fatal(err)
		}
		return obs
	}
	if obs := roll("a", "old"); len(obs.restart) != 1 || obs.waiting != "" {
		t.Fatalf("the first Database: restarts %d, waiting %q; want it rolling", len(obs.restart), obs.waiting)
	}
	if obs := roll("b", "old"); len(obs.restart) != 0 || !strings.Contains(obs.waiting, "1 Databases are rolling") {
		t.Fatalf("the second Database: restarts %d, waiting %q; want it waiting for a slot", len(obs.restart), obs.waiting)
	}
	if obs := roll("a", "old"); len(obs.restart) != 1 {
		t.Fatalf("the first Database, again: restarts %d; want it to keep its slot", len(obs.restart))
	}
	roll("a", "") // its pod restarting: the StatefulSet has not made it again yet
	if obs := roll("b", "old"); len(obs.restart) != 0 {
		t.Fatal("the second Database rolled while the first one's pod was gone")
	}
	roll("a", "new") // done: its slot is free
	if obs := roll("b", "old"); len(obs.restart) != 1 || obs.waiting != "" {
		t.Fatalf("the second Database once the first is done: restarts %d, waiting %q", len(obs.restart), obs.waiting)
	}
}

// TestStuckRolloutLetsOthersRoll: a pod restarted on the new template
// that never becomes ready holds the rollout slot only until the bound:
// then its Database reports RolloutStuck (Progressing False, Degraded
// True, an Event naming the pod and why) and gives its slot up, and the
// next Database rolls.
func TestStuckRolloutLetsOthersRoll(t *testing.T) {
	writes := 0
	r, _ := newFakeReconciler(t, &writes)
	r.Rollouts = &RolloutSlots{Max: 1}
	r.RolloutReadyTimeout = 10 * time.Minute
	now := time.Now()
	r.Now = func() time.Time { return now }
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: "new"}}
	dbNamed := func(name string) *dbv1.Database {
		return newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
			db.Name, db.UID, db.Status.CurrentPrimary = name, types.UID(name), name+"-0"
		})
	}
	pod := func(name, revision string, ready bool, age time.Duration) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age)),
			Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: revision}}}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "database", RestartCount: 7,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s"}}}}
		}
		return p
	}
	roll := func(db *dbv1.Database, pods ...corev1.Pod) *observed {
		t.Helper()
		obs := &observed{statefulSet: sts, pods: pods, podsListed: true}
		if err := r.reconcileRollout(context.Background(), db, obs); err != nil {
			t.Fatal(err)
		}
		return obs
	}
	a, b := dbNamed("a"), dbNamed("b")
	// a takes the slot and restarts its replica, which comes back broken.
	if obs := roll(a, pod("a-0", "old", true, time.Hour), pod("a-1", "old", true, time.Hour)); len(obs.restart) != 1 {
		t.Fatalf("a: restarts %d, want its replica restarted", len(obs.restart))
	}
	broken := pod("a-1", "new", false, 9*time.Minute)
	if obs := roll(a, pod("a-0", "old", true, time.Hour), broken); obs.rolloutStuck != "" || obs.requeue <= 0 || obs.requeue > time.Minute+time.Second {
		t.Fatalf("a within the bound: stuck %q, requeue %s; want a wait until the bound", obs.rolloutStuck, obs.requeue)
	}
	if obs := roll(b, pod("b-0", "old", true, time.Hour), pod("b-1", "old", true, time.Hour)); !strings.Contains(obs.waiting, "rolling a change out") {
		t.Fatalf("b while a holds the slot: waiting %q", obs.waiting)
	}
	broken = pod("a-1", "new", false, 11*time.Minute)
	obs := roll(a, pod("a-0", "old", true, time.Hour), broken)
	if !strings.Contains(obs.rolloutStuck, "instance a-1 has not become ready on revision new for 11m0s (database: CrashLoopBackOff back-off 10s)") {
		t.Fatalf("a past the bound: stuck %q", obs.rolloutStuck)
	}
	st := computeStatus(a, obs)
	for _, c := range st.Conditions {
		if (c.Type == dbv1.ConditionProgressing || c.Type == dbv1.ConditionDegraded) && c.Reason != dbv1.ReasonRolloutStuck {
			t.Errorf("condition %s: reason %s, want RolloutStuck", c.Type, c.Reason)
		}
	}
	if obs := roll(b, pod("b-0", "old", true, time.Hour), pod("b-1", "old", true, time.Hour)); len(obs.restart) != 1 || obs.waiting != "" {
		t.Fatalf("b once a is stuck: restarts %d, waiting %q; want it rolling", len(obs.restart), obs.waiting)
	}
}
