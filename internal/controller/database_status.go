package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// observed is what one reconcile saw of the objects behind a Database. The
// phases fill it in; computeStatus reads it.
type observed struct {
	statefulSet *appsv1.StatefulSet // nil when it does not exist (yet)
	pods        []corev1.Pod
	podsListed  bool
	waiting     string // set when a phase waits on something before it can go on (wait)
	waitReason  string // the Progressing reason while waiting
	// rolloutStuck says which instance a rollout waits on past its bound.
	rolloutStuck string
	// halt: a phase found that the phases after it must not run yet (no
	// primary chosen among kept volumes), without a failure.
	halt bool
	// recorded is the primary the topology names while status names none
	// yet: the one chosen among kept volumes (status names it once it
	// serves).
	recorded string
	requeue  time.Duration // when to look again (a failover delay running out)

	// Failover: when the primary was first seen failed (nil: healthy), and
	// the pod promoted in this reconcile with the record of it.
	primaryUnhealthySince *metav1.Time
	promoted              string
	failover              *dbv1.FailoverRecord

	// Rejoin: pods to restart (after the topology is written) and why, and
	// rebuild and rewind requests (pod -> token) for the topology.
	restart    []*corev1.Pod
	restartWhy map[string]string
	rebuild    map[string]string
	rewind     map[string]string

	// Backups: the latest finished Backup, when the latest completed one
	// finished, and the schedule time of a Backup created in this reconcile.
	lastBackup           *dbv1.Backup
	lastSuccessfulBackup *metav1.Time
	lastScheduledBackup  *metav1.Time

	// Restore (spec.bootstrap): restoring is true until the backup is
	// loaded (the primary gets no read-write role meanwhile); restored is
	// the Restored condition to set.
	restoring bool
	restored  *metav1.Condition
	// physicalRestore: the bootstrap is a physical recovery, before the
	// pods (the Recovery phase's, not the Restore phase's).
	physicalRestore bool
	// firstRecoverable: status.firstRecoverabilityPoint, when
	// backupsObserved (observeBackups listed the Backups).
	firstRecoverable *metav1.Time
	backupsObserved  bool
	// backups are the Database's Backups, as observeBackups listed them.
	backups []dbv1.Backup
	// Restore drills: the latest one's state, and the schedule time of a
	// drill started in this reconcile.
	drill                     *drillState
	lastScheduledVerification *metav1.Time

	// instances are the reconcile's connections to the servers (nil
	// without an InstanceConnector).
	instances *instanceSet

	// primaryCheck is what the primary's server said (verifyPrimary).
	primaryCheck primaryCheck

	// Instances: every instance's state (instancesObserved: the phase
	// ran) and the replication's health as judged against the primary.
	instanceStates    []dbv1.InstanceStatus
	instancesObserved bool
	replication       replicationHealth

	// archive is the ContinuousArchiving condition the Archive phase saw
	// (nil: it did not run).
	archive *archiveState

	failedPhase string // the first reconcile phase that failed, if any
	err         error  // what it and any later failing phase failed with
}

// fail records a phase's failure. The first names the Degraded reason;
// later ones are added to the message, so none is hidden.
func (o *observed) fail(phase string, err error) {
	if o.err == nil {
		o.failedPhase, o.err = phase, err
		return
	}
	o.err = fmt.Errorf("%w; %s: %w", o.err, phase, err)
}

// wait records that a phase waits on something before it can go on, as
// Progressing says (reason, message).
func (o *observed) wait(reason, message string) {
	o.waitReason, o.waiting = reason, message
}

// requeueWithin asks for the next reconcile within d.
func (o *observed) requeueWithin(d time.Duration) {
	if d > 0 && (o.requeue == 0 || d < o.requeue) {
		o.requeue = d
	}
}

// restarting: pod is restarted by this reconcile (its Topology phase
// deletes it): nothing may be started against it now.
func (o *observed) restarting(pod string) bool {
	for _, p := range o.restart {
		if p.Name == pod {
			return true
		}
	}
	return false
}

