package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
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
	// Only a Database that has had a serving primary can lose it;
	// obs.promoted: the primary record was repaired this reconcile.
	if r.Instances == nil || db.Status.CurrentPrimary == "" || obs.promoted != "" {
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	lease, err := r.primaryLease(ctx, db)
	if err != nil {
		return err
	}
	switch holder := holderOf(lease); {
	case lease != nil && holder != "" && holder != db.Status.CurrentPrimary:
		return r.resumeInterrupted(ctx, db, obs, pods, holder)
	case lease != nil && holder == "":
		return r.handedOver(ctx, db, obs, pods, lease)
	case !failoverEnabled(db):
		return nil
	}
	return r.failoverIfFailed(ctx, db, obs, pods, lease)
}

// failoverIfFailed fails over from a primary whose pod is missing or not
// ready and whose server does not answer as a writable primary, once
// spec.failover.delaySeconds has passed.
func (r *DatabaseReconciler) failoverIfFailed(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, lease *coordinationv1.Lease) error {
	primary := db.Status.CurrentPrimary
	primaryPod := podNamed(pods, primary)
	if primaryPod != nil && primaryPod.DeletionTimestamp.IsZero() && podReady(primaryPod) {
		// Healthy: obs.primaryUnhealthySince stays nil, clearing any record.
		r.unfenceLeftFenced(ctx, db, obs, primaryPod, lease)
		if db.Spec.Failover.MaxLag != nil {
			r.samplePrimary(ctx, db, primaryPod, obs)
		}
		return nil
	}
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return err
	}
	if stillWritable(ctx, obs, primaryPod) {
		return nil // the pod is unready but the server still serves writes
	}
	now := r.now()
	if r.handoverUnderWay(primaryPod, lease, pods, now) {
		// Its agent fences the server, waits for a replica, stops it and
		// releases the Lease (handedOver promotes at once), or keeps it
		// and these rules apply once it expired: a failover now would
		// only race it.
		log.FromContext(ctx).V(1).Info("the primary's pod is stopping and its agent still renews the Lease: waiting for its handover", "primary", primary)
		obs.requeueWithin(time.Second)
		return nil
	}
	if wait, forRestart, ok := r.primaryRestarting(primary, primaryPod, lease, pods, now); ok {
		// Its agent takes the Lease (once the earlier incarnation's ran
		// out) and starts the server on the same volume: nothing
		// acknowledged is lost, where a replica may lack the last writes.
		switch {
		case forRestart && r.restarts.first(types.UID(lease.Annotations[handedForRestartAnnotation])):
			r.event(db, corev1.EventTypeNormal, "PrimaryRestarting", "Failover",
				"Primary %s is restarting (the operator restarted it to start it as the primary) and takes the primary Lease handed to it: no replica is promoted in its place unless it has not within %s",
				primary, wait.Round(time.Second))
		case !forRestart && r.restarts.first(primaryPod.UID):
			r.event(db, corev1.EventTypeNormal, "PrimaryRestarting", "Failover",
				"Primary %s came back as a new pod on its volume; it takes the primary Lease once its earlier incarnation's has run out: no replica is promoted in its place unless it has not within %s",
				primary, wait.Round(time.Second))
		}
		obs.requeueWithin(min(wait, 2*time.Second))
		return nil
	}
	since := db.Status.PrimaryUnhealthySince
	if since == nil {
		since = &metav1.Time{Time: now}
		r.event(db, corev1.EventTypeWarning, "PrimaryUnhealthy", "Failover",
			"Primary %s is not ready and does not answer; failover in %s unless it recovers", primary, failoverDelay(db))
		if h, ok := agent.ParseHandover(lease); ok && h.From == primary && !h.Released {
			r.event(db, corev1.EventTypeWarning, "PlannedHandoverIncomplete", "Failover",
				"Primary %s is stopping and stopped fenced at %s, but did not hand its role over (%s): the failover rules apply once its Lease has expired",
				primary, h.Position, h.Reason)
		}
	}
	obs.primaryUnhealthySince = since
	if wait := failoverDelay(db) - now.Sub(since.Time); wait > 0 {
		obs.requeueWithin(wait)
		return nil
	}
	return r.failover(ctx, db, obs, pods, primaryPod, repl, failoverPlan{})
}

