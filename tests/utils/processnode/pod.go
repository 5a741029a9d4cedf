package processnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podWorker runs one pod: its network namespace, volumes, init containers
// in order, then its containers, each supervised (probes, restarts with
// back-off) until the pod is deleted.
type podWorker struct {
	node  *Node
	key   string
	pod   *corev1.Pod // the spec as first seen (a pod's spec is immutable but for images)
	dir   string
	netns string
	veth  string
	ip    netip.Addr

	mu        sync.Mutex
	started   time.Time
	setupErr  string // why the pod's sandbox could not be made
	initDone  bool
	ctrs      map[string]*ctrState
	finished  bool // every container ended for good (restartPolicy Never/OnFailure)
	statusDue chan struct{}
	// held, while not nil, keeps the containers from starting (Node.Down);
	// closed by Node.Up.
	held chan struct{}

	// Used by the volume refresh only (one goroutine).
	tokens     map[string]saToken
	refreshErr map[string]string
}

// ctrState is what the node knows of one container.
type ctrState struct {
	spec     corev1.Container
	init     bool
	image    Image
	env      []string
	restarts int32
	starts   int // every start, for the log and run directory names
	// createFailures counts failed attempts to create the container.
	createFailures int32
	pid            int
	running        *corev1.ContainerStateRunning
	waiting        *corev1.ContainerStateWaiting
	term           *corev1.ContainerStateTerminated
	last           *corev1.ContainerStateTerminated
	started        bool // startup probe passed (or none)
	ready          bool
}

func newPodWorker(n *Node, pod *corev1.Pod) *podWorker {
	short := string(pod.UID)
	if len(short) > 8 {
		short = short[:8]
	}
	w := &podWorker{node: n, key: pod.Namespace + "/" + pod.Name, pod: pod.DeepCopy(),
		dir:   filepath.Join(n.opts.Dir, "pods", string(pod.UID)),
		netns: n.opts.NamePrefix + "-" + short, veth: n.opts.NamePrefix + short,
		ctrs: map[string]*ctrState{}, statusDue: make(chan struct{}, 1),
		tokens: map[string]saToken{}, refreshErr: map[string]string{}}
	for _, c := range pod.Spec.InitContainers {
		w.ctrs[c.Name] = &ctrState{spec: c, init: true, waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	}
	for _, c := range pod.Spec.Containers {
		w.ctrs[c.Name] = &ctrState{spec: c, waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	}
	return w
}

// changed asks for a status write.
func (w *podWorker) changed() {
	select {
	case w.statusDue <- struct{}{}:
	default:
	}
}

// run sets up the pod and supervises its containers until ctx ends (the pod
// was deleted or the node stops); then it stops them within the grace period.
func (w *podWorker) run(ctx context.Context, stopped chan<- struct{}) {
	defer close(stopped)
	w.mu.Lock()
	w.started = time.Now()
	w.mu.Unlock()
	statusCtx, stopStatus := context.WithCancel(context.Background())
	statusDone := make(chan struct{})
	go w.statusLoop(statusCtx, statusDone)
	defer func() {
		w.teardown()
		w.changed()
		stopStatus()
		<-statusDone
	}()
	if err := w.setUp(ctx); err != nil {
		w.mu.Lock()
		w.setupErr = err.Error()
		w.mu.Unlock()
		w.node.log.Info("pod sandbox failed", "pod", w.key, "error", err.Error())
		w.changed()
		<-ctx.Done()
		return
	}
	w.changed()
	// A volume whose source is missing (a Secret not yet created) keeps the
	// pod waiting, retried as the kubelet does.
	volumes, err := w.volumeDirs(ctx)
	for err != nil {
		w.failAll("ContainerCreating", err.Error()) // as the kubelet: still creating, the mount failed
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.node.opts.BackoffBase):
		}
		volumes, err = w.volumeDirs(ctx)
	}
	// From here on only this goroutine writes the projected volumes.
	go func() {
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(w.node.opts.VolumeSyncPeriod):
				w.refreshVolumes(ctx)
			}
		}
	}()
	for _, c := range w.pod.Spec.InitContainers {
		if !w.runToCompletion(ctx, w.ctrs[c.Name], volumes) {
			<-ctx.Done()
			return
		}
	}
	w.mu.Lock()
	w.initDone = true
	w.mu.Unlock()
	w.changed()
	var wg sync.WaitGroup
	for _, c := range w.pod.Spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.supervise(ctx, w.ctrs[c.Name], volumes)
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		w.mu.Lock()
		w.finished = true
		w.mu.Unlock()
		w.changed()
		<-ctx.Done()
	}
}