func (o *observed) restartPod(pod *corev1.Pod, why string) {
	if o.restartWhy == nil {
		o.restartWhy = map[string]string{}
	}
	if _, dup := o.restartWhy[pod.Name]; !dup {
		o.restart = append(o.restart, pod)
	}
	o.restartWhy[pod.Name] = why
}

func (o *observed) requestRewind(pod, token string) {
	if o.rewind == nil {
		o.rewind = map[string]string{}
	}
	o.rewind[pod] = token
}

func (o *observed) requestRebuild(pod, token string) {
	if o.rebuild == nil {
		o.rebuild = map[string]string{}
	}
	o.rebuild[pod] = token
}

// reasonPhaseFailedPostfix makes a failed phase's Degraded reason and
// Event: <Phase>Failed, e.g. ApplyFailed.
const reasonPhaseFailedPostfix = "Failed"

// computeStatus derives the whole status from the spec and what was
// observed. It is pure: same inputs, same status (condition times aside,
// which meta.SetStatusCondition keeps when a condition does not change).
func computeStatus(db *dbv1.Database, obs *observed) dbv1.DatabaseStatus {
	st := *db.Status.DeepCopy()
	in := summarize(db, obs)
	setObserved(&st, in)
	setInstancesCondition(&st, in)
	setReplicationCondition(&st, in)
	setReadyCondition(&st, in)
	if obs.restored != nil {
		setCondition(&st, db, dbv1.ConditionRestored, obs.restored.Status, obs.restored.Reason, obs.restored.Message)
	}
	backupStatus(&st, db, obs)
	drillStatus(&st, db, obs)
	setArchiveCondition(&st, db, obs)
	setRecoverability(&st, db, obs)
	setProgressingCondition(&st, in)
	setDegradedCondition(&st, in)
	st.Phase = phaseOf(in)
	if obs.err == nil && obs.waiting == "" {
		st.ObservedGeneration = db.Generation
	}
	return st
}

// statusInput is what the status setters read: the Database, what the
// reconcile observed, and the counts and rollout state derived from it once.
type statusInput struct {
	db           *dbv1.Database
	obs          *observed
	desired      int32
	ready        int32
	primary      string
	primaryReady bool // the recorded primary's pod is ready and labelled primary
	allReady     bool
	// failing: instances whose pods do not run, with the diagnosis.
	failing []dbv1.InstanceStatus
	// replicationBroken: ReplicationHealthy is False (its message says why).
	replicationBroken string
	progressing       bool
	progress          struct{ reason, message string }
}

func summarize(db *dbv1.Database, obs *observed) statusInput {
	in := statusInput{db: db, obs: obs, desired: max(db.Spec.Replicas, 1), primary: primaryName(db, obs)}
	for i := range obs.pods {
		p := &obs.pods[i]
		if !p.DeletionTimestamp.IsZero() || !podReady(p) {
			continue
		}
		in.ready++
		if p.Name == in.primary && p.Labels[labelRole] == rolePrimary {
			in.primaryReady = true
		}
	}
	in.allReady = in.primaryReady && in.ready == in.desired
	in.failing = failingInstances(obs.instanceStates)
	if obs.replication.status == metav1.ConditionFalse {
		in.replicationBroken = obs.replication.message
	}
	in.progressing, in.progress.reason, in.progress.message = rollout(db, obs.statefulSet, in.desired)
	if obs.waiting != "" {
		in.progressing, in.progress.reason, in.progress.message = true, obs.waitReason, obs.waiting
	}
	if obs.rolloutStuck != "" {
		in.progressing, in.progress.reason, in.progress.message = false, dbv1.ReasonRolloutStuck, obs.rolloutStuck
	}
	return in
}

