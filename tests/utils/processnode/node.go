// Package processnode is a node of the local cluster that runs pods as real
// processes: test and development infrastructure, never linked by the
// operator. It plays the kubelet for the pods bound to its node: each
// container's command runs with the pod's environment (Secrets, ConfigMaps
// and the downward API resolved), in a network namespace of the pod's own
// (a veth to the node's bridge) and a mount namespace of the container's own
// whose root is the host's filesystem seen through an overlay (writes stay
// in the container) with the pod's volumes bind-mounted at their mount
// paths, as the pod's runAsUser and fsGroup. Init containers run in order;
// startup, readiness and liveness probes run and are reported; containers
// restart per restartPolicy with back-off (CrashLoopBackOff); deletion stops
// them within the grace period.
//
// It is not a container runtime: there are no images. Images are mapped to
// what is installed on the host (Images), and the node stands in for the
// parts of an image the host lacks (Image.Files, Image.Users). It must run
// as root (namespaces, mounts, changing user).
package processnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Options configure a node.
type Options struct {
	// Name of the Node object.
	Name string
	// Dir holds the pods' directories and the claims' data.
	Dir string
	// Bridge is the name of the node's bridge; NamePrefix starts the names
	// of the pods' network namespaces and veths (keep it short: interface
	// names have 15 characters). Both must be names only this node uses:
	// leftovers of a crashed run with these names are removed.
	Bridge, NamePrefix string
	// PodCIDR is the pods' subnet; the node takes its first address.
	PodCIDR netip.Prefix
	// APIServer is the API server's address on the host (host:port);
	// pods reach it at the node's address (NodeAddress), port
	// APIServerPort, through KUBERNETES_SERVICE_HOST and _PORT. Unset
	// leaves those variables out. The API server's certificate must name
	// the node's address (localcluster.Options.APIServerAddresses).
	APIServer string
	// Images maps the images pods may use to what runs them here.
	Images Images
	// Labels are added to the Node's own (kubernetes.io/hostname and os/arch).
	Labels map[string]string
	// BackoffBase and BackoffMax bound the restart back-off (the kubelet's
	// 10 s and 5 min by default).
	BackoffBase, BackoffMax time.Duration
	// ProbePeriod, when set, caps every probe's period (faster tests).
	ProbePeriod time.Duration
	// VolumeSyncPeriod is how often ConfigMap and Secret volumes are
	// refreshed (default 2 s).
	VolumeSyncPeriod time.Duration
	// StorageClass, when set, names a StorageClass the node creates and
	// provisions claims of (a directory on this node each); with
	// DefaultStorageClass it is the cluster's default.
	// KubeletPort is where the kubelet API is served on the node's address
	// (default DefaultKubeletPort); KubeletClientCA, when set, is the CA
	// (PEM) whose client certificates it accepts: the API server's.
	KubeletPort         int
	KubeletClientCA     []byte
	StorageClass        string
	DefaultStorageClass bool
	Log                 logr.Logger
}

// Node runs the pods bound to it.
type Node struct {
	opts   Options
	client kubernetes.Interface
	net    *network
	log    logr.Logger

	recorder record.EventRecorder

	// api is the pods' way to the API server (BlockAPI cuts it).
	api apiGate

	mu      sync.Mutex
	workers map[types.UID]*running
	grace   map[string]*int64 // pod key -> the deletion's grace period
	wg      sync.WaitGroup
}

type running struct {
	w       *podWorker
	cancel  context.CancelFunc
	stopped chan struct{}
}

