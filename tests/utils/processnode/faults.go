package processnode

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Faults a test injects into one pod, each undone by its pair. They act
// only on what the node made (the pod's processes and its veth), never on
// the machine's own interfaces.

// Partition cuts the pod off from everyone on the bridge (the operator,
// the API server, clients, the other pods) by taking its veth down; its
// processes keep running and its probes, which run inside the pod or are
// dialled from within its network namespace (as a kubelet reaches its pods
// over its own node), still pass, as on a node cut off from the cluster.
func (n *Node) Partition(namespace, pod string) error { return n.setLink(namespace, pod, "down") }

// Heal undoes Partition.
func (n *Node) Heal(namespace, pod string) error { return n.setLink(namespace, pod, "up") }

func (n *Node) setLink(namespace, pod, state string) error {
	w, err := n.worker(namespace, pod)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ip(ctx, "link", "set", w.veth, state)
}

// Down kills every running container of the pod and starts none again
// until Up: a machine that died under its pod. The pod stays bound and
// reports its containers terminated and not ready, as a kubelet would for
// containers it cannot restart.
func (n *Node) Down(namespace, pod string) error {
	w, err := n.worker(namespace, pod)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.held == nil {
		w.held = make(chan struct{})
	}
	var pids []int
	for _, c := range w.ctrs {
		if c.pid != 0 {
			pids = append(pids, c.pid)
		}
	}
	w.mu.Unlock()
	for _, pid := range pids {
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing the container group %d of %s/%s: %w", pid, namespace, pod, err)
		}
	}
	return nil
}

// Up lets the containers of a pod taken Down start again.
func (n *Node) Up(namespace, pod string) error {
	w, err := n.worker(namespace, pod)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held != nil {
		close(w.held)
		w.held = nil
	}
	return nil
}

// waitUp blocks while the pod is Down (or until ctx ends).
func (w *podWorker) waitUp(ctx context.Context) {
	w.mu.Lock()
	held := w.held
	w.mu.Unlock()
	if held == nil {
		return
	}
	select {
	case <-held:
	case <-ctx.Done():
	}
}