// setObserved sets the fields that report what is there: version,
// selector, endpoints, counts, the primary and the failover record.
func setObserved(st *dbv1.DatabaseStatus, in statusInput) {
	db, obs := in.db, in.obs
	port := engine.ProfileOf(db.Spec.Engine).Port
	st.Version = effectiveVersion(db)
	st.Selector = labels.SelectorFromSet(selectorLabels(db)).String()
	st.Endpoints = dbv1.Endpoints{
		ReadWrite: fmt.Sprintf("%s-rw.%s.svc:%d", db.Name, db.Namespace, port),
		ReadOnly:  fmt.Sprintf("%s-ro.%s.svc:%d", db.Name, db.Namespace, port),
	}
	st.ReadyReplicas = in.ready
	st.Replicas = 0
	if obs.statefulSet != nil {
		st.Replicas = obs.statefulSet.Status.Replicas
	}
	if in.primaryReady || obs.promoted != "" {
		st.CurrentPrimary = in.primary
	}
	st.PrimaryUnhealthySince = obs.primaryUnhealthySince
	if obs.instancesObserved {
		st.Instances = obs.instanceStates
	}
	if obs.failover != nil {
		st.LastFailover = obs.failover
	}
}

// setReadyCondition: every instance ready and the primary serving; a
// Database bootstrapped from a backup is Ready only once it was restored.
func setReadyCondition(st *dbv1.DatabaseStatus, in statusInput) {
	db, obs := in.db, in.obs
	switch {
	case obs.restoring:
		reason, msg := dbv1.ReasonRestoring, "the bootstrap backup is not loaded yet"
		if obs.restored != nil {
			reason, msg = obs.restored.Reason, obs.restored.Message
		}
		setCondition(st, db, dbv1.ConditionReady, metav1.ConditionFalse, reason, msg)
	case in.allReady && in.replicationBroken != "":
		setCondition(st, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonReplicationUnhealthy,
			fmt.Sprintf("every instance is ready, but replication is not healthy: %s", in.replicationBroken))
	case in.allReady:
		setCondition(st, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonAllInstancesReady,
			readyMessage(obs, in.ready, in.desired, in.primary))
	case !in.primaryReady:
		msg := fmt.Sprintf("primary %s is not ready; %d/%d instances ready", in.primary, in.ready, in.desired)
		for _, f := range in.failing {
			if f.Name == in.primary {
				msg += ": " + failureSummary(f)
			}
		}
		setCondition(st, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonPrimaryNotReady, msg)
	default:
		setCondition(st, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonInstancesNotReady,
			fmt.Sprintf("%d/%d instances ready", in.ready, in.desired))
	}
}

// setProgressingCondition: the StatefulSet still moves towards the spec,
// or the volumes are being replaced to grow.
func setProgressingCondition(st *dbv1.DatabaseStatus, in statusInput) {
	if in.progress.reason == dbv1.ReasonRolloutStuck {
		setCondition(st, in.db, dbv1.ConditionProgressing, metav1.ConditionFalse, dbv1.ReasonRolloutStuck, in.progress.message)
		return
	}
	if in.progressing {
		setCondition(st, in.db, dbv1.ConditionProgressing, metav1.ConditionTrue, in.progress.reason, in.progress.message)
		return
	}
	setCondition(st, in.db, dbv1.ConditionProgressing, metav1.ConditionFalse, dbv1.ReasonReconciled,
		fmt.Sprintf("%d instances of %s %s match the spec", in.desired, in.db.Spec.Engine, st.Version))
}

// setDegradedCondition: a phase failed, or the rollout is done and still
// not all is ready.
func setDegradedCondition(st *dbv1.DatabaseStatus, in statusInput) {
	db, obs := in.db, in.obs
	switch {
	case obs.err != nil:
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionTrue, obs.failedPhase+reasonPhaseFailedPostfix, obs.err.Error())
	case obs.rolloutStuck != "":
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionTrue, dbv1.ReasonRolloutStuck, obs.rolloutStuck)
	case len(in.failing) > 0:
		// Whether or not a rollout is under way: a pod that cannot run does
		// not heal by waiting.
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionTrue, in.failing[0].Failure.Reason, bounded(failureSummary(in.failing[0])))
	case !in.progressing && !in.primaryReady:
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionTrue, dbv1.ReasonPrimaryNotReady,
			fmt.Sprintf("primary %s is not ready or not labelled %s after the rollout finished", in.primary, rolePrimary))
	case !in.progressing && !in.allReady:
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionTrue, dbv1.ReasonInstancesNotReady,
			fmt.Sprintf("%d/%d instances ready after the rollout finished", in.ready, in.desired))
	case !in.progressing && in.replicationBroken != "":
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionTrue, dbv1.ReasonReplicationUnhealthy, in.replicationBroken)
	default:
		setCondition(st, db, dbv1.ConditionDegraded, metav1.ConditionFalse, dbv1.ReasonAsExpected, "no failure observed")
	}
}

