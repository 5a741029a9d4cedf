package processnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs a container's startup probe until it passes, then its
// liveness and readiness probes, as the kubelet does. A startup or liveness
// probe that fails failureThreshold times in a row sends the reason on
// kill; readiness only changes the container's ready flag.
func (w *podWorker) probe(ctx context.Context, c *ctrState, kill chan<- string) {
	if p := c.spec.StartupProbe; p != nil {
		if !w.loopProbe(ctx, c, p, func(ok bool) bool { return ok }) {
			if ctx.Err() == nil {
				kill <- "StartupProbeFailed"
			}
			return
		}
		w.mu.Lock()
		c.started = true
		w.mu.Unlock()
		w.changed()
	}
	if p := c.spec.ReadinessProbe; p != nil {
		go w.loopProbe(ctx, c, p, func(ok bool) bool {
			w.mu.Lock()
			was := c.ready
			c.ready = ok
			w.mu.Unlock()
			if was != ok {
				w.changed()
			}
			return false // never stops: readiness is probed for the container's life
		})
	} else {
		w.mu.Lock()
		c.ready = true
		w.mu.Unlock()
		w.changed()
	}
	if p := c.spec.LivenessProbe; p != nil {
		if !w.loopProbe(ctx, c, p, func(bool) bool { return false }) && ctx.Err() == nil {
			kill <- "LivenessProbeFailed"
		}
	}
}

// loopProbe runs p every period. done is told each result and ends the
// loop (true) when it says so; the loop also ends, returning false, after
// failureThreshold failures in a row (readiness never ends that way: done
// sees the failure instead).
func (w *podWorker) loopProbe(ctx context.Context, c *ctrState, p *corev1.Probe, done func(ok bool) bool) bool {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if w.node.opts.ProbePeriod > 0 {
		period = min(period, w.node.opts.ProbePeriod)
	}
	threshold, success := max(p.FailureThreshold, 1), max(p.SuccessThreshold, 1)
	readiness := p == c.spec.ReadinessProbe
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	fails, oks := int32(0), int32(0)
	for {
		err := w.runProbe(ctx, c, p)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			fails, oks = 0, oks+1
			if oks >= success && done(true) {
				return true
			}
		} else {
			fails, oks = fails+1, 0
			w.node.log.V(1).Info("probe failed", "pod", w.key, "container", c.spec.Name, "error", err.Error())
			w.event(c, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %v", probeKind(c, p), err)
			if fails >= threshold {
				if !readiness {
					w.node.log.Info("probe failed too often", "pod", w.key, "container", c.spec.Name, "failures", fails, "error", err.Error())
					w.event(c, corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.spec.Name, strings.ToLower(probeKind(c, p)))
					return false
				}
				done(false)
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(period):
		}
	}
}

// runProbe runs one probe with its timeout: exec inside the container,
// TCP and HTTP against the pod's address.
func (w *podWorker) runProbe(ctx context.Context, c *ctrState, p *corev1.Probe) error {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w.mu.Lock()
	pid, env := c.pid, c.env
	w.mu.Unlock()
	if pid == 0 {
		return fmt.Errorf("container not running")
	}
	switch {
	case p.Exec != nil:
		uid, gid := w.runAs(c)
		cmd := execIn(pid, uid, gid, env, p.Exec.Command)
		done := make(chan error, 1)
		out := &limitedBuffer{max: 1024}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%w: %s", err, out.String())
			}
			return nil
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if err := <-done; err != nil {
				return fmt.Errorf("probe timed out after %s (%w)", timeout, err)
			}
			return fmt.Errorf("probe timed out after %s", timeout)
		}
	case p.TCPSocket != nil:
		port, err := w.port(c, p.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := w.dialInPod(ctx, "tcp", net.JoinHostPort(w.ip.String(), strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case p.HTTPGet != nil:
		port, err := w.port(c, p.HTTPGet.Port)
		if err != nil {
			return err
		}
		url := fmt.Sprintf("http://%s%s", net.JoinHostPort(w.ip.String(), strconv.Itoa(port)), p.HTTPGet.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for _, h := range p.HTTPGet.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		// No proxy (a kubelet's prober uses none), one connection per probe.
		client := &http.Client{Transport: &http.Transport{DialContext: w.dialInPod, DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			// A kubelet's Event names the status only; the body (the
			// agent's reason) helps whoever reads the node's log.
			body := make([]byte, 256)
			n, _ := io.ReadFull(resp.Body, body)
			return fmt.Errorf("HTTP probe answered %s: %s", resp.Status, strings.TrimSpace(string(body[:n])))
		}
		return nil
	}
	return fmt.Errorf("probe kind not supported by the process node")
}

// runAs is the user and group a container's processes run as.
func (w *podWorker) runAs(c *ctrState) (uid, gid *int64) {
	if sc := w.pod.Spec.SecurityContext; sc != nil {
		uid, gid = sc.RunAsUser, sc.RunAsGroup
	}
	if cs := c.spec.SecurityContext; cs != nil {
		if cs.RunAsUser != nil {
			uid = cs.RunAsUser
		}
		if cs.RunAsGroup != nil {
			gid = cs.RunAsGroup
		}
	}
	return uid, gid
}

// port resolves a probe's port, by number or by the container port's name.
func (w *podWorker) port(c *ctrState, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %s", c.spec.Name, p.StrVal)
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	max int
	b   []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

// probeKind names a probe as the kubelet's Events do.
func probeKind(c *ctrState, p *corev1.Probe) string {
	switch p {
	case c.spec.ReadinessProbe:
		return "Readiness"
	case c.spec.StartupProbe:
		return "Startup"
	}
	return "Liveness"
}

// dialInPod dials addr from inside the pod's network namespace. A kubelet
// reaches its pods over its own node, so a pod cut off from the cluster
// (Partition: its veth down) still answers its probes, as on a node cut
// off from the network; dialled from the host, they would fail and the
// liveness probe would restart the very server a partition test watches.
func (w *podWorker) dialInPod(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(nsPath(w.netns), func() (err error) {
		// The socket is made here, in the pod's namespace, and stays there.
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// inNetns runs fn on a thread in the network namespace pinned at path,
// then puts the thread back in its own namespace before it runs anything
// else. The thread must not end instead (as a goroutine that exits locked
// ends it): a process started with Pdeathsig from that thread earlier (the
// API server, a container) would be killed with it.
func inNetns(path string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("the node's network namespace: %w", err)
			return
		}
		defer own.Close()
		ns, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("the pod's network namespace: %w", err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("entering the pod's network namespace: %w", err)
			return
		}
		err = fn()
		if back := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); back != nil {
			// The thread cannot go back: it stays parked here, locked,
			// running nothing else and never ending.
			done <- errors.Join(err, fmt.Errorf("leaving the pod's network namespace: %w", back))
			select {}
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}
