package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// rolloutWait is how soon a rollout looks again while a restarted pod
// comes back.
const rolloutWait = 2 * time.Second

// reconcileRollout rolls a changed pod template (image, resources,
// configuration) out itself: the StatefulSet's update strategy is OnDelete,
// so no pod restarts unless this phase (or Rejoin) deletes it. One pod at
// a time, each only once every other is ready: the replicas first, highest
// ordinal first; then a switchover to an updated replica, so the primary's
// restart is a planned move with no lost write and no failover; then the
// old primary, now a replica. A Database of one instance, or one whose
// servers cannot be reached, has its primary restarted in place (its
// writes stop while it restarts), and an Event says so.
//
// It waits while a failover or a switchover the user asked for is under
// way, and names the switchover's target in obs.rolloutTarget for the
// Switchover phase, which runs next.
func (r *DatabaseReconciler) reconcileRollout(ctx context.Context, db *dbv1.Database, obs *observed) error {
	sts := obs.statefulSet
	if sts == nil || sts.Status.UpdateRevision == "" || sts.Status.ObservedGeneration < sts.Generation {
		return nil
	}
	current := db.Status.CurrentPrimary
	if current == "" || obs.promoted != "" || obs.primaryUnhealthySince != nil ||
		(db.Spec.Primary != "" && db.Spec.Primary != current) {
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	revision := sts.Status.UpdateRevision
	var stale []*corev1.Pod
	var primary, updated *corev1.Pod
	for i := range pods {
		p := &pods[i]
		isStale := p.Labels[appsv1.ControllerRevisionHashLabelKey] != revision
		switch {
		case !p.DeletionTimestamp.IsZero():
			obs.requeueWithin(rolloutWait) // one pod at a time: wait for it
			return nil
		case !podReady(p) && isStale && p.Name != current:
			// A replica that does not come up on the old template serves
			// nothing: the new one may be its fix.
			obs.restartPod(p, "roll out revision "+revision+" (it was not ready)")
			obs.requeueWithin(rolloutWait)
			return nil
		case !podReady(p):
			obs.requeueWithin(rolloutWait)
			return nil
		}
		switch {
		case isStale:
			stale = append(stale, p)
		case p.Name != current && updated == nil:
			updated = p
		}
		if p.Name == current {
			primary = p
		}
	}
	if len(stale) == 0 || int32(len(pods)) < max(db.Spec.Replicas, 1) {
		return nil // nothing to roll, or the StatefulSet still makes pods
	}
	// Replicas first, the highest ordinal first (as RollingUpdate would).
	slices.SortFunc(stale, func(a, b *corev1.Pod) int { return -strings.Compare(a.Name, b.Name) })
	for _, p := range stale {
		if p.Name != current {
			obs.restartPod(p, "roll out revision "+revision)
			obs.requeueWithin(rolloutWait)
			return nil
		}
	}
	// Only the primary is left.
	why := r.switchoverImpossible(ctx, obs, primary, updated)
	if why == "" {
		obs.rolloutTarget = updated.Name
		r.event(db, corev1.EventTypeNormal, "RolloutSwitchover", "Rollout",
			"Switching over from %s to %s (updated to revision %s) before restarting %s", current, updated.Name, revision, current)
		return nil
	}
	r.event(db, corev1.EventTypeWarning, "RolloutRestartsPrimary", "Rollout",
		"Restarting primary %s in place for revision %s: writes stop until it is back (%s)", current, revision, why)
	obs.restartPod(primary, "roll out revision "+revision)
	obs.requeueWithin(rolloutWait)
	return nil
}

// switchoverImpossible says why a rollout cannot move the primary to
// target first ("" when it can).
func (r *DatabaseReconciler) switchoverImpossible(ctx context.Context, obs *observed, primary, target *corev1.Pod) string {
	switch {
	case target == nil:
		return "no updated replica to switch over to"
	case r.Instances == nil:
		return "the operator does not reach servers"
	}
	for _, p := range []*corev1.Pod{primary, target} {
		if _, err := obs.instances.get(ctx, p); err != nil {
			return fmt.Sprintf("%s cannot be reached: %v", p.Name, err)
		}
	}
	return ""
}
