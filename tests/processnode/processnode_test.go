// Package processnode_test runs pods on the process node against the real
// local control plane: the pod spec is what runs (command, environment,
// volumes, user, probes, restarts), and what the node reports is what
// happened.
package processnode_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"example.com/database-operator/tests/utils/localcluster"
	"example.com/database-operator/tests/utils/processnode"
)

const (
	nodeName = "process-node-0"
	// sizedClass is the node's own storage class: claims of a real size.
	sizedClass = "process-node"
)

var (
	cs   kubernetes.Interface
	node *processnode.Node
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin := os.Getenv("LOCAL_CLUSTER_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "LOCAL_CLUSTER_BIN is not set: run these tests with `make test-integration`")
		return 1
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the process node needs root")
		return 1
	}
	dir, err := os.MkdirTemp("", "dbop-pn-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: bin, Dir: filepath.Join(dir, "cluster"), Nodes: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting local cluster:", err)
		cancel()
		return 1
	}
	defer c.Stop()
	cs = kubernetes.NewForConfigOrDie(c.Config)
	logf, _ := os.Create(filepath.Join(dir, "node.log"))
	node, err = processnode.Start(ctx, cs, processnode.Options{
		Name: nodeName, Dir: filepath.Join(dir, "node"), Bridge: "dbop-pnt0", NamePrefix: "pnt",
		PodCIDR: netip.MustParsePrefix("10.251.0.0/24"),
		Images: processnode.Images{
			// The host's own userland stands for a plain Debian image.
			"debian:12": {},
		},
		BackoffBase: time.Second, BackoffMax: 4 * time.Second, ProbePeriod: time.Second,
		StorageClass: sizedClass,
		Log:          funcr.New(func(prefix, args string) { fmt.Fprintln(logf, prefix, args) }, funcr.Options{}),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting process node:", err)
		cancel()
		return 1
	}
	code := m.Run()
	cancel()
	node.Wait()
	if code != 0 {
		log, _ := os.ReadFile(filepath.Join(dir, "node.log"))
		fmt.Fprintf(os.Stderr, "process node log:\n%s\n", log)
	}
	return code
}

// namespaces maps a test to its namespace: one per test run, so -count=N
// never reuses one that is still terminating.
var namespaces sync.Map

// testNamespace is a namespace of the test's own, deleted after it.
func testNamespace(t *testing.T) string {
	t.Helper()
	if ns, ok := namespaces.Load(t); ok {
		return ns.(string)
	}
	ns := strings.Trim(strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), "-")
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = fmt.Sprintf("%s-%d", ns, time.Now().UnixNano()%100000)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	namespaces.Store(t, ns)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	return ns
}

