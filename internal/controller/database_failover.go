package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

func failoverDelay(db *dbv1.Database) time.Duration {
	if d := db.Spec.Failover.DelaySeconds; d != nil {
		return time.Duration(*d) * time.Second
	}
	return 10 * time.Second
}

func (r *DatabaseReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// reconcileFailover replaces a failed primary. The primary has failed when
// its pod is missing or not Ready and its server does not answer as a
// writable primary, for longer than spec.failover.delaySeconds. Then the
// reachable replica with the furthest replication position is promoted
// (the old primary fenced first if it can be reached), the role labels move
// with status.currentPrimary, and the other replicas follow the new primary.
func (r *DatabaseReconciler) reconcileFailover(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if r.Instances == nil || db.Spec.Replicas < 2 || (db.Spec.Failover.Enabled != nil && !*db.Spec.Failover.Enabled) || obs.promoted != "" {
		return nil // obs.promoted: the primary record was repaired this reconcile
	}
	// Only a Database that has had a serving primary can lose it.
	if db.Status.CurrentPrimary == "" {
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	primary := db.Status.CurrentPrimary
	var primaryPod *corev1.Pod
	for i := range pods {
		if pods[i].Name == primary {
			primaryPod = &pods[i]
		}
	}
	if primaryPod != nil && primaryPod.DeletionTimestamp.IsZero() && podReady(primaryPod) {
		// Healthy: obs.primaryUnhealthySince stays nil, clearing any record.
		if db.Spec.Failover.MaxLag != nil {
			r.samplePrimary(ctx, db, primaryPod, obs)
		}
		return nil
	}
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return err
	}
	if primaryPod != nil {
		if inst, err := obs.instances.get(ctx, primaryPod); err == nil {
			st, err := inst.Status(ctx)
			if err == nil && st.Writable() {
				return nil // the pod is unready but the server still serves writes
			}
		}
	}

	now := r.now()
	since := db.Status.PrimaryUnhealthySince
	if since == nil {
		since = &metav1.Time{Time: now}
		r.event(db, corev1.EventTypeWarning, "PrimaryUnhealthy", "Failover",
			"Primary %s is not ready and does not answer; failover in %s unless it recovers", primary, failoverDelay(db))
	}
	obs.primaryUnhealthySince = since
	if wait := failoverDelay(db) - now.Sub(since.Time); wait > 0 {
		obs.requeueWithin(wait)
		return nil
	}
	return r.failover(ctx, db, obs, pods, primaryPod, repl)
}

type candidate struct {
	pod    *corev1.Pod
	inst   engine.Instance
	status engine.Status
}

func (r *DatabaseReconciler) failover(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, primaryPod *corev1.Pod, repl engine.Credentials) error {
	logger := log.FromContext(ctx)
	primary := db.Status.CurrentPrimary
	var cands []candidate
	var unreachable []string
	// Sort a copy: primaryPod points into the caller's slice.
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		pod := &pods[i]
		if pod.Name == primary || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		inst, err := obs.instances.get(ctx, pod)
		if err != nil {
			unreachable = append(unreachable, pod.Name)
			continue
		}
		st, err := inst.Status(ctx)
		if err != nil {
			unreachable = append(unreachable, pod.Name)
			continue
		}
		cands = append(cands, candidate{pod: pod, inst: inst, status: st})
	}
	// A replica already promoted (by an earlier reconcile whose status write
	// was lost) is the primary: never promote a second one.
	for _, c := range cands {
		if c.status.Writable() {
			obs.promoted = c.pod.Name
			logger.Info("a replica already serves as primary; adopting it", "pod", c.pod.Name)
			return nil
		}
	}
	if need, seen := synchronousQuorum(db, pods, cands); seen < need {
		r.event(db, corev1.EventTypeWarning, "SynchronousStandbysUnreachable", "Failover",
			"Primary %s failed; not promoting: synchronous replication acknowledged each write once %d replica(s) held it, so only the furthest of %d replicas is sure to hold every acknowledged write, and %d answer (unreachable: %v)",
			primary, db.Spec.SynchronousReplicas(), need, seen, unreachable)
		obs.requeueWithin(primarySampleInterval)
		return fmt.Errorf("primary %s failed and only %d of the %d replicas synchronous replication needs answer, so a promotion could lose acknowledged writes (unreachable: %v)",
			primary, seen, need, unreachable)
	}
	var bound *lagBound
	if db.Spec.Failover.MaxLag != nil {
		last, ok := r.lastPrimaryPosition(ctx, db)
		if !ok {
			r.event(db, corev1.EventTypeWarning, "LagBoundUnchecked", "Failover",
				"spec.failover.maxLag cannot be checked: the operator has seen no position of primary %s since it started", primary)
		} else {
			bound = &lagBound{primary: last, max: *db.Spec.Failover.MaxLag}
		}
	}
	best, why, err := chooseCandidate(cands, bound)
	if err != nil {
		if bound != nil {
			obs.requeueWithin(primarySampleInterval)
		}
		return fmt.Errorf("primary %s failed and %w (unreachable: %v)", primary, err, unreachable)
	}

	fenced := false
	if primaryPod != nil {
		// Fence what may still run of the old primary, so it takes no write
		// once another is promoted. Unreachable is the usual case.
		if inst, err := obs.instances.get(ctx, primaryPod); err == nil {
			if err := inst.Fence(ctx); err != nil {
				return fmt.Errorf("fencing old primary %s before promotion: %w", primary, err)
			}
			fenced = true
			r.catchUpWithFenced(ctx, db, inst, best, primary)
		}
	}
	// An old primary that could not be fenced may still take writes until
	// its agent, unable to renew the Lease, stops it: the Lease moves only
	// once it has expired.
	left, err := r.takeLease(ctx, db, best.pod.Name, fenced)
	if err != nil {
		return err
	}
	if left > 0 {
		logger.Info("waiting for the primary Lease of the unreachable primary to expire before promoting", "primary", primary, "candidate", best.pod.Name, "left", left)
		obs.requeueWithin(left)
		return nil
	}
	hold, err := r.failsafeHold(ctx, obs, best.pod, repl)
	if err != nil {
		return err
	}
	if hold > 0 {
		logger.Info("waiting: the candidate confirmed the old primary to its agent while the API server was away", "primary", primary, "candidate", best.pod.Name, "left", hold)
		obs.requeueWithin(hold)
		return nil
	}
	r.event(db, corev1.EventTypeWarning, "FailoverStarted", "Failover", "Primary %s failed; promoting %s: %s", primary, best.pod.Name, why)
	record := &dbv1.FailoverRecord{
		Time: metav1.Time{Time: r.now()}, From: primary, To: best.pod.Name,
		Reason: fmt.Sprintf("primary not ready and unreachable for %s; %s", failoverDelay(db), why),
	}
	if err := r.recordFailover(ctx, db, record); err != nil {
		return fmt.Errorf("recording %s as the primary before promoting it: %w", best.pod.Name, err)
	}
	if err := best.inst.Promote(ctx); err != nil {
		return fmt.Errorf("promoting %s: %w", best.pod.Name, err)
	}
	obs.promoted = best.pod.Name
	obs.primaryUnhealthySince = nil
	obs.failover = record

	// The replicas about to follow stream through their slots, and the old
	// primary's keeps the WAL its rewind will need.
	if err := r.keepSlots(ctx, db, obs, best.inst, best.pod.Name, pods); err != nil {
		logger.Error(err, "replication slots on the new primary; the Rejoin phase tries again", "primary", best.pod.Name)
	}
	newPrimary, err := obs.instances.endpoint(ctx, best.pod)
	if err != nil {
		return err
	}
	var followErrs []error
	for _, c := range cands {
		if c.pod.Name == best.pod.Name {
			continue
		}
		if err := c.inst.Follow(ctx, newPrimary, repl); err != nil {
			followErrs = append(followErrs, fmt.Errorf("%s: %w", c.pod.Name, err))
		}
	}
	r.event(db, corev1.EventTypeNormal, "FailoverCompleted", "Failover", "%s is the primary; %d replicas re-pointed", best.pod.Name, len(cands)-1-len(followErrs))
	if len(followErrs) > 0 {
		// The new primary serves; the replicas that could not follow are
		// retried on the next reconcile through the error.
		return fmt.Errorf("re-pointing replicas at %s: %w", best.pod.Name, errors.Join(followErrs...))
	}
	return nil
}