// handoverUnderWay: the primary's pod is being deleted, within its grace
// period, and the Lease names it and was renewed within its duration (as
// the operator saw it): its agent is at its planned handover.
func (r *DatabaseReconciler) handoverUnderWay(pod *corev1.Pod, lease *coordinationv1.Lease, pods []corev1.Pod, now time.Time) bool {
	if pod == nil || pod.DeletionTimestamp.IsZero() || now.After(pod.DeletionTimestamp.Time) ||
		lease == nil || holderOf(lease) != pod.Name || (holderUID(lease) != "" && holderUID(lease) != pod.UID) {
		return false
	}
	return time.Since(r.leases.firstSeen(lease, time.Now())) < r.longestLeaseDuration(lease, pods)
}

// restartAllowance is how long a primary's new pod may take, past the
// earlier incarnation's Lease and its agent's wait for the members'
// confirmations, to take the Lease and start its server before a replica
// is promoted in its place.
const restartAllowance = 30 * time.Second

// primaryRestarting: the primary's pod was made again (deleted, even
// forcibly) and runs, while the Lease still names its earlier incarnation;
// or the operator handed the Lease to the primary by name alone
// (takeLeaseForRestart: whichever incarnation runs next) and restarted it,
// to start it as the primary chosen among kept volumes or again after an
// interrupted failover was undone, and its pod is stopping, missing for a
// moment or starting, or its next incarnation took the Lease and starts
// the server. The new incarnation's agent takes the Lease (once an earlier
// one's has run out: see the agent's incarnation rules) and starts the
// server on the same volume, which holds every write the earlier one
// acknowledged: a failover would race it and promote a replica that may
// lack some (the replicas of a primary chosen among kept volumes lack all
// it holds beyond them). It says how long it waits still, twice the
// Lease's longest duration with its margin plus restartAllowance after the
// operator handed the Lease over for the restart, or first saw this Lease
// version, and whether the Lease was handed over for a restart.
func (r *DatabaseReconciler) primaryRestarting(primary string, pod *corev1.Pod, lease *coordinationv1.Lease, pods []corev1.Pod, now time.Time) (time.Duration, bool, bool) {
	if lease == nil || holderOf(lease) != primary {
		return 0, false, false
	}
	d := r.longestLeaseDuration(lease, pods)
	budget := 2*(d+agent.Margin(d)) + restartAllowance
	// Handed over for the operator's restart: until the next incarnation's
	// agent took the Lease, and while it starts the server (named by it).
	if at, ok := handedForRestartAt(lease); ok && (holderUID(lease) == "" || (pod != nil && holderUID(lease) == pod.UID)) {
		left := at.Add(budget).Sub(now)
		return left, true, left > 0
	}
	if pod == nil || !pod.DeletionTimestamp.IsZero() || !podStarted(pod) || holderUID(lease) == "" || holderUID(lease) == pod.UID {
		return 0, false, false
	}
	left := r.leases.firstSeen(lease, now).Add(budget).Sub(now)
	return left, false, left > 0
}

// restartLog remembers the primary pods (by UID) reported as restarting:
// the reconciles that wait for one must not repeat its Event. A nil log
// reports every time.
type restartLog struct {
	mu   sync.Mutex
	seen map[types.UID]bool
}

// first says whether uid is reported for the first time.
func (l *restartLog) first(uid types.UID) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[types.UID]bool{}
	}
	seen := l.seen[uid]
	l.seen[uid] = true
	return !seen
}