// newPod is a pod for the process node in the test's namespace.
func newPod(t *testing.T, name string, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	ns := testNamespace(t)
	ctx := context.Background()
	spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeName}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}}, Spec: spec}
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitPod waits until cond holds for the pod, or fails with the last status.
func waitPod(t *testing.T, pod *corev1.Pod, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s: %s not reached in %s; status: %+v", pod.Name, what, timeout, last.Status)
	return nil
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func logs(t *testing.T, p *corev1.Pod, previous bool) string {
	t.Helper()
	b, err := node.Logs(p.Namespace, p.Name, "main", previous)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPodRunsItsSpec: the environment (literal, Secret, ConfigMap,
// downward API, $(VAR) expansion), an init container writing into an
// emptyDir the container reads, a ConfigMap volume that follows updates, the
// pod's user and fsGroup, its own network namespace and hostname, a
// readiness probe that gates Ready, and the files the node stands in for.
func TestPodRunsItsSpec(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data: map[string][]byte{"password": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data: map[string]string{"mode": "first", "greeting": "hello"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	script := `echo "user=$(id -u) groups=$(id -G) greeting=$GREETING password=$PASSWORD index=$POD_INDEX name=$POD_NAME"
echo "hostname=$(hostname)"
cat /work/from-init
ip -o -4 addr show eth0 | awk '{print "eth0=" $4}'
touch /work/ready-by-main 2>&1 && echo "emptyDir writable"
ls -ld /work | awk '{print "work group=" $4}'
echo probe-gate > /tmp/gate
while true; do echo "mode=$(cat /config/mode)" > /tmp/mode; sleep 0.2; done`
	pod := newPod(t, "spec-1", corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](4242), RunAsGroup: ptr.To[int64](4242), FSGroup: ptr.To[int64](5151),
			RunAsNonRoot: ptr.To(true)},
		InitContainers: []corev1.Container{{Name: "init", Image: "debian:12", Command: []string{"sh", "-c", "echo written-by-init > /work/from-init"},
			VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}}},
		Containers: []corev1.Container{{Name: "main", Image: "debian:12", Command: []string{"sh", "-c", script},
			Env: []corev1.EnvVar{
				{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}, Key: "greeting"}}},
				{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "POD_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}, {Name: "config", MountPath: "/config", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", `test "$(cat /tmp/gate)" = probe-gate && test "$PASSWORD" = s3cret`}}},
				PeriodSeconds: 1},
		}},
		Volumes: []corev1.Volume{
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
		},
	})
	pod = waitPod(t, pod, "Ready", 60*time.Second, ready)
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		t.Fatalf("phase %s, podIP %q", pod.Status.Phase, pod.Status.PodIP)
	}
	if s := pod.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init container status: %+v", s)
	}
	out := logs(t, pod, false)
	for _, want := range []string{
		"user=4242 groups=4242 5151 greeting=hello password=s3cret index=spec-1 name=spec-1",
		"hostname=spec-1",
		"written-by-init",
		"eth0=" + pod.Status.PodIP + "/24",
		"emptyDir writable",
		"work group=5151",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	// A ConfigMap change reaches the mounted volume.
	cm.Data["mode"] = "second"
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := node.Exec(pod.Namespace, pod.Name, "main", []string{"cat", "/tmp/mode"})
		if err == nil && strings.TrimSpace(string(b)) == "mode=second" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap update did not reach the volume: %q %v", b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The container's writes stay in the container: the host is untouched.
	if _, err := os.Stat("/tmp/gate"); err == nil {
		t.Error("a file the container wrote to its /tmp appeared on the host")
	}
}

// TestReadOnlyRootFilesystem: with readOnlyRootFilesystem only the
// container's volumes take writes; /tmp without a volume is read-only too,
// as under a container runtime.
func TestReadOnlyRootFilesystem(t *testing.T) {
	script := `for f in /etc/written /tmp/written /work/written; do
	if touch "$f" 2>/dev/null; then echo "$f writable"; else echo "$f read-only"; fi
done
sleep infinity`
	pod := newPod(t, "rofs", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "debian:12", Command: []string{"sh", "-c", script},
		SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)},
		VolumeMounts:    []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}}},
		Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}})
	waitPod(t, pod, "Running", 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	var out string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(out, "/work/"); time.Sleep(200 * time.Millisecond) {
		out = logs(t, pod, false)
	}
	for _, want := range []string{"/etc/written read-only", "/tmp/written read-only", "/work/written writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
}

// TestCrashLoopBackOff: a container that keeps failing is restarted with
// back-off; its exit code, termination message and the previous start's
// log are reported.
func TestCrashLoopBackOff(t *testing.T) {
	pod := newPod(t, "crash", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "debian:12",
		Command: []string{"sh", "-c", `echo "start $(date +%s%N)"; echo "bad config" > /dev/termination-log; exit 3`}}}})
	pod = waitPod(t, pod, "CrashLoopBackOff after 2 restarts", 60*time.Second, func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 1 && s[0].RestartCount >= 2 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.ExitCode != 3 || last.Reason != "Error" || strings.TrimSpace(last.Message) != "bad config" {
		t.Fatalf("last termination: %+v", last)
	}
	if ready(pod) || pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("a crash-looping pod is %s, ready %v", pod.Status.Phase, ready(pod))
	}
	waitEvent(t, pod, "BackOff", "Back-off restarting failed container main")
	cur, prev := logs(t, pod, false), logs(t, pod, true)
	if !strings.HasPrefix(prev, "start ") || cur == prev {
		t.Fatalf("previous log %q, current %q: want two different starts", prev, cur)
	}
}

// TestRestartPolicyNever: a pod that must not restart ends Succeeded or
// Failed with its exit code.
func TestRestartPolicyNever(t *testing.T) {
	ok := newPod(t, "ok", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: "debian:12", Command: []string{"true"}}}})
	waitPod(t, ok, "Succeeded", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	bad := newPod(t, "bad", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: "debian:12", Command: []string{"sh", "-c", "exit 7"}}}})
	p := waitPod(t, bad, "Failed", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if s := p.Status.ContainerStatuses[0]; s.State.Terminated == nil || s.State.Terminated.ExitCode != 7 || s.RestartCount != 0 {
		t.Fatalf("status: %+v", s)
	}
}