// setUp makes the pod's sandbox: directory, network namespace.
func (w *podWorker) setUp(ctx context.Context) error {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	// By incarnation, not by name: a pod deleted forcibly is made again
	// while the earlier one still runs, and the earlier one's teardown
	// must not free the address the new one uses (a third pod then got it
	// too, and both lost their network to the clash).
	addr, err := w.node.net.allocate(string(w.pod.UID))
	if err != nil {
		return err
	}
	w.ip = addr
	return w.node.net.attach(ctx, w.netns, w.veth, addr)
}

func (w *podWorker) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.node.net.detach(ctx, w.netns, w.veth)
	w.node.net.release(string(w.pod.UID))
}

// failAll marks every container waiting with a reason (the pod cannot start).
func (w *podWorker) failAll(reason, msg string) {
	w.mu.Lock()
	for _, c := range w.ctrs {
		c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	}
	w.mu.Unlock()
	w.node.log.Info("pod cannot start", "pod", w.key, "reason", reason, "message", msg)
	w.changed()
}

// restartAfter says whether a container that exited with code should run
// again under the pod's restartPolicy (init containers: until success).
func (w *podWorker) shouldRestart(c *ctrState, code int32) bool {
	switch w.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	if c.init {
		return code != 0
	}
	return true
}

// backoff is the kubelet's: base doubling per restart up to the cap, reset
// once a container ran for ten minutes (here: ten caps).
func (w *podWorker) backoff(restarts int32) time.Duration {
	d := w.node.opts.BackoffBase
	for i := int32(1); i < restarts && d < w.node.opts.BackoffMax; i++ {
		d *= 2
	}
	return min(d, w.node.opts.BackoffMax)
}

// runToCompletion runs an init container until it succeeds (restarting it
// per policy); false when it failed for good or ctx ended.
func (w *podWorker) runToCompletion(ctx context.Context, c *ctrState, volumes map[string]string) bool {
	for ctx.Err() == nil {
		code, ok := w.runOnce(ctx, c, volumes)
		if !ok {
			w.retryCreate(ctx, c)
			continue
		}
		if code == 0 {
			return true
		}
		if !w.shouldRestart(c, code) {
			w.mu.Lock()
			w.finished = true
			w.mu.Unlock()
			w.changed()
			return false
		}
		w.waitBackoff(ctx, c)
	}
	return false
}

// supervise runs a regular container for the pod's lifetime.
func (w *podWorker) supervise(ctx context.Context, c *ctrState, volumes map[string]string) {
	for ctx.Err() == nil {
		w.waitUp(ctx)
		began := time.Now()
		code, ok := w.runOnce(ctx, c, volumes)
		if !ok {
			w.retryCreate(ctx, c)
			continue
		}
		if ctx.Err() != nil || !w.shouldRestart(c, code) {
			return
		}
		if time.Since(began) > 10*w.node.opts.BackoffMax {
			w.mu.Lock()
			c.restarts = 0 // ran long enough: back-off starts over
			w.mu.Unlock()
		}
		w.waitBackoff(ctx, c)
	}
}

// backoffState is the waiting state of a container between restarts.
func (w *podWorker) backoffState(c *ctrState) *corev1.ContainerStateWaiting {
	return &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", w.backoff(c.restarts), c.spec.Name, w.pod.Name)}
}