// unfenceLeftFenced lets a healthy primary that holds the Lease take
// writes again when it was left fenced: a failover fenced it, then could
// not take the Lease at once (it named another incarnation of the pod, or
// had to expire) and the primary recovered before it did. Without this the
// Database would stay without a writable primary.
func (r *DatabaseReconciler) unfenceLeftFenced(ctx context.Context, db *dbv1.Database, obs *observed, pod *corev1.Pod, lease *coordinationv1.Lease) {
	if lease == nil || holderOf(lease) != pod.Name || (holderUID(lease) != "" && holderUID(lease) != pod.UID) {
		return
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		return
	}
	st, err := inst.Status(ctx)
	if err != nil || st.Role != engine.RolePrimary || !st.ReadOnly {
		return
	}
	if err := inst.Unfence(ctx); err != nil {
		log.FromContext(ctx).Error(err, "unfencing the primary a failover left fenced", "primary", pod.Name)
		return
	}
	log.FromContext(ctx).Info("unfenced the primary a failover left fenced", "primary", pod.Name)
	r.event(db, corev1.EventTypeWarning, "PrimaryUnfenced", "Failover",
		"%s holds the primary Lease and serves, but was left fenced (a failover fenced it and did not complete): it takes writes again", pod.Name)
}

// handedOver acts on a Lease a stopping primary's agent released (no
// holder): its server was fenced and stopped, and a replica had all it
// wrote. That replica (or any that holds the position) is promoted at
// once, by the failover's steps with no delay. With failover off, or when
// no replica holding the position answers within handoverWait of the
// release, the role goes back to the old primary instead (its pod's next
// incarnation starts it as the primary): never a replica that lacks its
// writes while it still has them, never a Database left without anyone
// allowed to take writes.
func (r *DatabaseReconciler) handedOver(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, lease *coordinationv1.Lease) error {
	primary := db.Status.CurrentPrimary
	if !failoverEnabled(db) {
		return r.giveBack(ctx, db, obs, pods, "failover is off, so no replica takes over")
	}
	h, _ := agent.ParseHandover(lease)
	primaryPod := podNamed(pods, primary)
	if stillWritable(ctx, obs, primaryPod) {
		return nil // released, yet writable: nothing is promoted beside it
	}
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return err
	}
	r.event(db, corev1.EventTypeNormal, "PlannedHandover", "Failover",
		"Primary %s is stopping and handed its role over: fenced at %s, which %s received; promoting a replica at once", primary, h.Position, h.Replica)
	return r.failover(ctx, db, obs, pods, primaryPod, repl, failoverPlan{handover: &h, handoverSeen: r.leases.firstSeen(lease, time.Now())})
}

// giveBack hands a released Lease back to the primary that released it:
// its pod's next incarnation (its agent waits for the Lease) starts it as
// the primary again, with every write it took.
func (r *DatabaseReconciler) giveBack(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, why string) error {
	primary := db.Status.CurrentPrimary
	pod := podNamed(pods, primary)
	if pod == nil || !pod.DeletionTimestamp.IsZero() {
		obs.requeueWithin(rolloutWait) // its next incarnation comes
		return nil
	}
	if _, err := r.takeLease(ctx, db, pods, pod, nil); err != nil {
		return fmt.Errorf("giving the primary Lease back to %s: %w", primary, err)
	}
	r.event(db, corev1.EventTypeWarning, "PlannedHandoverReverted", "Failover", "%s takes the primary role back: %s", primary, why)
	return nil
}

// primaryLease is the Database's primary Lease from the cache (nil when
// there is none yet).
func (r *DatabaseReconciler) primaryLease(ctx context.Context, db *dbv1.Database) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the primary Lease: %w", err)
	}
	return l, nil
}

// failoverPlan is what a failover knows before its survey: the stopping
// primary's handover record (promote at once a replica that received its
// last position), or the candidate an interrupted procedure had chosen.
type failoverPlan struct {
	handover *agent.Handover
	// handoverSeen is when the operator first saw the release (its clock).
	handoverSeen time.Time
	resume       string
}

// failoverEnabled: db has replicas to fail over to and spec.failover does
// not turn it off.
func failoverEnabled(db *dbv1.Database) bool {
	return db.Spec.Replicas >= 2 && (db.Spec.Failover.Enabled == nil || *db.Spec.Failover.Enabled)
}

// stillWritable: the server of pod answers as a writable primary.
func stillWritable(ctx context.Context, obs *observed, pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		return false
	}
	st, err := inst.Status(ctx)
	return err == nil && st.Writable()
}

type candidate struct {
	pod    *corev1.Pod
	inst   engine.Instance
	status engine.Status
}

