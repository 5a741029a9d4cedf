// Package testservers starts real PostgreSQL and MariaDB servers on
// loopback for tests, from the Debian packages .ci/run installs. Each
// server runs in its own process group, in a scratch directory, and is
// stopped (and waited for) by t.Cleanup.
package testservers

import (
	"context"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// server is one running database process.
type server struct {
	Port int
	Dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// logFrom is where the current run's lines begin in server.log.
	logFrom int64
	// addressSpace, when set, bounds the address space of the server's
	// processes (bytes): memory that cannot be had, whatever the host's
	// overcommit.
	addressSpace int64
}

func freePort(t testing.TB) int {
	t.Helper()
	return freePortOn(t, net.IPv4(127, 0, 0, 1))
}

// freePortOn finds a port free on ip (one of this host's addresses).
func freePortOn(t testing.TB, ip net.IP) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scratchDir makes a directory under /tmp that the given user owns (the
// test's own temp dirs are root-only 0700, which PostgreSQL's user cannot enter).
func scratchDir(t testing.TB, u *user.User) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dbop-db-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server files kept in %s", dir) // logs and data, for the failure
			return
		}
		_ = os.RemoveAll(dir)
	})
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// asUser runs cmd as u when the test runs as root (PostgreSQL refuses root).
func asUser(cmd *exec.Cmd, u *user.User, home string) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if u != nil && os.Geteuid() == 0 {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	cmd.Env = append(os.Environ(), "HOME="+home, "LC_ALL=C.UTF-8")
}

// start runs the server process (with env added to the test's own),
// logging to dir/server.log.
func (s *server) start(t testing.TB, u *user.User, env []string, name string, args ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := logf.Stat(); err == nil {
		s.logFrom = fi.Size()
	}
	if s.addressSpace > 0 {
		args = append([]string{"--as=" + strconv.FormatInt(s.addressSpace, 10), "--", name}, args...)
		name = "prlimit"
	}
	cmd := exec.Command(name, args...)
	asUser(cmd, u, s.Dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
}

// Kill kills the server at once (a crash, or a lost node) and waits until
// every process of it is gone.
func (s *server) Kill() { s.stop(syscall.SIGKILL) }

// Stop shuts the server down cleanly and waits for it.
func (s *server) Stop() { s.stop(syscall.SIGTERM) }

func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	// Children of a killed postmaster linger briefly: wait for the group.
	for i := 0; i < 100 && syscall.Kill(-cmd.Process.Pid, 0) == nil; i++ {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		time.Sleep(20 * time.Millisecond)
	}
}

// Running reports whether the process is alive.
func (s *server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// ExitLog waits for a server that is expected to fail to exit, and
// returns what its last run logged (the start script's lines and the
// server's own): what a crashed container's previous log holds.
func (s *server) ExitLog(t testing.TB, timeout time.Duration) string {
	t.Helper()
	s.mu.Lock()
	done, from := s.done, s.logFrom
	s.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("the server still runs after %s; it was expected to fail:\n%s", timeout, s.Log())
	}
	return s.Log()[from:]
}

// Log returns the server's log, for failure messages.
func (s *server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	return string(b)
}

func waitUntil(t testing.TB, s *server, what string, timeout time.Duration, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = ready(); err == nil {
			return
		}
		if !s.Running() {
			t.Fatalf("%s exited while starting:\n%s", what, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready after %s: %v\n%s", what, timeout, err, s.Log())
}

// lookPath finds a server binary, or fails the test saying what to install.
func lookPath(t testing.TB, candidates []string, pkg string) string {
	t.Helper()
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	t.Fatalf("none of %v found: install the Debian package %s (.ci/run does)", candidates, pkg)
	return ""
}

// openInstance connects the engine layer to a local server, closed at cleanup.
func openInstance(t testing.TB, e dbv1.Engine, port int, creds engine.Credentials) engine.Instance {
	t.Helper()
	inst, err := engine.Open(context.Background(), e, engine.Endpoint{Host: "127.0.0.1", Port: port}, creds, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close() })
	return inst
}

// ReplicationPassword is the replication account's password on every test
// server (the account is engine.ReplicationUser, made by the start scripts).
const ReplicationPassword = "test-Replication-1"

// replicationEnv is what the start scripts need of the replication account.
func replicationEnv() []string {
	return []string{"REPLICATION_USER=" + engine.ReplicationUser, "REPLICATION_PASSWORD=" + ReplicationPassword}
}