// retryCreate waits before trying again to create a container that could
// not be created (its waiting reason says why), as the kubelet retries.
func (w *podWorker) retryCreate(ctx context.Context, c *ctrState) {
	w.mu.Lock()
	c.createFailures++
	d := w.backoff(c.createFailures)
	w.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *podWorker) waitBackoff(ctx context.Context, c *ctrState) {
	w.mu.Lock()
	d := w.backoff(c.restarts)
	c.waiting = w.backoffState(c)
	w.mu.Unlock()
	w.changed()
	w.event(c, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", c.spec.Name, w.pod.Name)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// runOnce starts the container, runs its probes, and waits for it to end
// (or for ctx, then stops it within the grace period). It returns the exit
// code; ok is false when the container could not be started at all.
func (w *podWorker) runOnce(ctx context.Context, c *ctrState, volumes map[string]string) (int32, bool) {
	l, err := w.prepare(ctx, c, volumes)
	if err != nil {
		w.mu.Lock()
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		w.mu.Unlock()
		w.node.log.Info("container not started", "pod", w.key, "container", c.spec.Name, "error", err.Error())
		w.event(c, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		w.changed()
		return 0, false
	}
	if l.memory != nil {
		defer l.memory.remove()
	}
	cmd, logf, exited, ok := w.startProcess(ctx, c, l)
	if !ok {
		return 0, false
	}
	startedAt := metav1.Now()
	w.markRunning(c, cmd.Process.Pid, startedAt)
	killedFor, werr := w.waitExit(ctx, c, cmd, exited)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left running in its group
	logf.Close()
	code := exitCode(werr)
	w.markTerminated(ctx, c, l, code, terminationReason(code, l, killedFor), startedAt)
	return code, true
}

// startProcess starts the container's process and waits until the
// container's own command is executed (after the namespaces and mounts are
// made): it is running from that moment. ok is false when it could not be
// started (its waiting state says why); else exited receives the end of the
// process.
func (w *podWorker) startProcess(ctx context.Context, c *ctrState, l *launch) (cmd *exec.Cmd, logf *os.File, exited <-chan error, ok bool) {
	cmd, logf, setupDone, err := l.cmd()
	if err == nil {
		err = cmd.Start()
		l.closeAfterStart.Close()
	}
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		w.mu.Lock()
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}
		w.mu.Unlock()
		w.changed()
		return nil, nil, nil, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case <-setupDone:
		return cmd, logf, done, true
	case werr = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	logf.Close()
	out, _ := os.ReadFile(l.logFile)
	w.mu.Lock()
	c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerError",
		Message: fmt.Sprintf("setting up the container failed (%v): %s", werr, strings.TrimSpace(string(out)))}
	w.mu.Unlock()
	w.node.log.Info("container setup failed", "pod", w.key, "container", c.spec.Name, "error", c.waiting.Message)
	w.changed()
	return nil, nil, nil, false
}

// markRunning records and reports the start of the container's process.
func (w *podWorker) markRunning(c *ctrState, pid int, startedAt metav1.Time) {
	w.mu.Lock()
	c.pid = pid
	c.running, c.waiting, c.term = &corev1.ContainerStateRunning{StartedAt: startedAt}, nil, nil
	c.started = c.spec.StartupProbe == nil
	c.ready = false
	w.mu.Unlock()
	w.node.log.Info("container started", "pod", w.key, "container", c.spec.Name, "pid", pid, "restarts", c.restarts)
	w.event(c, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	w.changed()
}

// waitExit runs the container's probes (none for an init container) until
// its process ends: on its own, stopped because a liveness or startup probe
// failed (killedFor is then the reason), or stopped within the grace period
// when ctx ends. err is what waiting for the process returned.
func (w *podWorker) waitExit(ctx context.Context, c *ctrState, cmd *exec.Cmd, exited <-chan error) (killedFor string, err error) {
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	killed := make(chan string, 1) // a failed liveness or startup probe
	if !c.init {
		go w.probe(probeCtx, c, killed)
	}
	select {
	case err = <-exited:
	case why := <-killed:
		killedFor = why
		err = w.stop(cmd, exited, c, w.graceFor(nil))
	case <-ctx.Done():
		err = w.stop(cmd, exited, c, w.graceFor(w.node.deletionGrace(w.key)))
	}
	return killedFor, err
}

// exitCode is the exit code of a process as the kubelet reports it:
// 128 plus the signal that killed it, and 128 when waiting for it failed.
func exitCode(werr error) int32 {
	var exit *exec.ExitError
	if errors.As(werr, &exit) {
		if st, ok := exit.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int32(st.Signal())
		}
		return int32(exit.ExitCode())
	}
	if werr != nil {
		return 128
	}
	return 0
}

// terminationReason is Completed or Error by the exit code, OOMKilled when
// the memory limit killed it, or killedFor when a probe did.
func terminationReason(code int32, l *launch, killedFor string) string {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	if l.memory != nil && l.memory.oomKilled() {
		reason = "OOMKilled"
	}
	if killedFor != "" {
		reason = killedFor
	}
	return reason
}

// markTerminated records and reports the end of the container's process,
// and its back-off when it is to run again.
func (w *podWorker) markTerminated(ctx context.Context, c *ctrState, l *launch, code int32, reason string, startedAt metav1.Time) {
	msg := w.terminationMessage(c, l)
	w.mu.Lock()
	c.term = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: startedAt, FinishedAt: metav1.Now(),
		ContainerID: fmt.Sprintf("process://%d", c.pid)}
	c.last, c.running, c.ready, c.pid = c.term, nil, false, 0
	if ctx.Err() == nil && w.shouldRestart(c, code) {
		c.restarts++
		c.waiting = w.backoffState(c) // published with the count: never a restart without its state
	}
	w.mu.Unlock()
	w.node.log.Info("container exited", "pod", w.key, "container", c.spec.Name, "exitCode", code, "reason", reason)
	w.changed()
}

