package processnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mount is one bind mount into a container's root filesystem.
type mount struct {
	source, target string
	readOnly       bool
	file           bool // a single file (subPath of a file, the termination log)
}

// launch describes one start of one container.
type launch struct {
	dir      string // the start's own directory: overlay upper and work, root mount point
	netns    string
	hostname string
	command  []string // command and arguments, already expanded
	env      []string
	workDir  string
	uid, gid *int64
	groups   []int64
	mounts   []mount
	tmpOnTmp bool // /tmp is not a volume: give it a tmpfs of its own
	// readOnlyRoot is securityContext.readOnlyRootFilesystem: only volumes
	// (and /dev, /proc) are writable, and, as under a container runtime,
	// neither /run nor /tmp gets a tmpfs of its own.
	readOnlyRoot bool
	logFile      string
	memory       *memoryCgroup // the memory limit's cgroup, joined first

	closeAfterStart *os.File
}

// devices are bind-mounted from the host into the container's own /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// script is what runs inside the container's fresh mount namespace before
// the container's own command: the overlay root, /dev, /proc, /sys, the
// volumes, then chroot and the change of user.
func (l *launch) script() string {
	root := filepath.Join(l.dir, "root")
	q := shellQuote
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("set -e")
	if l.memory != nil {
		w("echo $$ > %s", q(l.memory.procs()))
	}
	w("echo %s > /proc/sys/kernel/hostname", q(l.hostname))
	w("mount -t overlay overlay -o lowerdir=/,upperdir=%s,workdir=%s %s", q(filepath.Join(l.dir, "upper")), q(filepath.Join(l.dir, "work")), q(root))
	w("R=%s", q(root))
	w(`mount -t proc proc "$R/proc"`)
	w(`mount -t sysfs -o ro sysfs "$R/sys"`)
	w(`mount -t tmpfs -o mode=755,nosuid tmpfs "$R/dev"`)
	for _, d := range devices {
		w(`touch "$R/dev/%s"; mount --bind /dev/%s "$R/dev/%s"`, d, d, d)
	}
	w(`mkdir -p "$R/dev/shm" "$R/dev/pts"; mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"`)
	w(`ln -s /proc/self/fd "$R/dev/fd"; ln -s /proc/self/fd/0 "$R/dev/stdin"; ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"`)
	if !l.readOnlyRoot {
		w(`mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"`)
	}
	if l.tmpOnTmp && !l.readOnlyRoot {
		w(`mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/tmp"`)
	}
	for _, m := range l.mounts {
		// Resolved inside the root: /var/run is a link to /run, and a
		// target through it must land in the container, not on the host.
		t := `"$R$(/usr/sbin/chroot "$R" /usr/bin/realpath -m -- ` + q(m.target) + `)"`
		if m.file {
			w(`mkdir -p "$(dirname %s)"; [ -e %s ] || touch %s`, t, t, t)
		} else {
			w(`mkdir -p %s`, t)
		}
		w(`mount --bind %s %s`, q(m.source), t)
		if m.readOnly {
			w(`mount -o remount,bind,ro %s`, t)
		}
	}
	if l.readOnlyRoot {
		// Last: the mount points above are made in the writable root.
		w(`mount -o remount,ro "$R"`)
	}
	creds := ""
	if l.uid != nil || l.gid != nil {
		uid, gid := int64(0), int64(0)
		if l.uid != nil {
			uid = *l.uid
		}
		if l.gid != nil {
			gid = *l.gid
		} else {
			gid = uid
		}
		groups := []string{strconv.FormatInt(gid, 10)}
		for _, g := range l.groups {
			groups = append(groups, strconv.FormatInt(g, 10))
		}
		creds = fmt.Sprintf("/usr/bin/setpriv --reuid=%d --regid=%d --groups=%s --inh-caps=-all --bounding-set=-all --no-new-privs -- ", uid, gid, strings.Join(groups, ","))
		if uid == 0 {
			creds = "/usr/bin/setpriv --no-new-privs -- "
		}
	}
	wd := l.workDir
	if wd == "" {
		wd = "/"
	}
	// Tell the node the container's own command starts now.
	w(`printf started >&3; exec 3>&-`)
	w(`exec /usr/sbin/chroot "$R" /usr/bin/env -C %s %s"$@"`, q(wd), creds)
	return b.String()
}

// command builds the process: nsenter joins the pod's network namespace,
// unshare gives the container its own mount and UTS namespaces, then the
// script sets up the root and execs the container's command, so the
// process's pid is the container's.
//
// started is closed once the setup is done and the container's command is
// being executed: the container counts as running from then on.
func (l *launch) cmd() (cmd *exec.Cmd, logf *os.File, started <-chan struct{}, err error) {
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.MkdirAll(filepath.Join(l.dir, d), 0o755); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(l.logFile), 0o755); err != nil {
		return nil, nil, nil, err
	}
	logf, err = os.OpenFile(l.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, nil, err
	}
	args := append([]string{"--net=" + nsPath(l.netns), "--", "unshare", "--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", l.script(), "sh"}, l.command...)
	cmd = exec.Command("nsenter", args...)
	cmd.Env = l.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// A group of its own (signals reach all its processes) that dies
	// with the node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, nil, nil, err
	}
	cmd.ExtraFiles = []*os.File{pw} // fd 3 in the script
	ch := make(chan struct{})
	go func() {
		defer pr.Close()
		buf := make([]byte, 7)
		if n, _ := pr.Read(buf); n > 0 {
			close(ch)
		}
	}()
	// The caller starts cmd; the parent's copy of the write end must go then.
	l.closeAfterStart = pw
	return cmd, logf, ch, nil
}

// execIn runs a command inside a running container (its mount, network and
// UTS namespaces, root and working directory, user and environment): exec
// probes and kubectl exec.
func execIn(pid int, uid, gid *int64, env []string, command []string) *exec.Cmd {
	args := []string{"-t", strconv.Itoa(pid), "-m", "-n", "-u", "-r", "-w", "--"}
	if uid != nil {
		g := *uid
		if gid != nil {
			g = *gid
		}
		args = append(args, "/usr/bin/setpriv", fmt.Sprintf("--reuid=%d", *uid), fmt.Sprintf("--regid=%d", g), "--clear-groups", "--")
	}
	cmd := exec.Command("nsenter", append(args, command...)...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second // a grandchild holding the output must not hang Wait
	return cmd
}
