package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// switchoverCatchUp bounds how long the target may take to apply what the
// fenced primary wrote before the switchover is abandoned (and the old
// primary unfenced).
const switchoverCatchUp = 60 * time.Second

// reconcileSwitchover moves the primary role to spec.primary when it names
// another ready instance. A target still on the old pod template while a
// rollout goes on waits: the rollout restarts it first (a switchover to it
// now would be followed by another to restart it).
func (r *DatabaseReconciler) reconcileSwitchover(ctx context.Context, db *dbv1.Database, obs *observed) error {
	target, current := db.Spec.Primary, db.Status.CurrentPrimary
	if r.Instances == nil || target == "" || current == "" || target == current || obs.promoted != "" {
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	if sts := obs.statefulSet; sts != nil && sts.Status.UpdateRevision != "" {
		for i := range pods {
			if pods[i].Name == target && !onUpdateRevision(&pods[i], sts) {
				obs.requeueWithin(rolloutWait)
				return nil
			}
		}
	}
	return r.switchover(ctx, db, obs, pods, target)
}

// switchover moves the primary role to target: fence the current primary,
// wait until the target has applied everything the primary wrote, promote
// the target, and point every other instance at it. Writes stop for the
// length of the catch-up; none that was acknowledged is lost.
func (r *DatabaseReconciler) switchover(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, target string) error {
	current := db.Status.CurrentPrimary
	targetPod, currentPod, err := switchoverPods(pods, current, target)
	if err != nil {
		return err
	}
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return err
	}
	old, err := obs.instances.get(ctx, currentPod)
	if err != nil {
		return fmt.Errorf("switchover to %s: reaching current primary %s: %w", target, current, err)
	}
	next, err := obs.instances.get(ctx, targetPod)
	if err != nil {
		return fmt.Errorf("switchover to %s: %w", target, err)
	}
	nst, err := next.Status(ctx)
	if err != nil {
		return fmt.Errorf("switchover to %s: reading it: %w", target, err)
	}
	if nst.Writable() {
		// An earlier reconcile's promotion went through after all (see
		// failedPromotion): finish that switchover, never undo it.
		err = r.finishPromoted(ctx, db, old, current, target)
	} else {
		err = r.switchTo(ctx, db, obs, pods, switchPair{old: old, next: next, oldPod: currentPod, nextPod: targetPod})
	}
	if err != nil {
		return err
	}
	obs.promoted = target
	if err := r.keepSlots(ctx, db, obs, next, target, pods); err != nil {
		log.FromContext(ctx).Error(err, "replication slots on the new primary; the Rejoin phase tries again", "primary", target)
	}
	return r.repointAll(ctx, obs, pods, targetPod, current, repl)
}

// switchoverPods finds the target's pod, which must be ready, and the
// current primary's, which must exist (a lost primary is failover's).
func switchoverPods(pods []corev1.Pod, current, target string) (targetPod, currentPod *corev1.Pod, err error) {
	for i := range pods {
		switch pods[i].Name {
		case target:
			targetPod = &pods[i]
		case current:
			currentPod = &pods[i]
		}
	}
	if targetPod == nil || !podReady(targetPod) {
		return nil, nil, fmt.Errorf("switchover to %s: the pod is missing or not ready", target)
	}
	if currentPod == nil {
		return nil, nil, fmt.Errorf("switchover to %s: current primary %s has no pod (failover handles a lost primary)", target, current)
	}
	return targetPod, currentPod, nil
}

// finishPromoted completes a switchover whose promotion an earlier
// reconcile made: the old primary stays fenced and the target is recorded.
func (r *DatabaseReconciler) finishPromoted(ctx context.Context, db *dbv1.Database, old engine.Instance, current, target string) error {
	if err := old.Fence(ctx); err != nil {
		return fmt.Errorf("switchover to %s: %s is promoted; fencing %s: %w", target, target, current, err)
	}
	if err := r.recordPrimary(ctx, db, target); err != nil {
		return fmt.Errorf("switchover to %s: recording it as the primary: %w", target, err)
	}
	log.FromContext(ctx).Info("switchover finished: promoted by an earlier attempt", "from", current, "to", target)
	r.event(db, corev1.EventTypeNormal, "SwitchoverCompleted", "Switchover", "%s is the primary (promoted by an earlier attempt); %s stays fenced", target, current)
	return nil
}