// TestMemoryLimit: a container that goes over its memory limit is killed
// by the kernel and reported OOMKilled; one under it runs to completion
// with the limit in place.
func TestMemoryLimit(t *testing.T) {
	limits := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}
	// 200 MB held in a shell variable: one process (head's buffer is small).
	greedy := newPod(t, "greedy", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: "debian:12", Resources: limits,
			Command: []string{"sh", "-c", `x="$(head -c 200000000 /dev/urandom)"; echo survived`}}}})
	p := waitPod(t, greedy, "Failed", 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if s := p.Status.ContainerStatuses[0].State.Terminated; s == nil || s.Reason != "OOMKilled" || s.ExitCode != 137 {
		t.Fatalf("over its limit: %+v, want OOMKilled with exit code 137", s)
	}
	modest := newPod(t, "modest", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: "debian:12", Resources: limits,
			Command: []string{"sh", "-c", `x="$(head -c 1000000 /dev/urandom)"; echo survived`}}}})
	waitPod(t, modest, "Succeeded", 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if out := logs(t, modest, false); !strings.Contains(out, "survived") {
		t.Fatalf("under its limit: log %q", out)
	}
}

// TestLivenessProbeRestarts: a container whose liveness probe fails is
// killed and started again.
func TestLivenessProbeRestarts(t *testing.T) {
	pod := newPod(t, "live", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "debian:12",
		Command: []string{"sh", "-c", "touch /tmp/alive; sleep 2; rm /tmp/alive; exec sleep 1000"},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/alive"}}},
			PeriodSeconds: 1, FailureThreshold: 2}}}})
	pod = waitPod(t, pod, "restarted by liveness", 60*time.Second, func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 1 && s[0].RestartCount >= 1
	})
	if last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.Reason != "LivenessProbeFailed" {
		t.Fatalf("last termination: %+v", last)
	}
	waitEvent(t, pod, "Unhealthy", "Liveness probe failed")
	waitEvent(t, pod, "Killing", "failed liveness probe, will be restarted")
}

// TestProbesReachAPartitionedPod: a pod cut off from the cluster
// (Partition) still answers its HTTP and TCP probes, which a kubelet sends
// over its own node: it stays ready and is not restarted. (Dialled from the
// host, they failed, and the liveness probe restarted the server that a
// partition test watches.)
func TestProbesReachAPartitionedPod(t *testing.T) {
	// perl-base is in every Debian: a one-line HTTP server.
	server := `use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die $!;
while (my $c = $s->accept) { while (<$c>) { last if /^\r?\n$/ } print $c "HTTP/1.0 200 OK\r\n\r\nok\n"; close $c }`
	probe := func(h corev1.ProbeHandler) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 2}
	}
	pod := newPod(t, "cut", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "debian:12",
		Command:        []string{"perl", "-e", server},
		ReadinessProbe: probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}),
		LivenessProbe:  probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}})}}})
	pod = waitPod(t, pod, "Ready", 60*time.Second, ready)
	// A liveness probe may have found perl not yet listening.
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	if err := node.Partition(pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Heal(pod.Namespace, pod.Name) })
	// Three times the failure threshold: a failing probe would have
	// turned it unready and restarted it.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := p.Status.ContainerStatuses; !ready(p) || len(s) != 1 || s[0].RestartCount != restarts {
			t.Fatalf("partitioned: ready %v, containers %+v: its probes failed", ready(p), s)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestImageWithoutLocalMatch: a pod whose image the node cannot run waits
// with a reason that says so.
func TestImageWithoutLocalMatch(t *testing.T) {
	pod := newPod(t, "noimage", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "postgres:99", Command: []string{"true"}}}})
	p := waitPod(t, pod, "waiting with a reason", 30*time.Second, func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 1 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CreateContainerConfigError"
	})
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "postgres:99 has no local match") {
		t.Fatalf("message %q", msg)
	}
}