// failoverRun is one attempt at a failover: what its steps learn, in order.
type failoverRun struct {
	r          *DatabaseReconciler
	db         *dbv1.Database
	obs        *observed
	primary    string
	primaryPod *corev1.Pod
	pods       []corev1.Pod
	repl       engine.Credentials

	plan        failoverPlan
	cands       []candidate
	unreachable []string
	best        candidate
	why         string
	fenced      bool
	rec         *dbv1.FailoverRecord
}

// failover promotes the best replica in named steps, each logged and
// reported in an Event (Failover<Step>): survey the replicas, choose one,
// fence the old primary, take the Lease, clear the failsafe, record the
// new primary, promote it, keep its slots and re-point the others. Up to
// the record a step may wait (the Lease of an unreachable primary has not
// expired) and the next reconcile starts again from the survey; from the
// record on it only rolls forward.
func (r *DatabaseReconciler) failover(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, primaryPod *corev1.Pod, repl engine.Credentials, plan failoverPlan) error {
	// Sort a copy: primaryPod points into the caller's slice.
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	f := &failoverRun{r: r, db: db, obs: obs, primary: db.Status.CurrentPrimary, primaryPod: primaryPod, pods: pods, repl: repl, plan: plan}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("primary", f.primary))
	_, err := r.runSteps(ctx, db, obs, "Failover", []haStep{
		{name: "ReplicasSurveyed", run: func() (stepOutcome, error) { return f.survey(ctx) }},
		{name: "CandidateChosen", run: func() (stepOutcome, error) { return f.choose(ctx) }},
		{name: "OldPrimaryFenced", run: func() (stepOutcome, error) { return f.fence(ctx) }},
		{name: "LeaseTaken", run: func() (stepOutcome, error) { return f.takeLease(ctx) }},
		{name: "FailsafeCleared", run: func() (stepOutcome, error) { return f.clearFailsafe(ctx) }},
		{name: "Recorded", run: func() (stepOutcome, error) { return f.record(ctx) }},
		{name: "Promoted", run: func() (stepOutcome, error) { return f.promote(ctx) }},
		{name: "SlotsKept", run: func() (stepOutcome, error) { return f.keepSlots(ctx) }},
		{name: "ReplicasRepointed", run: func() (stepOutcome, error) { return f.repoint(ctx) }},
	})
	return err
}

// survey asks every replica where it stands. A replica already promoted
// (by an earlier reconcile whose status write was lost) is the primary:
// never promote a second one. With synchronous replication, too few
// answers could mean promoting one that lacks acknowledged writes.
func (f *failoverRun) survey(ctx context.Context) (stepOutcome, error) {
	for i := range f.pods {
		pod := &f.pods[i]
		if pod.Name == f.primary || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		inst, err := f.obs.instances.get(ctx, pod)
		if err != nil {
			f.unreachable = append(f.unreachable, pod.Name)
			continue
		}
		st, err := inst.Status(ctx)
		if err != nil {
			f.unreachable = append(f.unreachable, pod.Name)
			continue
		}
		f.cands = append(f.cands, candidate{pod: pod, inst: inst, status: st})
	}
	for _, c := range f.cands {
		if c.status.Writable() {
			f.obs.promoted = c.pod.Name
			return stepOutcome{did: fmt.Sprintf("%s already serves as the primary (an earlier promotion whose record was lost); adopting it", c.pod.Name), stop: true}, nil
		}
	}
	if need, seen := synchronousQuorum(f.db, f.pods, f.cands); seen < need {
		f.r.event(f.db, corev1.EventTypeWarning, "SynchronousStandbysUnreachable", "Failover",
			"Primary %s failed; not promoting: synchronous replication acknowledged each write once %d replica(s) held it, so only the furthest of %d replicas is sure to hold every acknowledged write, and %d answer (unreachable: %v)",
			f.primary, f.db.Spec.SynchronousReplicas(), need, seen, f.unreachable)
		f.obs.requeueWithin(primarySampleInterval)
		return stepOutcome{}, fmt.Errorf("primary %s failed and only %d of the %d replicas synchronous replication needs answer, so a promotion could lose acknowledged writes (unreachable: %v)",
			f.primary, seen, need, f.unreachable)
	}
	return done(fmt.Sprintf("%d replicas answer (unreachable: %v)", len(f.cands), f.unreachable)), nil
}

