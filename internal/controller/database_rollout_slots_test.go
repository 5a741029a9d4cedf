package controller

import (
	"context"
	"strings"
	"testing"

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