// failoverCatchUp bounds how long a failover waits for the candidate to
// apply what a fenced, reachable old primary wrote.
const failoverCatchUp = 30 * time.Second

// catchUpWithFenced waits, when the old primary answers (fenced now, but
// not ready: its agent lost the Lease, say), until the candidate has
// applied everything it wrote, so the promotion loses none of its
// acknowledged writes when a safer choice than promoting at once exists.
// A candidate that cannot catch up within failoverCatchUp is promoted all
// the same, with an Event saying what it lacks: those writes are set aside
// when the old primary rejoins, with their range in an Event.
func (r *DatabaseReconciler) catchUpWithFenced(ctx context.Context, db *dbv1.Database, old engine.Instance, best candidate, primary string) {
	logger := log.FromContext(ctx).WithValues("old", primary, "candidate", best.pod.Name)
	st, err := old.Status(ctx)
	if err != nil {
		logger.Error(err, "reading the fenced old primary's last position; promoting without waiting")
		return
	}
	if err := waitReached(ctx, best.inst, st.Applied, failoverCatchUp); err != nil {
		r.event(db, corev1.EventTypeWarning, "FailoverCatchUpIncomplete", "Failover",
			"%s did not apply everything fenced %s wrote (up to %s) within %s: %v; promoting it, the rest is set aside when %s rejoins",
			best.pod.Name, primary, st.Applied, failoverCatchUp, err, primary)
		return
	}
	logger.Info("the candidate applied everything the fenced old primary wrote", "position", st.Applied)
}