// phaseOf sums the state up in one word, the first that applies.
func phaseOf(in statusInput) dbv1.Phase {
	obs := in.obs
	switch {
	case (obs.err != nil || len(in.failing) > 0) && in.ready == 0:
		return dbv1.PhaseFailed
	case obs.restoring && obs.restored != nil && obs.restored.Reason == dbv1.ReasonRestoreFailed:
		return dbv1.PhaseFailed
	case obs.restoring:
		return dbv1.PhaseProvisioning
	case obs.err != nil:
		return dbv1.PhaseDegraded
	case obs.statefulSet == nil:
		return dbv1.PhasePending
	case in.allReady && !in.progressing && in.replicationBroken == "":
		return dbv1.PhaseRunning
	case !in.primaryReady && in.ready == 0 && in.progressing:
		return dbv1.PhaseProvisioning
	case in.progressing:
		return dbv1.PhaseUpdating
	}
	return dbv1.PhaseDegraded
}

// rollout tells whether the StatefulSet is still moving towards the spec.
func rollout(db *dbv1.Database, sts *appsv1.StatefulSet, desired int32) (bool, string, string) {
	if sts == nil {
		return true, dbv1.ReasonCreating, "creating the StatefulSet"
	}
	s := sts.Status
	switch {
	case s.ObservedGeneration < sts.Generation:
		return true, dbv1.ReasonRollingUpdate, "waiting for the StatefulSet controller to observe the change"
	case s.Replicas != desired || ptrValue(sts.Spec.Replicas) != desired:
		if s.ReadyReplicas == 0 && db.Status.ReadyReplicas == 0 {
			return true, dbv1.ReasonCreating, fmt.Sprintf("creating instances: %d/%d exist", s.Replicas, desired)
		}
		return true, dbv1.ReasonScaling, fmt.Sprintf("scaling from %d to %d instances", s.Replicas, desired)
	// Not currentRevision: under OnDelete, Kubernetes releases before the
	// fix of kubernetes#73492 never advance it (only RollingUpdate
	// completed an update); the floor release, 1.30, is one.
	case s.UpdateRevision != "" && s.UpdatedReplicas != desired:
		return true, dbv1.ReasonRollingUpdate, fmt.Sprintf("rolling out revision %s: %d/%d instances updated", s.UpdateRevision, s.UpdatedReplicas, desired)
	case s.ReadyReplicas < desired && db.Status.Phase != dbv1.PhaseRunning && db.Status.Phase != dbv1.PhaseDegraded:
		// Converged but not yet all ready, and never reached Running since the
		// change: instances are still starting. After Running, this is Degraded.
		return true, dbv1.ReasonCreating, fmt.Sprintf("starting instances: %d/%d ready", s.ReadyReplicas, desired)
	}
	return false, "", ""
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// podStarted: the pod's database container runs, ready or not. A replica
// that does not replicate is not ready (out of -ro) until it is re-pointed
// or rebuilt, so Rejoin looks at started pods, not only ready ones.
func podStarted(p *corev1.Pod) bool {
	if podReady(p) {
		return true
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == databaseContainerName {
			return c.State.Running != nil
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setCondition(st *dbv1.DatabaseStatus, db *dbv1.Database, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: db.Generation,
	})
}

// writeStatus patches the status subresource only when it changed.
func (r *DatabaseReconciler) writeStatus(ctx context.Context, db *dbv1.Database, st dbv1.DatabaseStatus) error {
	if equalStatus(db.Status, st) {
		return nil
	}
	orig := db.DeepCopy()
	db.Status = st
	if err := r.Status().Patch(ctx, db, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}

func equalStatus(a, b dbv1.DatabaseStatus) bool { return equality.Semantic.DeepEqual(a, b) }
