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

// replicaCheckInterval is how often the replicas of a Database are looked
// at when nothing else brings a reconcile.
const replicaCheckInterval = 30 * time.Second

// reconcileRejoin brings every other running instance under the current
// primary. A former primary that came back writable is fenced at once (two
// primaries never take writes); then PostgreSQL is restarted so its start
// script rewinds it (pg_rewind) into a standby, and MySQL/MariaDB follows
// the primary when it holds nothing the primary lacks, or is rebuilt from
// the primary (its old data set aside, an Event naming both positions) when
// it holds errant transactions. A replica streaming from anything but the
// primary is re-pointed, and one that can never catch up with it (its
// source purged what it needs) is rebuilt.
func (r *DatabaseReconciler) reconcileRejoin(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if r.Instances == nil || db.Spec.Replicas < 2 || db.Status.CurrentPrimary == "" {
		return nil
	}
	// A replica can break with nothing in the cluster changing (its
	// source purged what it needs): look again even when no event comes.
	obs.requeueWithin(replicaCheckInterval)
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	primaryPod, prim, _, err := writablePrimary(ctx, db, obs, pods)
	switch {
	case errors.Is(err, errPrimaryNotReady):
		return nil // nothing to follow yet: failover's concern
	case err != nil:
		log.FromContext(ctx).Info("not rejoining the other instances: the recorded primary is not seen writable", "primary", primaryName(db, obs), "reason", err.Error())
		return nil
	}
	name := primaryPod.Name
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return err
	}
	target, err := obs.instances.endpoint(ctx, primaryPod)
	if err != nil {
		return nil // the primary cannot be reached (no address yet): nothing to follow
	}
	p := &rejoin{r: r, db: db, obs: obs, repl: repl, primaryPod: primaryPod, primaryEP: target}
	var errs []error
	if usesSlots(db) {
		if err := r.keepSlots(ctx, db, obs, prim, name, pods); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range pods {
		pod := &pods[i]
		if pod.Name == name || !pod.DeletionTimestamp.IsZero() || !podStarted(pod) {
			continue
		}
		if err := p.instance(ctx, pod); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pod.Name, err))
		}
	}
	return errors.Join(errs...)
}

// rejoin holds what one Rejoin phase learns about the primary.
type rejoin struct {
	r          *DatabaseReconciler
	db         *dbv1.Database
	obs        *observed
	repl       engine.Credentials
	primaryPod *corev1.Pod
	primaryEP  engine.Endpoint
}

func (p *rejoin) instance(ctx context.Context, pod *corev1.Pod) error {
	inst, err := p.obs.instances.get(ctx, pod)
	if err != nil {
		return nil // unreachable: nothing to decide about it now
	}
	st, err := inst.Status(ctx)
	if err != nil {
		return nil
	}
	if st.Role == engine.RolePrimary {
		return p.formerPrimary(ctx, pod, inst, st)
	}
	if engine.ProfileOf(p.db.Spec.Engine).RejoinByRestart {
		if p.divergedStandby(ctx, pod, st) {
			return nil
		}
	}
	// A standby whose receiver is down reports no source; re-pointing it
	// is harmless when it was right, and heals it when it was not.
	why := fmt.Sprintf("%s replicated from %q", pod.Name, st.Source)
	if p.primaryEP.Is(st.Source) {
		if st.SourceLost != "" {
			p.rebuild(pod, "Rebuild", "ReplicaCannotCatchUp", fmt.Sprintf("%s can never catch up with %s, which no longer holds what it needs next (%s)",
				pod.Name, p.primaryPod.Name, st.SourceLost))
			return nil
		}
		if st.Streaming || podReady(pod) {
			return nil
		}
		// Unready: its agent saw it not replicate for longer than a
		// reconnect takes (replication stopped by hand, a broken stream).
		why = fmt.Sprintf("%s was not replicating from %s", pod.Name, p.primaryPod.Name)
	}
	if err := inst.Follow(ctx, p.primaryEP, p.repl); err != nil {
		return fmt.Errorf("re-pointing at %s: %w", p.primaryPod.Name, err)
	}
	p.r.event(p.db, corev1.EventTypeNormal, "ReplicaRepointed", "Rejoin", "%s; it now follows %s", why, p.primaryPod.Name)
	return nil
}

func (p *rejoin) formerPrimary(ctx context.Context, pod *corev1.Pod, inst engine.Instance, st engine.Status) error {
	primary := p.primaryPod.Name
	if !st.ReadOnly {
		if err := inst.Fence(ctx); err != nil {
			return fmt.Errorf("fencing a second primary: %w", err)
		}
		p.r.event(p.db, corev1.EventTypeWarning, "FormerPrimaryFenced", "Fence",
			"%s runs as a writable primary while %s is the primary: fenced it (read-only)", pod.Name, primary)
	}
	prim, err := p.obs.instances.get(ctx, p.primaryPod)
	if err != nil {
		return fmt.Errorf("reaching primary %s: %w", primary, err)
	}
	if engine.ProfileOf(p.db.Spec.Engine).RejoinByRestart {
		p.reportDiverged(ctx, pod, prim, st)
		// It starts fenced until asked: the request goes into the topology
		// before the restart, so the restarted pod reads it.
		p.obs.requestRewind(pod.Name, p.r.now().UTC().Format("20060102T150405Z"))
		p.obs.restartPod(pod, "rewind it onto "+primary+" (pg_rewind) and start it as a standby")
		return nil
	}
	pst, err := prim.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading primary %s: %w", primary, err)
	}
	cmp, err := inst.Compare(st.Applied, pst.Applied)
	if err != nil && !errors.Is(err, engine.ErrDiverged) {
		// Positions that cannot be read are no evidence of divergence:
		// never rebuild (which sets the data aside) on a parse error.
		return fmt.Errorf("comparing %s (%s) with primary %s (%s): %w", pod.Name, st.Applied, primary, pst.Applied, err)
	}
	if err == nil && cmp <= 0 {
		if err := inst.Follow(ctx, p.primaryEP, p.repl); err != nil {
			return fmt.Errorf("re-pointing at %s: %w", primary, err)
		}
		p.r.event(p.db, corev1.EventTypeNormal, "FormerPrimaryRejoined", "Rejoin",
			"%s holds nothing %s lacks (%s within %s); it now replicates from %s", pod.Name, primary, st.Applied, pst.Applied, primary)
		return nil
	}
	// Errant transactions: re-attaching would fail or, worse, silently
	// skip them. Rebuild from the primary; the start script keeps the old
	// data aside on the volume for whoever wants to recover those writes.
	p.rebuild(pod, "Rebuild", "InstanceDiverged", fmt.Sprintf("%s holds transactions primary %s lacks (%s against %s)", pod.Name, primary, st.Applied, pst.Applied))
	return nil
}