// synchronousQuorum is how many replicas' positions a failover must see
// (need) and how many it sees. With synchronous replication every
// acknowledged commit is on at least k of the n replicas, so the furthest
// of any n-k+1 of them holds it; with fewer, the one promoted might lack
// acknowledged writes. n counts every replica that exists or should: one
// that is missing may be one that acknowledged. Asynchronous: need 0.
func synchronousQuorum(db *dbv1.Database, pods []corev1.Pod, cands []candidate) (need, seen int) {
	k := int(db.Spec.SynchronousReplicas())
	if k == 0 {
		return 0, 0
	}
	n := max(int(db.Spec.Replicas), len(pods)) - 1
	for _, c := range cands {
		if c.status.Role == engine.RoleReplica {
			seen++
		}
	}
	return max(n-k+1, 1), seen
}

// lagBound is spec.failover.maxLag against the primary's last seen position.
type lagBound struct {
	primary engine.Position
	max     int64
}

// chooseCandidate picks the replica with the furthest replication position
// and says why, naming the replicas it passed over and their positions.
// With a bound, a replica lagging the primary's last seen position by more
// is never chosen.
func chooseCandidate(cands []candidate, bound *lagBound) (candidate, string, error) {
	var best *candidate
	var beyond, unordered []string
	for i := range cands {
		c := &cands[i]
		if c.status.Role != engine.RoleReplica {
			continue
		}
		if bound != nil {
			lag, err := c.inst.Lag(c.status.Received, bound.primary)
			if err != nil || lag > bound.max {
				beyond = append(beyond, fmt.Sprintf("%s lags %d (%v)", c.pod.Name, lag, err))
				continue
			}
		}
		if best == nil {
			best = c
			continue
		}
		// Promotion applies everything a replica has received before it
		// takes writes, so what it received is what it will hold; on a tie,
		// the one that already applied more is ready sooner.
		cmp, err := c.inst.Compare(c.status.Received, best.status.Received)
		if err != nil {
			// Diverged replicas cannot be ordered: each holds writes the
			// other lacks, so either choice sets some aside. Keep the one
			// chosen so far (the lower ordinal), and say so.
			unordered = append(unordered, fmt.Sprintf("%s and %s (%v)", best.pod.Name, c.pod.Name, err))
			continue
		}
		if cmp > 0 || (cmp == 0 && compareOrTie(c.inst, c.status.Applied, best.status.Applied) > 0) {
			best = c
		}
	}
	if best == nil {
		if len(beyond) > 0 {
			return candidate{}, "", fmt.Errorf("every reachable replica lags the primary's last seen position %s beyond spec.failover.maxLag %d: %s",
				bound.primary, bound.max, strings.Join(beyond, ", "))
		}
		return candidate{}, "", errors.New("no reachable replica can be promoted")
	}
	var others []string
	for _, c := range cands {
		if c.pod.Name != best.pod.Name {
			others = append(others, fmt.Sprintf("%s at %s", c.pod.Name, c.status.Received))
		}
	}
	why := fmt.Sprintf("%s has the furthest position %s", best.pod.Name, best.status.Received)
	if len(others) > 0 {
		why += "; passed over " + strings.Join(others, ", ")
	}
	if len(beyond) > 0 {
		why += fmt.Sprintf("; beyond maxLag %d of %s: %s", bound.max, bound.primary, strings.Join(beyond, ", "))
	}
	if len(unordered) > 0 {
		why += "; diverged, so the writes only the others hold will be set aside when they rejoin: " + strings.Join(unordered, ", ")
	}
	return *best, why, nil
}

// compareOrTie orders two applied positions for a tie-break only: positions
// that cannot be ordered count as equal (the received positions, which
// decide, were already ordered).
func compareOrTie(inst engine.Instance, a, b engine.Position) int {
	c, err := inst.Compare(a, b)
	if err != nil {
		return 0
	}
	return c
}