// repointAll points every ready instance, and the old primary, at the new
// primary.
func (r *DatabaseReconciler) repointAll(ctx context.Context, obs *observed, pods []corev1.Pod, primaryPod *corev1.Pod, old string, repl engine.Credentials) error {
	endpoint, err := obs.instances.endpoint(ctx, primaryPod)
	if err != nil {
		return err
	}
	var errs []error
	var insts []candidate
	for i := range pods {
		pod := &pods[i]
		if pod.Name == primaryPod.Name || !podReady(pod) && pod.Name != old {
			continue
		}
		inst, err := obs.instances.get(ctx, pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pod.Name, err))
			continue
		}
		insts = append(insts, candidate{pod: pod, inst: inst})
	}
	if _, err := repoint(ctx, insts, endpoint, repl); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("re-pointing instances at %s: %w", primaryPod.Name, errors.Join(errs...))
	}
	return nil
}

// switchPair is a switchover's two servers: the current primary's and
// the target's, with their pods.
type switchPair struct {
	old, next       engine.Instance
	oldPod, nextPod *corev1.Pod
}

// switchTo fences the current primary, waits for the target to apply all
// it wrote, hands it the primary Lease, records it as the primary and
// promotes it: named steps, each logged and reported in an Event
// (Switchover<Step>) once done. A failure before the hand-over abandons
// the switchover (the old primary unfenced); from the hand-over on it only
// rolls forward.
func (r *DatabaseReconciler) switchTo(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, p switchPair) error {
	old, next, current, target := p.old, p.next, p.oldPod.Name, p.nextPod.Name
	r.event(db, corev1.EventTypeNormal, "SwitchoverStarted", "Switchover", "Moving the primary from %s to %s", current, target)
	var final engine.Status
	failed := func(err error) error { return fmt.Errorf("switchover to %s: %w", target, err) }
	abandon := func(err error) error { return r.abandonSwitchover(ctx, db, old, err) }
	rollForward := func(err error) error { return r.failedPromotion(ctx, db, pods, p, err) }
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("from", current, "to", target))
	steps := []haStep{
		{"Fenced", func() (stepOutcome, error) {
			if err := old.Fence(ctx); err != nil {
				return stepOutcome{}, fmt.Errorf("fencing %s: %w", current, err)
			}
			return done(fmt.Sprintf("%s takes no more application writes", current)), nil
		}, failed},
		{"CaughtUp", func() (stepOutcome, error) {
			st, err := old.Status(ctx)
			if err != nil {
				return stepOutcome{}, fmt.Errorf("reading %s's final position: %w", current, err)
			}
			final = st
			if err := waitReached(ctx, next, final.Applied, switchoverCatchUp); err != nil {
				return stepOutcome{}, fmt.Errorf("%s did not apply %s's last position %s: %w", target, current, final.Applied, err)
			}
			return done(fmt.Sprintf("%s applied everything %s wrote, up to %s", target, current, final.Applied)), nil
		}, abandon},
		// The old primary is fenced: the Lease moves at once (unless it
		// names another incarnation of its pod, which this fence did not
		// reach: then the switchover waits for it to expire).
		{"LeaseHandedOver", func() (stepOutcome, error) {
			left, err := r.takeLease(ctx, db, pods, p.nextPod, p.oldPod)
			if err != nil {
				return stepOutcome{}, err
			}
			if left > 0 {
				return stepOutcome{}, fmt.Errorf("the primary Lease names another incarnation of %s, which may still take writes: it expires in %s", current, left.Round(time.Second))
			}
			return done(fmt.Sprintf("the primary Lease names %s", target)), nil
		}, abandon},
		{"Recorded", func() (stepOutcome, error) {
			if err := r.recordPrimary(ctx, db, target); err != nil {
				return stepOutcome{}, fmt.Errorf("recording it as the primary: %w", err)
			}
			return done(fmt.Sprintf("the topology names %s the primary", target)), nil
		}, rollForward},
		{"Promoted", func() (stepOutcome, error) {
			if err := next.Promote(ctx); err != nil {
				return stepOutcome{}, err
			}
			return done(fmt.Sprintf("%s takes writes", target)), nil
		}, rollForward},
	}
	completed, err := r.runSteps(ctx, db, obs, "Switchover", steps)
	if err != nil {
		return err
	}
	if !completed {
		// Never reached today (no step waits); if one ever does, the
		// target is not promoted: nothing may follow it yet.
		return fmt.Errorf("switchover to %s stopped before %s was promoted", target, target)
	}
	r.event(db, corev1.EventTypeNormal, "SwitchoverCompleted", "Switchover", "%s is the primary, at %s", target, final.Applied)
	return nil
}