// TestClaimOutlivesPod: a PersistentVolumeClaim's data is there for the
// next pod; deletion stops the container within its grace period (the
// TERM trap runs) and removes the pod.
func TestClaimOutlivesPod(t *testing.T) {
	ctx := context.Background()
	spec := func(cmd string) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "debian:12", Command: []string{"sh", "-c", cmd},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}
	}
	ns := testNamespace(t)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ws := spec(`trap 'echo stopped-by-term > /var/lib/data/stop; exit 0' TERM; echo kept > /var/lib/data/file; while true; do sleep 0.1; done`)
	// Ready once the trap is set and the file written: deleting it earlier
	// would stop the shell before it did either.
	ws.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/var/lib/data/file"}}}, PeriodSeconds: 1}
	w := newPod(t, "writer-1", ws)
	w = waitPod(t, w, "Ready", 30*time.Second, ready)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, w.Name, metav1.GetOptions{}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted pod still there")
		}
		time.Sleep(200 * time.Millisecond)
	}
	r := newPod(t, "reader-1", spec(`cat /var/lib/data/file /var/lib/data/stop; exec sleep 1000`))
	r = waitPod(t, r, "Ready", 30*time.Second, ready)
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(logs(t, r, false), "kept\nstopped-by-term") {
		if time.Now().After(deadline) {
			t.Fatalf("the next pod does not find the claim's data: %q", logs(t, r, false))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestVolumeSizeIsEnforced: a claim of the node's class is a filesystem of
// the claim's size: writing past it fails with ENOSPC, and growing the
// claim grows the filesystem under the running pod.
func TestVolumeSizeIsEnforced(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "small"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(sizedClass),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Writes 48 MiB a file at a time until asked, and says how it went.
	pod := newPod(t, "filler", corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "debian:12",
		Command: []string{"sh", "-c", `fill() { rm -f /data/f*; for i in 1 2 3 4 5 6; do dd if=/dev/zero of=/data/f$i bs=1M count=8 2>/dev/null || { echo "full at $i"; return; }; done; echo "wrote all"; }
fill; while [ ! -e /tmp/again ]; do sleep 0.2; done; fill; exec sleep 1000`},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "small"}}}}})
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; log: %q", what, logs(t, pod, false))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	pod = waitPod(t, pod, "Running", 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	eventually("the first fill", func() bool { return strings.Contains(logs(t, pod, false), "full at") })
	if out := logs(t, pod, false); strings.Contains(out, "wrote all") {
		t.Fatalf("48 MiB fit on a 32 MiB claim: %q", out)
	}
	// Grow the claim to 128 MiB, as the operator's resize does.
	pvc, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("128Mi")
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pending *corev1.PersistentVolumeClaimCondition
	eventually("the claim's capacity to grow", func() bool {
		cur, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for i, c := range cur.Status.Conditions {
			if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending {
				pending = &cur.Status.Conditions[i]
			}
		}
		q := cur.Status.Capacity[corev1.ResourceStorage]
		return pending != nil || q.Cmp(resource.MustParse("128Mi")) == 0
	})
	if pending != nil {
		// Growing a mounted ext4 needs CAP_SYS_RESOURCE; where root lacks it
		// the claim must say so rather than claim a size it does not have.
		if !strings.Contains(pending.Message, "resize2fs") {
			t.Fatalf("resize pending without its cause: %+v", pending)
		}
		t.Logf("the size is enforced; growing it is not possible on this host: %s", pending.Message)
		return
	}
	if _, err := node.Exec(ns, "filler", "main", []string{"touch", "/tmp/again"}); err != nil {
		t.Fatal(err)
	}
	eventually("the second fill", func() bool { return strings.Count(logs(t, pod, false), "\n") >= 2 })
	if out := logs(t, pod, false); !strings.HasSuffix(out, "wrote all\n") {
		t.Fatalf("48 MiB did not fit once the claim grew to 128 MiB: %q", out)
	}
}

// waitEvent waits for an Event about the pod from the node's kubelet with
// the reason and a message containing text.
func waitEvent(t *testing.T, pod *corev1.Pod, reason, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var seen []string
	for time.Now().Before(deadline) {
		list, err := cs.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
		if err != nil {
			t.Fatal(err)
		}
		seen = seen[:0]
		for _, e := range list.Items {
			if e.Reason == reason && e.Source.Component == "kubelet" && e.Source.Host == nodeName && strings.Contains(e.Message, text) {
				return
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s Event with %q for %s; seen %q", reason, text, pod.Name, seen)
}
