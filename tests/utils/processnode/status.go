package processnode

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusLoop writes the pod's status whenever it changed, until ctx ends
// (after one last write).
func (w *podWorker) statusLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	resync := time.NewTicker(10 * time.Second) // a write lost to a timeout is made again
	defer resync.Stop()
	for {
		select {
		case <-resync.C:
			w.writeStatus()
		case <-w.statusDue:
			w.writeStatus()
		case <-ctx.Done():
			w.writeStatus()
			return
		}
	}
}

// writeStatus computes the status and writes it when it differs from the
// stored one (conflicts: read again and retry).
func (w *podWorker) writeStatus() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods := w.node.client.CoreV1().Pods(w.pod.Namespace)
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		cur, err := pods.Get(ctx, w.pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != w.pod.UID {
			return // gone: nothing to report to
		}
		next := w.status(cur.Status)
		if equality.Semantic.DeepEqual(cur.Status, next) {
			return
		}
		cur.Status = next
		if _, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			return
		}
	}
}

// status is the pod's status as a kubelet reports it: phase, conditions,
// addresses and each container's state. Transition times of unchanged
// conditions are kept from old.
func (w *podWorker) status(old corev1.PodStatus) corev1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := corev1.PodStatus{QOSClass: old.QOSClass, HostIP: w.node.net.nodeIP.String(),
		HostIPs: []corev1.HostIP{{IP: w.node.net.nodeIP.String()}}}
	if !w.started.IsZero() {
		t := metav1.NewTime(w.started.Truncate(time.Second))
		st.StartTime = &t
	}
	if w.ip.IsValid() {
		st.PodIP, st.PodIPs = w.ip.String(), []corev1.PodIP{{IP: w.ip.String()}}
	}
	allReady, anyFailed := true, false
	for _, c := range w.pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, containerStatus(w.ctrs[c.Name]))
	}
	for _, spec := range w.pod.Spec.Containers {
		c := w.ctrs[spec.Name]
		cs := containerStatus(c)
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		allReady = allReady && cs.Ready
		anyFailed = anyFailed || c.term != nil && c.term.ExitCode != 0
	}
	st.Phase = w.phase(anyFailed)
	if w.setupErr != "" {
		st.Reason, st.Message = "SandboxFailed", w.setupErr
	}
	terminal := st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed
	st.Conditions = []corev1.PodCondition{
		podCondition(old.Conditions, corev1.PodReadyToStartContainers, w.ip.IsValid() && w.setupErr == "", ""),
		podCondition(old.Conditions, corev1.PodInitialized, w.initDone, "ContainersNotInitialized"),
		podCondition(old.Conditions, corev1.ContainersReady, allReady && !terminal, "ContainersNotReady"),
		podCondition(old.Conditions, corev1.PodReady, allReady && !terminal, "ContainersNotReady"),
		podCondition(old.Conditions, corev1.PodScheduled, true, ""),
	}
	return st
}

// containerStatus is one container's status: its state, the last
// termination while it runs again (or waits to), restarts and readiness.
func containerStatus(c *ctrState) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: "process-node://" + c.spec.Image,
		RestartCount: c.restarts, Ready: c.ready && c.running != nil}
	started := c.running != nil && c.started
	cs.Started = &started
	switch {
	case c.running != nil:
		cs.State.Running = c.running.DeepCopy()
	case c.waiting != nil:
		cs.State.Waiting = c.waiting.DeepCopy()
	case c.term != nil:
		cs.State.Terminated = c.term.DeepCopy()
	}
	if c.last != nil && cs.State.Terminated == nil { // running again, or waiting to
		cs.LastTerminationState.Terminated = c.last.DeepCopy()
	}
	if cs.State.Terminated != nil {
		cs.ContainerID = cs.State.Terminated.ContainerID
	}
	return cs
}

// phase is the pod's phase; anyFailed says a regular container ended with
// a non-zero code. The caller holds w.mu.
func (w *podWorker) phase(anyFailed bool) corev1.PodPhase {
	switch {
	case w.finished && (!w.initDone || anyFailed):
		return corev1.PodFailed
	case w.finished:
		return corev1.PodSucceeded
	case w.initDone && !w.ctrsNeverStarted():
		return corev1.PodRunning // running, or restarting
	default:
		return corev1.PodPending
	}
}

// podCondition is a condition of type t, true when ok (else false with
// reason); its transition time is kept from old when its status is unchanged.
func podCondition(old []corev1.PodCondition, t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s, reason = corev1.ConditionTrue, ""
	}
	c := corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
	for _, o := range old {
		if o.Type == t && o.Status == s {
			c.LastTransitionTime = o.LastTransitionTime
		}
	}
	return c
}

// ctrsNeverStarted: no regular container has started yet (all still waiting
// without a previous run), so the pod is still Pending.
func (w *podWorker) ctrsNeverStarted() bool {
	for _, spec := range w.pod.Spec.Containers {
		c := w.ctrs[spec.Name]
		if c.running != nil || c.last != nil {
			return false
		}
	}
	return true
}