// abandonSwitchover lets the old primary take writes again and reports why
// the switchover did not happen.
func (r *DatabaseReconciler) abandonSwitchover(ctx context.Context, db *dbv1.Database, old engine.Instance, cause error) error {
	if err := old.Unfence(ctx); err != nil {
		return fmt.Errorf("switchover abandoned (%w); unfencing the old primary failed too: %w", cause, err)
	}
	r.event(db, corev1.EventTypeWarning, "SwitchoverAbandoned", "Switchover", "%v; the current primary takes writes again", cause)
	return fmt.Errorf("switchover abandoned: %w", cause)
}

// failedPromotion decides what a Promote that returned an error leaves: a
// promotion may have gone through all the same (pg_promote that timed out
// or was cancelled while the server went on promoting). Only a target that
// was never asked to promote (engine.ErrPromotionNotStarted) and answers
// as a read-only replica was surely not promoted: then the topology names
// the old primary again and it is unfenced. Otherwise the old primary
// stays fenced and the topology keeps the target: the next reconcile rolls
// forward (Promote of a promoted server does nothing), never back to two
// writable servers.
func (r *DatabaseReconciler) failedPromotion(ctx context.Context, db *dbv1.Database, pods []corev1.Pod, p switchPair, cause error) error {
	old, next, current, target := p.old, p.next, p.oldPod.Name, p.nextPod.Name
	cause = fmt.Errorf("promoting %s: %w", target, cause)
	st, err := next.Status(ctx)
	if err == nil && st.Role == engine.RoleReplica && st.ReadOnly && errors.Is(cause, engine.ErrPromotionNotStarted) {
		// The Lease goes back first: the old primary takes writes again
		// only as its holder. The target, its holder now, answers as a
		// read-only replica: the Lease moves at once.
		if _, err := r.takeLease(ctx, db, pods, p.oldPod, p.nextPod); err != nil {
			return fmt.Errorf("switchover: %w; handing the primary Lease back to %s failed too, so it stays fenced: %w", cause, current, err)
		}
		if err := r.recordPrimary(ctx, db, current); err != nil {
			return fmt.Errorf("switchover: %w; naming %s the primary again failed too, so it stays fenced: %w", cause, current, err)
		}
		return r.abandonSwitchover(ctx, db, old, cause)
	}
	state := "does not answer"
	if err == nil {
		state = fmt.Sprintf("answers as %s (read-only %t)", st.Role, st.ReadOnly)
	}
	log.FromContext(ctx).Error(cause, "promotion failed and may have happened: the old primary stays fenced", "target", target, "old", current)
	r.event(db, corev1.EventTypeWarning, "SwitchoverIncomplete", "Switchover",
		"%v; %s %s, so it may be promoted: %s stays fenced and the switchover is retried (never undone)", cause, target, state, current)
	return fmt.Errorf("switchover incomplete: %w", cause)
}

// waitReached waits up to within until inst has applied pos.
func waitReached(ctx context.Context, inst engine.Instance, pos engine.Position, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		st, err := inst.Status(ctx)
		if err != nil {
			return err
		}
		c, err := inst.Compare(st.Applied, pos)
		if err != nil {
			return err
		}
		if c >= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("at %s: %w", st.Applied, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
