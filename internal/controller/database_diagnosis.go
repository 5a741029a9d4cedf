package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/diagnosis"
)

// Reading a failed container's log: its previous start's last lines,
// within a bound, since a crash-looping server writes little before it
// exits and the cause is near the end.
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get,namespace=system

const (
	diagnosisLogLines = 60
	diagnosisLogBytes = 64 << 10
	diagnosisTimeout  = 5 * time.Second
)

// PodLogs reads the last lines of a container's previous start.
type PodLogs func(ctx context.Context, namespace, pod, container string) (string, error)

// ClientsetPodLogs reads logs through the API server (the kubelet's
// containerLogs); the controller-runtime client has no log subresource.
func ClientsetPodLogs(cs kubernetes.Interface) PodLogs {
	return func(ctx context.Context, namespace, pod, container string) (string, error) {
		lines, limit := int64(diagnosisLogLines), int64(diagnosisLogBytes)
		req := cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: true, TailLines: &lines, LimitBytes: &limit})
		b, err := req.DoRaw(ctx)
		if err != nil {
			return "", fmt.Errorf("reading the previous log of %s/%s: %w", pod, container, err)
		}
		return string(b), nil
	}
}

// dataClaimName is the claim of an instance's data volume (the chart's
// claim template is "data").
func dataClaimName(pod string) string { return "data-" + pod }

// diagnosisLog remembers what each failed start's log said, so a
// crash-looping pod's log is read once per restart, not per reconcile,
// and each new diagnosis is reported once. A nil diagnosisLog remembers
// nothing.
type diagnosisLog struct {
	mu     sync.Mutex
	causes map[startKey]classified
	// last is each failing pod's latest diagnosis.
	last map[types.UID]*dbv1.InstanceFailure
}

// startKey is one container start of one pod.
type startKey struct {
	pod       types.UID
	container string
	restarts  int32
}

type classified struct {
	cause    diagnosis.Cause
	evidence string
}

func (d *diagnosisLog) lookup(k startKey) (classified, bool) {
	if d == nil {
		return classified{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.causes[k]
	return c, ok
}

func (d *diagnosisLog) remember(k startKey, c classified) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.causes == nil {
		d.causes = map[startKey]classified{}
	}
	for old := range d.causes { // one start per pod and container is enough
		if old.pod == k.pod && old.container == k.container {
			delete(d.causes, old)
		}
	}
	d.causes[k] = c
}

// report remembers a pod's diagnosis and says whether it is news: its
// reason or cause changed.
func (d *diagnosisLog) report(pod types.UID, f *dbv1.InstanceFailure) bool {
	if d == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[types.UID]*dbv1.InstanceFailure{}
	}
	prev := d.last[pod]
	d.last[pod] = f
	return prev == nil || prev.Reason != f.Reason || prev.ProbableCause != f.ProbableCause
}

// previous is the pod's latest diagnosis, if it has one.
func (d *diagnosisLog) previous(pod types.UID) *dbv1.InstanceFailure {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[pod]
}

// forget drops what is known of a pod that runs again or is gone.
func (d *diagnosisLog) forget(pod types.UID) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last, pod)
	for k := range d.causes {
		if k.pod == pod {
			delete(d.causes, k)
		}
	}
}

