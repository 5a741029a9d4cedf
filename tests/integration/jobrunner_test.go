package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/database-operator/internal/controller"
)

// jobRunner plays the kubelet for the operator's backup and restore Job
// pods, which kwok only marks Running (localcluster's KeepRunning): it runs
// the pod's container command (the manager binary this test built, with
// the pod's own arguments and environment, Secrets resolved), maps the
// pod's volumes to directories (a PersistentVolumeClaim keeps its directory
// across pods, as a volume would), and writes the outcome into the pod's
// status as a kubelet does: the container's terminated state with its exit
// code and termination message, and the pod's phase. The Job controller
// then completes or fails the Job. The host the program is given (a pod's
// DNS name) is mapped to that pod's real server, as the operator's resolver
// maps pods in these tests.
type jobRunner struct {
	client  client.Client
	binary  string
	servers *serverRegistry
	dir     string

	mu      sync.Mutex
	started map[string]bool
	// hold, when set for a Job name, keeps its pod running until released
	// (a test that needs a backup in progress).
	hold map[string]chan struct{}
}

func newJobRunner(c client.Client, binary string, servers *serverRegistry, dir string) *jobRunner {
	return &jobRunner{client: c, binary: binary, servers: servers, dir: dir, started: map[string]bool{}, hold: map[string]chan struct{}{}}
}

// holdJob keeps the pod of the named Job running until the returned
// function is called.
func (j *jobRunner) holdJob(job string) (release func()) {
	ch := make(chan struct{})
	j.mu.Lock()
	j.hold[job] = ch
	j.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// claimDir is where a claim's data lives.
func (j *jobRunner) claimDir(namespace, claim string) string {
	return filepath.Join(j.dir, "volumes", namespace, claim)
}

func (j *jobRunner) loop(ctx context.Context) {
	for ctx.Err() == nil {
		pods := &corev1.PodList{}
		if err := j.client.List(ctx, pods, client.MatchingLabels{"app.kubernetes.io/name": controller.JobAppName}); err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Status.Phase != corev1.PodRunning || !p.DeletionTimestamp.IsZero() {
					continue
				}
				j.mu.Lock()
				seen := j.started[string(p.UID)]
				j.started[string(p.UID)] = true
				j.mu.Unlock()
				if !seen {
					go j.run(ctx, p.DeepCopy())
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (j *jobRunner) run(ctx context.Context, pod *corev1.Pod) {
	j.mu.Lock()
	hold := j.hold[pod.Labels["batch.kubernetes.io/job-name"]]
	j.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return
		}
	}
	ctr := pod.Spec.Containers[0]
	code, message, err := j.exec(ctx, pod, ctr)
	if err != nil {
		code, message = 128, "test kubelet: "+err.Error()
	}
	now := metav1.Now()
	reason, phase := "Completed", corev1.PodSucceeded
	if code != 0 {
		reason, phase = "Error", corev1.PodFailed
	}
	for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
		cur := &corev1.Pod{}
		if err := j.client.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return
		}
		cur.Status.Phase = phase
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ctr.Name, Image: ctr.Image, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason, Message: message, StartedAt: now, FinishedAt: metav1.Now()}}}}
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == corev1.PodReady || cur.Status.Conditions[i].Type == corev1.ContainersReady {
				cur.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		if err := j.client.Status().Update(ctx, cur); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs one container the way a kubelet would and returns its exit
// code and termination message.
func (j *jobRunner) exec(ctx context.Context, pod *corev1.Pod, ctr corev1.Container) (int, string, error) {
	if len(ctr.Command) == 0 || !strings.HasSuffix(ctr.Command[0], "/manager") {
		return 0, "", fmt.Errorf("container %s does not run the manager binary: %v", ctr.Name, ctr.Command)
	}
	root := filepath.Join(j.dir, "pods", string(pod.UID))
	paths := map[string]string{} // mount path -> host directory
	for _, m := range ctr.VolumeMounts {
		host, err := j.volume(ctx, pod, m.Name, root)
		if err != nil {
			return 0, "", err
		}
		paths[m.MountPath] = host
	}
	termination := filepath.Join(root, "termination-log")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return 0, "", err
	}
	paths[ctr.TerminationMessagePath] = termination
	rewrite := func(v string) string {
		for mount, host := range paths {
			if v == mount || strings.HasPrefix(v, mount+"/") {
				return host + strings.TrimPrefix(v, mount)
			}
		}
		return v
	}
	var args []string
	for _, a := range append(ctr.Command[1:], ctr.Args...) {
		name, value, ok := strings.Cut(a, "=")
		switch {
		case ok && name == "--host":
			// <pod>.<service>.<namespace>.svc -> that pod's server on loopback.
			target := strings.SplitN(value, ".", 2)[0]
			ep, err := j.servers.resolve(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: target}}, 0)
			if err != nil {
				ep.Host, ep.Port = "127.0.0.1", 1 // unreachable, as a missing pod would be
			}
			args = append(args, "--host="+ep.Host, "--port="+strconv.Itoa(ep.Port))
		case ok && name == "--port":
			// Replaced with --host.
		case ok:
			args = append(args, name+"="+rewrite(value))
		default:
			args = append(args, rewrite(a))
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range ctr.Env {
		v := e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			s := &corev1.Secret{}
			if err := j.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.SecretKeyRef.Name}, s); err != nil {
				return 0, "", fmt.Errorf("env %s: %w", e.Name, err)
			}
			v = string(s.Data[ref.SecretKeyRef.Key])
		}
		env = append(env, e.Name+"="+v)
	}
	cmd := exec.CommandContext(ctx, j.binary, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		return 0, "", err
	}
	_ = os.WriteFile(filepath.Join(root, "output"), out, 0o644)
	msg, _ := os.ReadFile(termination)
	return code, string(msg), nil
}

// volume makes the directory of one pod volume.
func (j *jobRunner) volume(ctx context.Context, pod *corev1.Pod, name, root string) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != name {
			continue
		}
		switch {
		case v.PersistentVolumeClaim != nil:
			dir := j.claimDir(pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			return dir, os.MkdirAll(dir, 0o755)
		case v.EmptyDir != nil:
			dir := filepath.Join(root, "empty", name)
			return dir, os.MkdirAll(dir, 0o755)
		case v.Secret != nil:
			dir := filepath.Join(root, "secret", name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", err
			}
			s := &corev1.Secret{}
			if err := j.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.Secret.SecretName}, s); err != nil {
				return "", fmt.Errorf("volume %s: %w", name, err)
			}
			for _, item := range v.Secret.Items {
				if err := os.WriteFile(filepath.Join(dir, item.Path), s.Data[item.Key], 0o600); err != nil {
					return "", err
				}
			}
			return dir, nil
		}
		return "", fmt.Errorf("volume %s: kind not supported by the test kubelet", name)
	}
	return "", fmt.Errorf("pod %s has no volume %s", pod.Name, name)
}
