package processnode

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// newRecorder records Events as the kubelet does (source "kubelet" on this
// node), so `kubectl describe pod` and `kubectl get events` show what
// happened to a container: Created, Started, Failed, Unhealthy, Killing,
// BackOff. The broadcaster aggregates repeats, as the kubelet's does.
func (n *Node) newRecorder() (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: n.client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: n.opts.Name}), b.Shutdown
}

// event records an Event about a container of the worker's pod.
func (w *podWorker) event(c *ctrState, typ, reason, format string, args ...any) {
	if w.node.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: w.pod.Namespace, Name: w.pod.Name, UID: w.pod.UID,
		ResourceVersion: w.pod.ResourceVersion}
	if c != nil {
		ref.FieldPath = fmt.Sprintf("spec.containers{%s}", c.spec.Name)
		if c.init {
			ref.FieldPath = fmt.Sprintf("spec.initContainers{%s}", c.spec.Name)
		}
	}
	w.node.recorder.Eventf(ref, typ, reason, format, args...)
}