// diagnose says why an instance's pod does not run (nil when it runs or
// only starts), with the probable cause read from the failed container's
// last log lines, and reports each new diagnosis in a Warning Event.
func (r *DatabaseReconciler) diagnose(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) *dbv1.InstanceFailure {
	f := diagnosis.OfPod(pod, "", r.now())
	if f != nil && f.Reason == diagnosis.ReasonUnschedulable {
		// Only then is the claim read (afresh, uncached): not for every
		// pod that waits for a node at each reconcile.
		if claim := r.pendingClaim(ctx, db, pod); claim != "" {
			f = diagnosis.OfPod(pod, claim, r.now())
		}
	}
	if prev := r.diagnoses.previous(pod.UID); f != nil && prev != nil && f.Reason == diagnosis.ReasonRestartingRepeatedly &&
		(prev.Reason == diagnosis.ReasonCrashLoopBackOff || prev.Reason == diagnosis.ReasonOOMKilled) {
		f.Reason = prev.Reason // the same crash loop, between two back-offs
	}
	if f == nil {
		// Between two crashes the container runs for a moment: a pod that
		// failed stays failing until it is ready again.
		if prev := r.diagnoses.previous(pod.UID); prev != nil && !podReady(pod) && pod.DeletionTimestamp.IsZero() {
			return prev
		}
		r.diagnoses.forget(pod.UID)
		return nil
	}
	out := &dbv1.InstanceFailure{Reason: f.Reason, Container: f.Container, ExitCode: f.ExitCode, RestartCount: f.RestartCount, Message: bounded(f.Message)}
	var cause diagnosis.Cause
	var evidence string
	if f.NeedsLog {
		c := r.classify(ctx, pod, f)
		cause, evidence = c.cause, c.evidence
		out.ProbableCause = string(cause)
		if evidence != "" {
			out.Message = bounded(evidence)
		}
	}
	out.Runbook = diagnosis.Runbook(f.Reason, cause)
	summary := diagnosis.Summary(pod.Name, f, cause, evidence)
	if r.diagnoses.report(pod.UID, out) {
		log.FromContext(ctx).Info("instance failing", "pod", pod.Name, "container", f.Container, "reason", f.Reason, "cause", cause, "restarts", f.RestartCount)
		r.event(db, corev1.EventTypeWarning, "InstanceFailing", "Diagnose", "%s", summary)
	}
	return out
}

// classify reads the failed container's previous log once per start.
func (r *DatabaseReconciler) classify(ctx context.Context, pod *corev1.Pod, f *diagnosis.Failure) classified {
	key := startKey{pod: pod.UID, container: f.Container, restarts: f.RestartCount}
	if c, ok := r.diagnoses.lookup(key); ok {
		return c
	}
	terminated := ""
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == f.Container && cs.LastTerminationState.Terminated != nil {
			terminated = cs.LastTerminationState.Terminated.Reason
		}
	}
	text := ""
	if r.Logs != nil {
		lctx, cancel := context.WithTimeout(ctx, diagnosisTimeout)
		defer cancel()
		var err error
		if text, err = r.Logs(lctx, pod.Namespace, pod.Name, f.Container); err != nil {
			// The cause stays Unknown, and says why; the next restart tries again.
			log.FromContext(ctx).Info("cannot read a failed container's log", "pod", pod.Name, "container", f.Container, "error", err.Error())
			return classified{cause: diagnosis.Unknown, evidence: "its log could not be read: " + err.Error()}
		}
	}
	cause, evidence := diagnosis.Classify(text, terminated)
	c := classified{cause: cause, evidence: evidence}
	r.diagnoses.remember(key, c)
	return c
}

// pendingClaim names the pod's data claim when it is not bound yet (asked
// only of a pod the scheduler found no node for).
func (r *DatabaseReconciler) pendingClaim(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" || r.APIReader == nil {
		return ""
	}
	name := dataClaimName(pod.Name)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pvc); err != nil {
		if !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("cannot read an unscheduled pod's claim", "claim", name, "error", err.Error())
		}
		return ""
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return name
	}
	return ""
}

// setInstancesCondition: InstancesHealthy is False, naming every instance
// whose pod does not run and why.
func setInstancesCondition(st *dbv1.DatabaseStatus, in statusInput) {
	if !in.obs.instancesObserved {
		return
	}
	failing := failingInstances(in.obs.instanceStates)
	if len(failing) == 0 {
		setCondition(st, in.db, dbv1.ConditionInstancesHealthy, "True", dbv1.ReasonNoInstanceFailing, "no instance's pod is failing")
		return
	}
	msg := ""
	for i, f := range failing {
		if i > 0 {
			msg += "; "
		}
		msg += failureSummary(f)
	}
	setCondition(st, in.db, dbv1.ConditionInstancesHealthy, "False", failing[0].Failure.Reason, bounded(msg))
}

// failureSummary is an instance's failure in one line.
func failureSummary(in dbv1.InstanceStatus) string {
	f := in.Failure
	return diagnosis.Summary(in.Name, &diagnosis.Failure{Reason: f.Reason, Container: f.Container, ExitCode: f.ExitCode, RestartCount: f.RestartCount, Message: f.Message},
		diagnosis.Cause(f.ProbableCause), "")
}