// Start registers the node, sets up its bridge and runs its pods until ctx
// ends; then it stops every pod and removes the bridge. Stop waits for that.
func Start(ctx context.Context, client kubernetes.Interface, opts Options) (*Node, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the process node needs root (network and mount namespaces, changing user)")
	}
	if opts.Name == "" || opts.Dir == "" || opts.Bridge == "" || opts.NamePrefix == "" || !opts.PodCIDR.IsValid() {
		return nil, errors.New("process node: Name, Dir, Bridge, NamePrefix and PodCIDR are required")
	}
	opts.setDefaults()
	n := &Node{opts: opts, client: client, net: newNetwork(opts.Bridge, opts.PodCIDR),
		log: opts.Log.WithValues("node", opts.Name), workers: map[types.UID]*running{}, grace: map[string]*int64{}}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.net.setUp(setupCtx); err != nil {
		return nil, err
	}
	if err := n.startServices(ctx, setupCtx); err != nil {
		_ = n.net.tearDown(setupCtx)
		return nil, err
	}
	var stopEvents func()
	n.recorder, stopEvents = n.newRecorder()
	n.wg.Add(3)
	go func() { defer n.wg.Done(); <-ctx.Done(); stopEvents() }()
	go func() { defer n.wg.Done(); n.heartbeat(ctx) }()
	go func() { defer n.wg.Done(); n.watchPods(ctx) }()
	return n, nil
}

// setDefaults fills in the options left unset.
func (o *Options) setDefaults() {
	if o.BackoffBase == 0 {
		o.BackoffBase = 10 * time.Second
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 5 * time.Minute
	}
	if o.KubeletPort == 0 {
		o.KubeletPort = DefaultKubeletPort
	}
	if o.VolumeSyncPeriod == 0 {
		o.VolumeSyncPeriod = 2 * time.Second
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
}

// startServices starts what the node serves on its bridge (DNS, the API
// server proxy, the kubelet API), registers the Node and starts its volume
// provisioner; they run until ctx ends. setupCtx bounds the registration.
func (n *Node) startServices(ctx, setupCtx context.Context) error {
	// Pods resolve the cluster's names at the node's address.
	if _, err := startDNS(ctx, n.client, n.net.nodeIP, n.log); err != nil {
		return err
	}
	if n.opts.APIServer != "" {
		if err := n.proxyAPIServer(ctx, n.opts.APIServer); err != nil {
			return err
		}
	}
	if err := n.serveKubelet(ctx); err != nil {
		return err
	}
	if err := n.register(setupCtx); err != nil {
		return err
	}
	if n.opts.StorageClass != "" {
		return (&provisioner{n: n, class: n.opts.StorageClass}).start(ctx)
	}
	return nil
}

// Wait blocks until the node has stopped (its context ended) and every pod
// process is gone.
func (n *Node) Wait() {
	n.wg.Wait()
	// The claims' filesystems are unmounted once no pod uses them; their
	// data stays in the node's directory.
	unmountVolumes(filepath.Join(n.opts.Dir, "claims"))
}

// IP is the node's address on its bridge, where pods reach the host.
func (n *Node) IP() netip.Addr { return n.net.nodeIP }

// register creates (or takes over) the Node object, Ready.
func (n *Node) register(ctx context.Context) error {
	labels := map[string]string{"kubernetes.io/hostname": n.opts.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"node.example.com/process-node": "true"}
	for k, v := range n.opts.Labels {
		labels[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Labels: labels}}
	nodes := n.client.CoreV1().Nodes()
	if err := nodes.Delete(ctx, n.opts.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering node %s: %w", n.opts.Name, err)
	}
	// The node controller writes to a new Node too: read again on conflict.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status = n.nodeStatus()
		_, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (n *Node) nodeStatus() corev1.NodeStatus {
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "ProcessNodeReady",
			Message: "the process node runs pods as processes", LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.net.nodeIP.String()}, {Type: corev1.NodeHostName, Address: n.opts.Name}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(n.opts.KubeletPort)}},
		NodeInfo:        corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "process-node", ContainerRuntimeVersion: "process-node://1"},
	}
}

