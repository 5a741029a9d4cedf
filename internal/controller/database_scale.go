package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// A scale-down removes the highest ordinals. When the primary is one of
// them it must not simply be deleted: the StatefulSet keeps it (and every
// ordinal below it) until the primary has moved, by a switchover, to an
// instance that stays; then it shrinks. Scaling to one instance so moves
// the primary to instance 0 first. The claims of the removed instances
// follow deletionPolicy (the chart's whenScaled).

// instancesToRun is how many instances the StatefulSet runs:
// spec.replicas, but never so few that the current primary's ordinal is
// removed, nor, before a primary is chosen among kept volumes, one of
// those volumes' instances (the newest data may be on any).
func instancesToRun(db *dbv1.Database) int32 {
	n := max(db.Spec.Replicas, 1)
	if o := podOrdinal(db.Status.CurrentPrimary); o >= int(n) {
		n = int32(o + 1)
	}
	if kept := db.Annotations[keptVolumesAnnotation]; kept != "" && db.Status.CurrentPrimary == "" {
		for _, claim := range strings.Split(kept, ",") {
			n = max(n, int32(podOrdinal(claim)+1))
		}
	}
	return n
}

// scaleDownWait is how soon a scale-down that waits for a replica to move
// the primary to looks again.
const scaleDownWait = 2 * time.Second

// reconcileScaleDown moves the primary off an ordinal a scale-down
// removes: a switchover to the surviving replica that streams from it and
// is furthest ahead (Event ScaleDownSwitchover). With none, it waits (and
// says so): the StatefulSet keeps the primary meanwhile.
func (r *DatabaseReconciler) reconcileScaleDown(ctx context.Context, db *dbv1.Database, obs *observed) error {
	current, keep := db.Status.CurrentPrimary, int(max(db.Spec.Replicas, 1))
	if r.Instances == nil || current == "" || obs.promoted != "" || obs.primaryUnhealthySince != nil || podOrdinal(current) < keep {
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	primaryPod := podNamed(pods, current)
	if primaryPod == nil || !primaryPod.DeletionTimestamp.IsZero() {
		return nil // a lost primary is failover's
	}
	var staying []*corev1.Pod
	for i := range pods {
		if p := &pods[i]; podOrdinal(p.Name) < keep && p.DeletionTimestamp.IsZero() && podReady(p) {
			staying = append(staying, p)
		}
	}
	target, why := r.switchoverCandidate(ctx, obs, primaryPod, staying)
	if target == nil {
		if why == "" {
			why = "none streams from it yet"
		}
		obs.wait(dbv1.ReasonScaling, fmt.Sprintf("scaling down to %d instances waits to move primary %s to an instance that stays: %s", keep, current, why))
		obs.requeueWithin(scaleDownWait)
		return nil
	}
	r.event(db, corev1.EventTypeNormal, "ScaleDownSwitchover", "Scale",
		"Moving the primary from %s to %s before scaling down to %d instances", current, target.Name, keep)
	if err := r.switchover(ctx, db, obs, pods, target.Name); err != nil {
		return fmt.Errorf("scaling down to %d instances: %w", keep, err)
	}
	return nil
}