// graceFor is the pod's termination grace period, or the deletion's own.
func (w *podWorker) graceFor(deletion *int64) time.Duration {
	if deletion != nil {
		return time.Duration(*deletion) * time.Second
	}
	if g := w.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// stop sends SIGTERM to the container's process group, then SIGKILL when
// the grace period runs out.
func (w *podWorker) stop(cmd *exec.Cmd, exited <-chan error, c *ctrState, grace time.Duration) error {
	pgid := cmd.Process.Pid
	sig := c.image.StopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	w.node.log.Info("stopping container", "pod", w.key, "container", c.spec.Name, "signal", sig.String(), "grace", grace.String())
	// As a container runtime does: the image's stop signal to the main
	// process only (PostgreSQL's SIGINT is a fast shutdown, where the
	// SIGTERM a group would get is a smart one that waits for clients).
	_ = syscall.Kill(pgid, sig)
	select {
	case err := <-exited:
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // stragglers of the group
		return err
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return <-exited
}

// terminationMessage reads what the container wrote to its termination
// message path (at most 4 KiB), or the tail of its log when the policy
// asks for it and the file is empty.
func (w *podWorker) terminationMessage(c *ctrState, l *launch) string {
	b, _ := os.ReadFile(filepath.Join(l.dir, "termination-log"))
	if len(b) == 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		b, _ = os.ReadFile(l.logFile)
		if len(b) > 2048 {
			b = b[len(b)-2048:]
		}
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	return string(b)
}

// logFile is where a container's output goes, one file per start; the one
// before is what `kubectl logs --previous` shows.
func (w *podWorker) logFile(name string, start int) string {
	return filepath.Join(w.dir, "logs", name, fmt.Sprintf("%d.log", start))
}

// prepare resolves the image, environment, command and mounts of one start.
func (w *podWorker) prepare(ctx context.Context, c *ctrState, volumes map[string]string) (*launch, error) {
	img, err := w.node.opts.Images.lookup(c.spec.Image)
	if err != nil {
		return nil, err
	}
	env, vars, err := w.environment(ctx, &c.spec, img)
	if err != nil {
		return nil, err
	}
	command, err := containerCommand(&c.spec, vars)
	if err != nil {
		return nil, err
	}
	c.starts++
	run := filepath.Join(w.dir, "containers", c.spec.Name, fmt.Sprint(c.starts))
	_ = os.RemoveAll(filepath.Join(w.dir, "containers", c.spec.Name, fmt.Sprint(c.starts-1))) // each start gets a fresh writable layer
	hostname, _ := podHostnames(w.pod)
	l := &launch{dir: run, netns: w.netns, hostname: hostname, command: command, env: env,
		workDir: c.spec.WorkingDir, tmpOnTmp: true, logFile: w.logFile(c.spec.Name, c.starts)}
	if err := w.applySecurityContext(l, c); err != nil {
		return nil, err
	}
	// The image's own files first: volumes mount over the image.
	if err := l.bindImageFiles(img, c.spec.Image); err != nil {
		return nil, err
	}
	if err := l.bindVolumes(c.spec.VolumeMounts, volumes); err != nil {
		return nil, err
	}
	if err := l.bindTerminationLog(c.spec.TerminationMessagePath); err != nil {
		return nil, err
	}
	if err := writeImageFiles(filepath.Join(run, "upper"), img, w.etcFiles()); err != nil {
		return nil, err
	}
	// Last: nothing after it can fail and leave the cgroup behind.
	if l.memory, err = w.newMemoryCgroup(&c.spec, c.starts); err != nil {
		return nil, err
	}
	w.mu.Lock()
	c.image, c.env = img, env
	w.mu.Unlock()
	return l, nil
}

// containerCommand is the container's command and arguments, $(VAR)
// references expanded.
func containerCommand(ctr *corev1.Container, vars map[string]string) ([]string, error) {
	command := append(append([]string{}, ctr.Command...), ctr.Args...)
	for i := range command {
		command[i] = expand(command[i], vars)
	}
	if len(command) == 0 {
		return nil, fmt.Errorf("container %s has no command: the process node runs only explicit commands", ctr.Name)
	}
	return command, nil
}

// applySecurityContext sets the user and groups the container runs as and
// whether its root filesystem is read-only; runAsNonRoot refuses root.
func (w *podWorker) applySecurityContext(l *launch, c *ctrState) error {
	l.uid, l.gid = w.runAs(c)
	if sc := c.spec.SecurityContext; sc != nil && sc.ReadOnlyRootFilesystem != nil {
		l.readOnlyRoot = *sc.ReadOnlyRootFilesystem
	}
	if sc := w.pod.Spec.SecurityContext; sc != nil {
		if sc.FSGroup != nil {
			l.groups = append(l.groups, *sc.FSGroup)
		}
		l.groups = append(l.groups, sc.SupplementalGroups...)
	}
	if nonRoot(w.pod, &c.spec) && (l.uid == nil || *l.uid == 0) {
		return fmt.Errorf("container has runAsNonRoot and image will run as root")
	}
	return nil
}

// bindImageFiles mounts the host files the image maps in (Image.Binds),
// read-only.
func (l *launch) bindImageFiles(img Image, ref string) error {
	for target, source := range img.Binds {
		fi, err := os.Stat(source)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		l.mounts = append(l.mounts, mount{source: source, target: target, readOnly: true, file: !fi.IsDir()})
	}
	return nil
}

// bindVolumes mounts the container's volume mounts; a volume at /tmp takes
// the place of the tmpfs /tmp gets otherwise.
func (l *launch) bindVolumes(mounts []corev1.VolumeMount, volumes map[string]string) error {
	for _, m := range mounts {
		mt, err := volumeMount(m, volumes)
		if err != nil {
			return err
		}
		if m.MountPath == "/tmp" {
			l.tmpOnTmp = false
		}
		l.mounts = append(l.mounts, mt)
	}
	return nil
}

// volumeMount is the bind mount of one volume mount; a missing subPath is
// made as a directory.
func volumeMount(m corev1.VolumeMount, volumes map[string]string) (mount, error) {
	src, ok := volumes[m.Name]
	if !ok {
		return mount{}, fmt.Errorf("volume mount %s: the pod has no volume of that name", m.Name)
	}
	mt := mount{source: src, target: m.MountPath, readOnly: m.ReadOnly}
	if m.SubPath == "" {
		return mt, nil
	}
	mt.source = filepath.Join(src, m.SubPath)
	fi, err := os.Stat(mt.source)
	if os.IsNotExist(err) {
		if err := os.MkdirAll(mt.source, 0o755); err != nil {
			return mount{}, err
		}
	} else if err != nil {
		return mount{}, fmt.Errorf("volume mount %s subPath %s: %w", m.Name, m.SubPath, err)
	} else {
		mt.file = !fi.IsDir()
	}
	return mt, nil
}

// bindTerminationLog mounts the termination log, a file of this start's
// own, at the container's termination message path.
func (l *launch) bindTerminationLog(path string) error {
	if path == "" {
		path = "/dev/termination-log"
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	term := filepath.Join(l.dir, "termination-log")
	if err := os.WriteFile(term, nil, 0o666); err != nil {
		return err
	}
	_ = os.Chmod(term, 0o666)
	l.mounts = append(l.mounts, mount{source: term, target: path, file: true})
	return nil
}

func nonRoot(pod *corev1.Pod, c *corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsNonRoot != nil && *pod.Spec.SecurityContext.RunAsNonRoot
}

// etcFiles are the files of /etc a kubelet writes for a pod: its hosts,
// hostname and, under cluster DNS, resolv.conf.
func (w *podWorker) etcFiles() map[string]string {
	hostname, fqdn := podHostnames(w.pod)
	names := hostname
	if fqdn != "" {
		names = fqdn + "\t" + hostname
	}
	files := map[string]string{
		"etc/hosts":    fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", w.ip, names),
		"etc/hostname": hostname + "\n",
	}
	if usesClusterDNS(w.pod) {
		files["etc/resolv.conf"] = resolvConf(w.node.net.nodeIP, w.pod.Namespace)
	}
	return files
}

// writeImageFiles puts into the container's writable layer what the image
// brings and the host lacks (its users, its files) and the pod's own files
// of /etc (etcFiles).
func writeImageFiles(upper string, img Image, etc map[string]string) error {
	write := func(p string, content []byte, mode os.FileMode) error {
		full := filepath.Join(upper, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, content, mode); err != nil {
			return err
		}
		return os.Chmod(full, mode)
	}
	if len(img.Users) > 0 {
		passwd, _ := os.ReadFile("/etc/passwd")
		group, _ := os.ReadFile("/etc/group")
		for _, u := range img.Users {
			parts := strings.Split(u, ":")
			if len(parts) != 4 {
				return fmt.Errorf("image user %q: want name:uid:gid:home", u)
			}
			name, uid, gid, home := parts[0], parts[1], parts[2], parts[3]
			passwd = removeEntries(passwd, name, uid, 2)
			group = removeEntries(group, name, gid, 2)
			passwd = append(passwd, []byte(fmt.Sprintf("%s:x:%s:%s::%s:/bin/sh\n", name, uid, gid, home))...)
			group = append(group, []byte(fmt.Sprintf("%s:x:%s:\n", name, gid))...)
		}
		if err := write("etc/passwd", passwd, 0o644); err != nil {
			return err
		}
		if err := write("etc/group", group, 0o644); err != nil {
			return err
		}
	}
	for p, f := range img.Files {
		if err := write(strings.TrimPrefix(p, "/"), []byte(f.Content), f.Mode); err != nil {
			return err
		}
	}
	for p, content := range etc {
		if err := write(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// removeEntries drops the lines of a passwd or group file whose name
// (field 0) or id (field idField) is taken by an image's own entry.
func removeEntries(file []byte, name, id string, idField int) []byte {
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(file), "\n"), "\n") {
		f := strings.Split(line, ":")
		if len(f) > idField && (f[0] == name || f[idField] == id) {
			continue
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n") + "\n")
}