// choose picks the replica with the furthest position, within
// spec.failover.maxLag of the primary's last seen position when set.
func (f *failoverRun) choose(ctx context.Context) (stepOutcome, error) {
	var bound *lagBound
	if f.db.Spec.Failover.MaxLag != nil {
		last, ok := f.r.lastPrimaryPosition(ctx, f.db)
		if !ok {
			f.r.event(f.db, corev1.EventTypeWarning, "LagBoundUnchecked", "Failover",
				"spec.failover.maxLag cannot be checked: the operator has seen no position of primary %s since it started", f.primary)
		} else {
			bound = &lagBound{primary: last, max: *f.db.Spec.Failover.MaxLag}
		}
	}
	if c, ok := f.planned(); ok {
		f.best, f.why = c, fmt.Sprintf("%s, as the interrupted procedure chose (the primary Lease names it)", c.pod.Name)
		return done(f.why), nil
	}
	cands := f.cands
	if h := f.plan.handover; h != nil {
		var (
			wait     time.Duration
			gaveBack bool
			err      error
		)
		switch cands, wait, gaveBack, err = f.holdingHandover(ctx); {
		case err != nil:
			return stepOutcome{}, err
		case gaveBack:
			return stepOutcome{did: fmt.Sprintf("no replica can take over without %s's last writes: it takes the role back", f.primary), stop: true}, nil
		case wait > 0:
			return stepOutcome{did: fmt.Sprintf("no reachable replica holds %s's last position %s yet", f.primary, h.Position), wait: wait}, nil
		}
	}
	best, why, err := chooseCandidate(cands, bound)
	if err != nil {
		if bound != nil {
			f.obs.requeueWithin(primarySampleInterval)
		}
		return stepOutcome{}, fmt.Errorf("primary %s failed and %w (unreachable: %v)", f.primary, err, f.unreachable)
	}
	f.best, f.why = best, why
	return done(why), nil
}

// planned is the candidate an interrupted failover or switchover chose
// (the Lease's holder), when it answers as a replica.
func (f *failoverRun) planned() (candidate, bool) {
	for _, c := range f.cands {
		if f.plan.resume != "" && c.pod.Name == f.plan.resume && c.status.Role == engine.RoleReplica {
			return c, true
		}
	}
	return candidate{}, false
}

// handoverWait is how long after a planned handover the failover waits
// for a replica that holds the stopping primary's last position to answer
// (the one that did may be restarting) before it chooses among the others.
const handoverWait = 30 * time.Second

// holdingHandover are the candidates that received everything the
// stopping primary wrote. None answering yet: wait, within handoverWait of
// the release. After that the role goes back to the old primary when its
// pod is there (it holds every write); without it, every candidate (the
// failover rules), with an Event: what the others lack is kept on the old
// primary's volume.
func (f *failoverRun) holdingHandover(ctx context.Context) ([]candidate, time.Duration, bool, error) {
	h := f.plan.handover
	var holding []candidate
	for _, c := range f.cands {
		if c.status.Role != engine.RoleReplica {
			continue
		}
		if cmp, err := c.inst.Compare(c.status.Received, h.Position); err == nil && cmp >= 0 {
			holding = append(holding, c)
		}
	}
	if len(holding) > 0 {
		return holding, 0, false, nil
	}
	if left := time.Until(f.plan.handoverSeen.Add(handoverWait)); left > 0 {
		return nil, min(left, time.Second), false, nil
	}
	if p := f.primaryPod; p != nil && p.DeletionTimestamp.IsZero() {
		why := fmt.Sprintf("no replica that holds its last position %s (%s received it) answers %s after the handover", h.Position, h.Replica, handoverWait)
		return nil, 0, true, f.r.giveBack(ctx, f.db, f.obs, f.pods, why)
	}
	f.r.event(f.db, corev1.EventTypeWarning, "PlannedHandoverIncomplete", "Failover",
		"No reachable replica holds %s's last position %s (%s received it) %s after its handover, and %s has no pod: choosing among the others; what they lack stays on %s's volume",
		f.primary, h.Position, h.Replica, handoverWait, f.primary, f.primary)
	return f.cands, 0, false, nil
}

