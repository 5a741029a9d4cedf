package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The agent is the container's first process: every process whose parent
// dies is handed to it (PID 1, and a child subreaper where it is not PID 1),
// the backends of a server it killed among them. It reaps those orphans
// when they exit, or they would stay zombies for the container's life. The
// server's own process is left to its exec.Cmd.

// becomeSubreaper makes orphans of the agent's descendants its children.
func becomeSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// waited are the agent's other children an exec.Cmd waits for (a physical
// backup's mariadb-backup): the reaper leaves them to it, or Wait would
// find no child and fail a good backup.
var waited sync.Map

// reapLoop reaps, every second, the agent's exited children other than
// the server's process (keep returns it, or 0) and those in waited.
func reapLoop(ctx context.Context, keep func() int) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		for _, pid := range zombieChildren(os.Getpid()) {
			if _, own := waited.Load(pid); pid != keep() && !own {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
		}
	}
}

// zombieChildren lists parent's children that have exited and wait to be
// reaped, from /proc.
func zombieChildren(parent int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 2 || string(f[0]) != "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(string(f[1])); err == nil && ppid == parent {
			out = append(out, pid)
		}
	}
	return out
}