// rebuild asks for pod to be rebuilt from the primary (the start script
// sets its data aside on the volume, never deletes it, and clones) and
// says why in a Warning Event.
func (p *rejoin) rebuild(pod *corev1.Pod, action, reason, why string) {
	primary := p.primaryPod.Name
	token := p.r.now().UTC().Format("20060102T150405Z")
	p.obs.requestRebuild(pod.Name, token)
	p.r.event(p.db, corev1.EventTypeWarning, reason, action,
		"%s: rebuilding it from %s (request %s); its old data is kept aside on its volume", why, primary, token)
	p.obs.restartPod(pod, "rebuild it from "+primary)
}

// divergedStandby rewinds a PostgreSQL standby whose recovery went past
// the point where the primary's timeline left its own: it received WAL
// from a former primary that the new one never had (a record written
// after the switchover's catch-up, streamed before the standby was
// re-pointed). Such a standby can never follow: its server waits forever
// for a timeline it cannot take. The rewind (pg_rewind, its start script
// keeping that WAL aside) makes it a standby of the primary again.
func (p *rejoin) divergedStandby(ctx context.Context, pod *corev1.Pod, st engine.Status) bool {
	if st.ReplayTimeline == 0 {
		return false // unknown: no evidence of divergence
	}
	prim, err := p.obs.instances.get(ctx, p.primaryPod)
	if err != nil {
		return false // the primary cannot be reached: nothing to judge by
	}
	fork, forked, err := prim.ForkPoint(ctx, st.ReplayTimeline)
	if err != nil || !forked {
		// Its own timeline, or one the primary's history does not name:
		// no evidence of divergence, and never a rewind on a guess.
		return false
	}
	reached := st.Applied.LSN
	if reached <= fork.LSN {
		return false // behind the fork point: it follows the new timeline
	}
	primary := p.primaryPod.Name
	log.FromContext(ctx).Info("standby holds diverged WAL", "pod", pod.Name, "from", fork.String(), "to", engine.Position{Timeline: fork.Timeline, LSN: reached}.String())
	p.r.event(p.db, corev1.EventTypeWarning, "DivergedWritesSetAside", "Rewind",
		"%s received WAL %s to %s on timeline %d that %s never had (its timeline left timeline %d at %s): it cannot follow %s; "+
			"the rewind discards that WAL from its data directory and its start script keeps it aside on the volume (diverged-wal-<time>)",
		pod.Name, fork.LSN, reached, fork.Timeline, primary, fork.Timeline, fork.LSN, primary)
	p.obs.requestRewind(pod.Name, p.r.now().UTC().Format("20060102T150405Z"))
	p.obs.restartPod(pod, "rewind it onto "+primary+" (pg_rewind): it holds WAL past where "+primary+"'s timeline forked")
	return true
}

// reportDiverged says, before a former PostgreSQL primary is rewound, which
// of its WAL the new primary never received: pg_rewind discards it from
// the data directory (the start script keeps a copy aside on the volume).
// Nothing is said when it holds nothing past the fork point.
func (p *rejoin) reportDiverged(ctx context.Context, pod *corev1.Pod, prim engine.Instance, st engine.Status) {
	fork, forked, err := prim.ForkPoint(ctx, st.Applied.Timeline)
	switch {
	case err != nil:
		p.r.event(p.db, corev1.EventTypeWarning, "DivergedWritesSetAside", "Rewind",
			"%s is at %s; where its timeline forked from %s's is unknown (%v): any WAL past that point is discarded by the rewind and kept aside on its volume (diverged-wal-<time>)",
			pod.Name, st.Applied, p.primaryPod.Name, err)
	case forked && st.Applied.LSN > fork.LSN:
		log.FromContext(ctx).Info("former primary holds diverged WAL", "pod", pod.Name, "from", fork.String(), "to", st.Applied.String())
		p.r.event(p.db, corev1.EventTypeWarning, "DivergedWritesSetAside", "Rewind",
			"%s wrote WAL %s to %s on timeline %d that %s never received (promoted at %s): the rewind discards those writes from its data directory; its start script keeps them aside on the volume (diverged-wal-<time>: that WAL, readable with pg_waldump, and a copy of the data directory as it was, pgdata/, when the volume has room: start a server on it to read them)",
			pod.Name, fork.LSN, st.Applied.LSN, st.Applied.Timeline, p.primaryPod.Name, fork.LSN)
	}
}