// fence stops what may still run of the old primary, so it takes no write
// once another is promoted, and lets the candidate catch up with it.
// Unreachable is the usual case: then its agent, unable to renew the
// Lease, stops it, and the Lease moves only once it has expired.
func (f *failoverRun) fence(ctx context.Context) (stepOutcome, error) {
	if f.primaryPod == nil {
		return done(fmt.Sprintf("%s has no pod: nothing to fence", f.primary)), nil
	}
	if h := f.plan.handover; h != nil {
		// Its agent fenced it before it released the Lease; its server may
		// be shutting down by now.
		return done(fmt.Sprintf("%s was fenced by its agent at %s before it released the primary Lease", f.primary, h.Position)), nil
	}
	inst, err := f.obs.instances.get(ctx, f.primaryPod)
	if err != nil {
		return stepOutcome{did: fmt.Sprintf("%s cannot be reached (%v), so it is not fenced: its agent stops it once it cannot renew the Lease, which moves only once expired", f.primary, err),
			reason: "OldPrimaryUnreachable", warning: true}, nil
	}
	if err := inst.Fence(ctx); err != nil {
		return stepOutcome{}, fmt.Errorf("fencing old primary %s before promotion: %w", f.primary, err)
	}
	f.fenced = true
	f.r.catchUpWithFenced(ctx, f.db, inst, f.best, f.primary)
	return done(fmt.Sprintf("%s takes no more writes", f.primary)), nil
}

// takeLease hands the primary Lease to the candidate: at once when the
// old primary is fenced, otherwise once the old holder's Lease expired.
func (f *failoverRun) takeLease(ctx context.Context) (stepOutcome, error) {
	var fenced *corev1.Pod
	if f.fenced {
		fenced = f.primaryPod
	}
	left, err := f.r.takeLease(ctx, f.db, f.pods, f.best.pod, fenced)
	if err != nil {
		return stepOutcome{}, err
	}
	if left > 0 {
		return stepOutcome{did: fmt.Sprintf("the primary Lease of unreachable %s has not expired; %s waits", f.primary, f.best.pod.Name), wait: left}, nil
	}
	return done(fmt.Sprintf("the primary Lease names %s", f.best.pod.Name)), nil
}

// clearFailsafe waits while the candidate may have confirmed the old
// primary to its agent when the API server was away.
func (f *failoverRun) clearFailsafe(ctx context.Context) (stepOutcome, error) {
	hold, err := f.r.failsafeHold(ctx, f.obs, f.best.pod, f.repl)
	if err != nil {
		return stepOutcome{}, err
	}
	if hold > 0 {
		return stepOutcome{did: fmt.Sprintf("candidate %s confirmed %s to its agent while the API server was away", f.best.pod.Name, f.primary), wait: hold}, nil
	}
	return done(fmt.Sprintf("no agent holds %s as the primary any longer", f.primary)), nil
}

// record names the candidate the primary before it is promoted, so a
// promotion whose reconcile dies is found and adopted, never repeated on
// another replica.
func (f *failoverRun) record(ctx context.Context) (stepOutcome, error) {
	to := f.best.pod.Name
	if f.plan.resume == to && f.db.Spec.Primary == to {
		// Finishing the switchover spec.primary asked for (its operator
		// stopped after the Lease hand-over): a switchover, not a failover.
		if err := f.r.recordPrimary(ctx, f.db, to); err != nil {
			return stepOutcome{}, fmt.Errorf("recording %s as the primary before promoting it: %w", to, err)
		}
		return done(fmt.Sprintf("the topology names %s the primary (the switchover spec.primary asked for, finished)", to)), nil
	}
	f.r.event(f.db, corev1.EventTypeWarning, "FailoverStarted", "Failover", "Primary %s failed; promoting %s: %s", f.primary, to, f.why)
	reason := fmt.Sprintf("primary not ready and unreachable for %s; %s", failoverDelay(f.db), f.why)
	switch {
	case f.plan.handover != nil:
		reason = fmt.Sprintf("planned handover: %s's pod is stopping, fenced at %s; %s", f.primary, f.plan.handover.Position, f.why)
	case f.plan.resume != "":
		reason = fmt.Sprintf("resumed: the primary Lease had moved to %s before the record did; %s", f.plan.resume, f.why)
	}
	rec := &dbv1.FailoverRecord{Time: metav1.Time{Time: f.r.now()}, From: f.primary, To: to, Reason: reason}
	if err := f.r.recordFailover(ctx, f.db, rec); err != nil {
		return stepOutcome{}, fmt.Errorf("recording %s as the primary before promoting it: %w", to, err)
	}
	f.rec = rec
	return done(fmt.Sprintf("the topology names %s the primary", to)), nil
}