// heartbeat renews the node's Lease and Ready condition so the node
// lifecycle controller keeps it Ready.
func (n *Node) heartbeat(ctx context.Context) {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(hctx, n.opts.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(hctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.opts.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}, metav1.CreateOptions{})
		} else if err == nil {
			l.Spec.RenewTime = &now
			_, err = leases.Update(hctx, l, metav1.UpdateOptions{})
		}
		if err == nil {
			if node, gerr := n.client.CoreV1().Nodes().Get(hctx, n.opts.Name, metav1.GetOptions{}); gerr == nil {
				node.Status.Conditions = n.nodeStatus().Conditions
				_, _ = n.client.CoreV1().Nodes().UpdateStatus(hctx, node, metav1.UpdateOptions{})
			}
		} else if ctx.Err() == nil {
			n.log.Info("node heartbeat failed", "error", err.Error())
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// watchPods starts a worker for each pod bound to the node and stops it
// when the pod is deleted; on ctx's end it stops all of them and removes
// the bridge.
func (n *Node) watchPods(ctx context.Context) {
	lw := cache.NewListWatchFromClient(n.client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", n.opts.Name))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.Pod{}, ResyncPeriod: 30 * time.Second,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { n.sync(ctx, o) },
			UpdateFunc: func(_, o any) { n.sync(ctx, o) },
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				if p, ok := o.(*corev1.Pod); ok {
					go n.forget(p.UID) // not on the informer's goroutine: it waits for the grace period
				}
			},
		},
	})
	informer.Run(ctx.Done())
	n.mu.Lock()
	uids := make([]types.UID, 0, len(n.workers))
	for uid := range n.workers {
		uids = append(uids, uid)
	}
	n.mu.Unlock()
	for _, uid := range uids {
		n.stopPod(uid, false)
	}
	n.mu.Lock()
	for _, r := range n.workers {
		<-r.stopped
	}
	n.mu.Unlock()
	tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.net.tearDown(tctx)
}

// sync reacts to a pod's add or update: start its worker, or stop it when
// the pod is being deleted.
func (n *Node) sync(ctx context.Context, o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok || ctx.Err() != nil {
		return
	}
	if pod.DeletionTimestamp != nil {
		n.mu.Lock()
		n.grace[pod.Namespace+"/"+pod.Name] = pod.DeletionGracePeriodSeconds
		n.mu.Unlock()
		go n.stopPod(pod.UID, true, pod)
		return
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		n.mu.Lock()
		_, known := n.workers[pod.UID]
		n.mu.Unlock()
		if !known {
			return // finished before this node (re)started: nothing to run
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.workers[pod.UID]; ok {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	r := &running{w: newPodWorker(n, pod), cancel: cancel, stopped: make(chan struct{})}
	n.workers[pod.UID] = r
	n.log.Info("starting pod", "pod", r.w.key, "uid", pod.UID)
	go r.w.run(wctx, r.stopped)
}

// deletionGrace is the grace period the pod's deletion asked for, if any.
func (n *Node) deletionGrace(key string) *int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.grace[key]
}

// stopPod stops a pod's worker (its processes within the grace period) and,
// when the pod is being deleted, removes the object as the kubelet does once
// its containers are gone.
func (n *Node) stopPod(uid types.UID, remove bool, pod ...*corev1.Pod) {
	n.mu.Lock()
	r, ok := n.workers[uid]
	n.mu.Unlock()
	if ok {
		r.cancel()
		<-r.stopped
	}
	if remove && len(pod) == 1 {
		p := pod[0]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := n.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			n.log.Info("removing deleted pod", "pod", p.Namespace+"/"+p.Name, "error", err.Error())
		}
		n.mu.Lock()
		delete(n.workers, uid)
		delete(n.grace, p.Namespace+"/"+p.Name)
		n.mu.Unlock()
		if ok {
			n.keepLogs(r.w)
			_ = os.RemoveAll(r.w.dir)
		}
	}
}

// keepLogs keeps a deleted pod's container logs, for a test to read after
// the pod is gone (DeletedLogs): the agent of a stopping pod says there
// what it did.
func (n *Node) keepLogs(w *podWorker) {
	dst := filepath.Join(n.opts.Dir, "deleted", strings.ReplaceAll(w.key, "/", "_")+"_"+string(w.pod.UID))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
		_ = os.Rename(filepath.Join(w.dir, "logs"), dst)
	}
}

