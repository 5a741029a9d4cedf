package processnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// memoryCgroup is the memory cgroup of one container start, which holds its
// memory limit (resources.limits.memory): the kernel's OOM killer ends a
// container that goes over it, and the node reports OOMKilled. Both cgroup
// versions are handled: v2 (memory.max, memory.events) and v1's memory
// controller (memory.limit_in_bytes, memory.oom_control).
type memoryCgroup struct {
	dir string
	v2  bool
}

// cgroupRoot finds the memory cgroup hierarchy: v2's unified one when it
// has the memory controller, else v1's memory controller.
func cgroupRoot() (dir string, v2 bool, ok bool) {
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "memory") {
		return "/sys/fs/cgroup", true, true
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		return "/sys/fs/cgroup/memory", false, true
	}
	return "", false, false
}

// newMemoryCgroup makes the cgroup of a container start with its limit. It
// returns nil when the container has no memory limit; an error when it has
// one the host cannot enforce (no memory cgroup): a limit is never dropped
// silently.
func (w *podWorker) newMemoryCgroup(c *corev1.Container, start int) (*memoryCgroup, error) {
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || limit.IsZero() {
		return nil, nil
	}
	root, v2, ok := cgroupRoot()
	if !ok {
		return nil, fmt.Errorf("container %s has a memory limit and this host has no memory cgroup to enforce it", c.Name)
	}
	dir := filepath.Join(root, "dbop-"+w.node.opts.Name, string(w.pod.UID), fmt.Sprintf("%s-%d", c.Name, start))
	if v2 {
		// Controllers are enabled for children level by level.
		for d := root; d != dir; {
			rel, _ := filepath.Rel(d, dir)
			next := filepath.Join(d, strings.Split(rel, string(filepath.Separator))[0])
			if err := os.MkdirAll(next, 0o755); err != nil {
				return nil, err
			}
			if next != dir {
				_ = os.WriteFile(filepath.Join(next, "cgroup.subtree_control"), []byte("+memory"), 0o644)
			}
			d = next
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bytes := strconv.FormatInt(limit.Value(), 10)
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(bytes), 0o644); err != nil {
		return nil, fmt.Errorf("setting the memory limit of container %s: %w", c.Name, err)
	}
	if v2 {
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
	} else {
		// Swap must not stretch the limit (where swap is accounted).
		_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(bytes), 0o644)
	}
	return &memoryCgroup{dir: dir, v2: v2}, nil
}

// procs is the file a process writes its pid to, to join the cgroup.
func (m *memoryCgroup) procs() string { return filepath.Join(m.dir, "cgroup.procs") }

// oomKilled reports whether the kernel's OOM killer killed a process of
// the cgroup.
func (m *memoryCgroup) oomKilled() bool {
	file := "memory.oom_control"
	if m.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(m.dir, file))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
			return true
		}
	}
	return false
}

// remove deletes the cgroup once its processes are gone (killed ones
// leave it a moment after the signal), and the pod's and node's levels
// above it when they are empty.
func (m *memoryCgroup) remove() {
	for i := 0; i < 50; i++ {
		if err := os.Remove(m.dir); err == nil || os.IsNotExist(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for d := filepath.Dir(m.dir); strings.Contains(d, "/dbop-"); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			return
		}
	}
}