func (f *failoverRun) promote(ctx context.Context) (stepOutcome, error) {
	if err := f.best.inst.Promote(ctx); err != nil {
		return stepOutcome{}, fmt.Errorf("promoting %s: %w", f.best.pod.Name, err)
	}
	f.obs.promoted = f.best.pod.Name
	f.obs.primaryUnhealthySince = nil
	f.obs.failover = f.rec
	return done(fmt.Sprintf("%s takes writes", f.best.pod.Name)), nil
}

// keepSlots makes the slots the replicas about to follow stream through,
// and keeps the old primary's, which holds the WAL its rewind will need. A
// failure does not stop the failover: the Rejoin phase tries again.
func (f *failoverRun) keepSlots(ctx context.Context) (stepOutcome, error) {
	if err := f.r.keepSlots(ctx, f.db, f.obs, f.best.inst, f.best.pod.Name, f.pods); err != nil {
		log.FromContext(ctx).Error(err, "replication slots on the new primary; the Rejoin phase tries again", "primary", f.best.pod.Name)
		return done(fmt.Sprintf("replication slots on %s not kept yet (%v); the Rejoin phase tries again", f.best.pod.Name, err)), nil
	}
	return done(fmt.Sprintf("replication slots kept on %s", f.best.pod.Name)), nil
}

// repoint points the other replicas at the new primary. The new primary
// serves whatever happens here: a replica that could not follow is
// retried on the next reconcile, through the error.
func (f *failoverRun) repoint(ctx context.Context) (stepOutcome, error) {
	to := f.best.pod.Name
	newPrimary, err := f.obs.instances.endpoint(ctx, f.best.pod)
	if err != nil {
		return stepOutcome{}, err
	}
	var others []candidate
	for _, c := range f.cands {
		if c.pod.Name != to {
			others = append(others, c)
		}
	}
	followed, err := repoint(ctx, others, newPrimary, f.repl)
	f.r.event(f.db, corev1.EventTypeNormal, "FailoverCompleted", "Failover", "%s is the primary; %d replicas re-pointed", to, followed)
	if err != nil {
		return stepOutcome{}, fmt.Errorf("re-pointing replicas at %s: %w", to, err)
	}
	return done(fmt.Sprintf("%d replicas follow %s", followed, to)), nil
}

// repoint has each of insts follow the primary at target and says how many
// do. A PostgreSQL primary answers ErrNotInRecovery: it becomes a standby
// only through a restart, so it stays fenced and the Rejoin phase restarts
// its pod for its start script to rewind it (pg_rewind) onto the new
// primary.
func repoint(ctx context.Context, insts []candidate, target engine.Endpoint, repl engine.Credentials) (int, error) {
	var errs []error
	followed := 0
	for _, c := range insts {
		switch err := c.inst.Follow(ctx, target, repl); {
		case errors.Is(err, engine.ErrNotInRecovery):
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", c.pod.Name, err))
		default:
			followed++
		}
	}
	return followed, errors.Join(errs...)
}

// failoverCatchUp bounds how long a failover waits for the candidate to
// apply what a fenced, reachable old primary wrote (a variable: the unit
// tests shorten it).
var failoverCatchUp = 30 * time.Second

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
