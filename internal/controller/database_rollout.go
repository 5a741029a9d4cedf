package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// rolloutWait is how soon a rollout looks again while a restarted pod
// comes back.
const rolloutWait = 2 * time.Second

// reconcileRollout rolls a changed pod template (image, resources,
// configuration) out itself: the StatefulSet's update strategy is OnDelete,
// so no pod restarts unless this phase (or Rejoin) deletes it. One pod at
// a time, each only once every other is ready: the replicas first, highest
// ordinal first; then a switchover to an updated replica that streams from
// the primary, so the primary's restart is a planned move with no lost
// write and no failover; then the old primary, now a replica. A Database
// of one instance, or whose servers cannot be reached, has its primary
// restarted in place (its writes stop while it restarts), and an Event
// says so. It waits while a failover is under way, and while a switchover
// the user asked for (spec.primary) can go ahead; a spec.primary still on
// the old template is restarted first, and its switchover follows.
//
// It is not a gate: a switchover that fails here (the target did not
// catch up) is retried with the controller's back-off, and the phases
// after it (Rejoin, which may heal that target) still run.
func (r *DatabaseReconciler) reconcileRollout(ctx context.Context, db *dbv1.Database, obs *observed) error {
	sts := obs.statefulSet
	if sts == nil || sts.Status.UpdateRevision == "" || sts.Status.ObservedGeneration < sts.Generation {
		return nil
	}
	current := db.Status.CurrentPrimary
	if current == "" || obs.promoted != "" || obs.primaryUnhealthySince != nil {
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	plan, ok := planRollout(obs, pods, sts, current)
	if !ok {
		r.stuckRollout(db, obs, pods, sts)
		return nil
	}
	if int32(len(plan.pods)) < max(db.Spec.Replicas, 1) {
		// One pod at a time: wait for it; or the StatefulSet still makes
		// pods (a restarted one, say).
		return nil
	}
	if len(plan.stale) == 0 {
		// Done, every pod there and ready (planRollout waits while one is
		// not): a Database whose new pods do not come up keeps its slot,
		// and the next Database waits.
		r.Rollouts.release(db.UID)
		return nil
	}
	if plan.primary == nil {
		return nil
	}
	if ok, rolling := r.Rollouts.acquire(db.UID); !ok {
		obs.wait(dbv1.ReasonRollingUpdate, fmt.Sprintf("revision %s waits to roll out: %d Databases are rolling a change out (--max-concurrent-rollouts)", plan.revision, rolling))
		obs.requeueWithin(10 * time.Second)
		return nil
	}
	if want := db.Spec.Primary; want != "" && want != current {
		if p := podNamed(plan.pods, want); p != nil && onUpdateRevision(p, sts) {
			return nil // the user's switchover goes first (the Switchover phase)
		}
	}
	for _, p := range plan.stale {
		if p.Name != current {
			obs.restartPod(p, "roll out revision "+plan.revision)
			obs.requeueWithin(rolloutWait)
			return nil
		}
	}
	return r.rollPrimary(ctx, db, obs, plan)
}

// rolloutPlan is where each pod stands in a rollout.
type rolloutPlan struct {
	revision string
	pods     []corev1.Pod  // highest ordinal first
	stale    []*corev1.Pod // on the old template
	updated  []*corev1.Pod // replicas on the new one
	primary  *corev1.Pod
}

// planRollout sorts the pods, highest ordinal first (by number: db-10
// after db-9), into stale and updated. It returns false, with a requeue,
// while a pod is going or not ready: one pod at a time. A replica that
// does not come up on the old template serves nothing, and the new one
// may be its fix: it is restarted at once.
func planRollout(obs *observed, pods []corev1.Pod, sts *appsv1.StatefulSet, current string) (rolloutPlan, bool) {
	plan := rolloutPlan{revision: sts.Status.UpdateRevision, pods: slices.Clone(pods)}
	slices.SortFunc(plan.pods, func(a, b corev1.Pod) int { return podOrdinal(b.Name) - podOrdinal(a.Name) })
	for i := range plan.pods {
		p := &plan.pods[i]
		updated := onUpdateRevision(p, sts)
		switch {
		case !p.DeletionTimestamp.IsZero():
			obs.requeueWithin(rolloutWait)
			return plan, false
		case !podReady(p) && !updated && p.Name != current:
			obs.restartPod(p, "roll out revision "+plan.revision+" (it was not ready)")
			obs.requeueWithin(rolloutWait)
			return plan, false
		case !podReady(p):
			return plan, false // stuckRollout looks again
		case p.Name == current:
			plan.primary = p
		}
		switch {
		case !updated:
			plan.stale = append(plan.stale, p)
		case p.Name != current:
			plan.updated = append(plan.updated, p)
		}
	}
	return plan, true
}

// rollPrimary restarts the primary, the last stale pod: after a switchover
// to an updated replica when one can take over, in place (with an Event)
// when none ever can (no replica; the operator cannot reach the servers).
// A restart in place is the pod's stop, whose first step is its agent's
// planned handover: the server is fenced, and a replica that received
// everything takes over at once (the failover rules when none did).
func (r *DatabaseReconciler) rollPrimary(ctx context.Context, db *dbv1.Database, obs *observed, plan rolloutPlan) error {
	current, revision := plan.primary.Name, plan.revision
	target, why := r.switchoverCandidate(ctx, obs, plan.primary, plan.updated)
	switch {
	case target != nil:
		r.event(db, corev1.EventTypeNormal, "RolloutSwitchover", "Rollout",
			"Switching over from %s to %s (updated to revision %s) before restarting %s", current, target.Name, revision, current)
		if err := r.switchover(ctx, db, obs, plan.pods, target.Name); err != nil {
			return fmt.Errorf("rolling out revision %s: %w", revision, err)
		}
		return nil
	case len(plan.updated) > 0 && r.Instances != nil && why == "":
		// Replicas exist but none can take over now: Rejoin heals them.
		log.FromContext(ctx).Info("rollout waits for an updated replica that streams from the primary", "primary", current, "revision", revision)
		obs.wait(dbv1.ReasonRollingUpdate, fmt.Sprintf("rolling out revision %s waits for an updated replica that streams from primary %s", revision, current))
		obs.requeueWithin(10 * time.Second)
		return nil
	}
	r.event(db, corev1.EventTypeWarning, "RolloutRestartsPrimary", "Rollout",
		"Restarting primary %s in place for revision %s: writes stop until it is back (%s)", current, revision, why)
	obs.restartPod(plan.primary, "roll out revision "+revision)
	obs.requeueWithin(rolloutWait)
	return nil
}

// switchoverCandidate picks the replica among cands to move the primary
// to (an updated one in a rollout, one that stays in a scale-down): one
// that streams from the primary and can catch up, the furthest ahead.
// With none such, why says why none ever can ("" when replicas exist but
// none can take over yet: wait).
func (r *DatabaseReconciler) switchoverCandidate(ctx context.Context, obs *observed, primary *corev1.Pod, cands []*corev1.Pod) (*corev1.Pod, string) {
	switch {
	case len(cands) == 0:
		return nil, "no replica to switch over to"
	case r.Instances == nil:
		return nil, "the operator does not reach servers"
	}
	if _, err := obs.instances.get(ctx, primary); err != nil {
		return nil, fmt.Sprintf("%s cannot be reached: %v", primary.Name, err)
	}
	primaryEP, err := obs.instances.endpoint(ctx, primary)
	if err != nil {
		return nil, fmt.Sprintf("%s has no address: %v", primary.Name, err)
	}
	var best *corev1.Pod
	var bestInst engine.Instance
	var bestAt engine.Position
	reached := 0
	for _, p := range cands {
		inst, err := obs.instances.get(ctx, p)
		if err != nil {
			continue
		}
		reached++
		st, err := inst.Status(ctx)
		if err != nil || st.Role != engine.RoleReplica || !st.Streaming || st.SourceLost != "" || !primaryEP.Is(st.Source) {
			continue
		}
		if best == nil {
			best, bestInst, bestAt = p, inst, st.Received
			continue
		}
		if c, err := bestInst.Compare(st.Received, bestAt); err == nil && c > 0 {
			best, bestInst, bestAt = p, inst, st.Received
		}
	}
	if best == nil && reached == 0 {
		return nil, "no replica to switch over to can be reached"
	}
	return best, ""
}

// DefaultRolloutReadyTimeout bounds how long a rollout waits for an
// instance restarted on the new pod template to become ready unless
// --rollout-ready-timeout says otherwise.
const DefaultRolloutReadyTimeout = 10 * time.Minute

func (r *DatabaseReconciler) rolloutReadyTimeout() time.Duration {
	if r.RolloutReadyTimeout > 0 {
		return r.RolloutReadyTimeout
	}
	return DefaultRolloutReadyTimeout
}

// stuckRollout looks at the pods on the new template that are not ready.
// One that has not become ready within the bound stops the rollout there:
// it is reported (a Warning Event once, Progressing False and Degraded
// True, reason RolloutStuck, naming the pod and why) and the Database's
// rollout slot is released, so that other Databases roll on. The rollout
// goes on when the pod becomes ready (its readiness brings a reconcile).
// Until the bound, it looks again when the bound runs out.
func (r *DatabaseReconciler) stuckRollout(db *dbv1.Database, obs *observed, pods []corev1.Pod, sts *appsv1.StatefulSet) {
	bound, now := r.rolloutReadyTimeout(), r.now()
	for i := range pods {
		p := &pods[i]
		if !onUpdateRevision(p, sts) || podReady(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		since := notReadySince(p)
		if left := since.Add(bound).Sub(now); left > 0 {
			obs.requeueWithin(left)
			continue
		}
		obs.rolloutStuck = fmt.Sprintf("instance %s has not become ready on revision %s for %s (%s): the rollout waits for it and lets other Databases roll on",
			p.Name, sts.Status.UpdateRevision, now.Sub(since).Round(time.Second), podNotReadyWhy(p))
		r.Rollouts.release(db.UID)
		if c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionProgressing); c == nil || c.Reason != dbv1.ReasonRolloutStuck {
			r.event(db, corev1.EventTypeWarning, dbv1.ReasonRolloutStuck, "Rollout", "%s", obs.rolloutStuck)
		}
		return
	}
}

// notReadySince is when pod last stopped being ready, or was made.
func notReadySince(pod *corev1.Pod) time.Time {
	since := pod.CreationTimestamp.Time
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue && c.LastTransitionTime.After(since) {
			since = c.LastTransitionTime.Time
		}
	}
	return since
}

// podNotReadyWhy says what the kubelet reports of a pod that is not ready.
func podNotReadyWhy(pod *corev1.Pod) string {
	for _, c := range pod.Status.ContainerStatuses {
		switch {
		case c.Ready:
		case c.State.Waiting != nil:
			return fmt.Sprintf("%s: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.LastTerminationState.Terminated != nil:
			t := c.LastTerminationState.Terminated
			return fmt.Sprintf("%s: running after it exited with %d (%s), %d restarts", c.Name, t.ExitCode, t.Reason, c.RestartCount)
		default:
			return c.Name + ": running, not ready"
		}
	}
	return "not ready"
}

// podOrdinal is the StatefulSet ordinal at the end of a pod's name (-1
// when there is none).
func podOrdinal(name string) int {
	n, err := strconv.Atoi(name[strings.LastIndex(name, "-")+1:])
	if err != nil {
		return -1
	}
	return n
}

// onUpdateRevision: pod runs the StatefulSet's current pod template.
func onUpdateRevision(pod *corev1.Pod, sts *appsv1.StatefulSet) bool {
	return pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision
}