// DeletedLogs returns, by pod UID, what a container of the deleted
// incarnations of a pod wrote in its last start.
func (n *Node) DeletedLogs(namespace, pod, container string) map[string][]byte {
	out := map[string][]byte{}
	dirs, _ := filepath.Glob(filepath.Join(n.opts.Dir, "deleted", namespace+"_"+pod+"_*"))
	for _, d := range dirs {
		logs, _ := filepath.Glob(filepath.Join(d, container, "*.log"))
		sort.Strings(logs)
		if len(logs) == 0 {
			continue
		}
		b, err := os.ReadFile(logs[len(logs)-1])
		if err == nil {
			out[strings.TrimPrefix(filepath.Base(d), namespace+"_"+pod+"_")] = b
		}
	}
	return out
}

// Logs returns what a container of a pod on this node wrote to its stdout
// and stderr: of its current (or last) start, or with previous of the
// start before, as `kubectl logs [--previous]` shows them.
func (n *Node) Logs(namespace, pod, container string, previous bool) ([]byte, error) {
	path, _, err := n.logPath(namespace, pod, container, previous)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// logPath is the log file of a container's current (or last) start, or
// with previous of the start before, and its worker.
func (n *Node) logPath(namespace, pod, container string, previous bool) (string, *podWorker, error) {
	w, err := n.worker(namespace, pod)
	if err != nil {
		return "", nil, err
	}
	entries, err := os.ReadDir(filepath.Join(w.dir, "logs", container))
	if err != nil {
		return "", nil, fmt.Errorf("container %s of pod %s/%s has not started", container, namespace, pod)
	}
	var starts []int
	for _, e := range entries {
		if i, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log")); err == nil {
			starts = append(starts, i)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(starts)))
	i := 0
	if previous {
		i = 1
	}
	if len(starts) <= i {
		return "", nil, fmt.Errorf("previous terminated container %s of pod %s/%s not found", container, namespace, pod)
	}
	return w.logFile(container, starts[i]), w, nil
}

// Exec runs a command in a running container (its namespaces, root, user
// and environment) and returns its combined output, as `kubectl exec` does.
func (n *Node) Exec(namespace, pod, container string, command []string) ([]byte, error) {
	cmd, err := n.execCommand(namespace, pod, container, command)
	if err != nil {
		return nil, err
	}
	out := &limitedBuffer{max: 1 << 20}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(time.Minute, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	err = cmd.Wait()
	return out.b, err
}

// execCommand is a command to run in a running container: its namespaces,
// root, user and environment.
func (n *Node) execCommand(namespace, pod, container string, command []string) (*exec.Cmd, error) {
	w, err := n.worker(namespace, pod)
	if err != nil {
		return nil, err
	}
	if len(command) == 0 {
		return nil, errors.New("no command to run")
	}
	w.mu.Lock()
	c, ok := w.ctrs[container]
	var pid int
	var env []string
	if ok {
		pid, env = c.pid, c.env
	}
	w.mu.Unlock()
	if !ok || pid == 0 {
		return nil, fmt.Errorf("container %s of pod %s/%s is not running", container, namespace, pod)
	}
	uid, gid := w.runAs(c)
	return execIn(pid, uid, gid, env, command), nil
}

// forget stops the worker of a pod that is gone (deleted with no grace, or
// missed while deleting) and drops what the node kept of it.
func (n *Node) forget(uid types.UID) {
	n.stopPod(uid, false)
	n.mu.Lock()
	r, ok := n.workers[uid]
	delete(n.workers, uid)
	if ok {
		delete(n.grace, r.w.key)
	}
	n.mu.Unlock()
	if ok {
		n.keepLogs(r.w)
		_ = os.RemoveAll(r.w.dir)
	}
}

// worker finds the running worker of a pod by name (not one that stopped:
// a StatefulSet's pod made again has the same name).
func (n *Node) worker(namespace, pod string) (*podWorker, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range n.workers {
		select {
		case <-r.stopped:
			continue
		default:
		}
		if r.w.key == namespace+"/"+pod {
			return r.w, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s does not run on node %s", namespace, pod, n.opts.Name)
}
