package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one control-plane component running as a child process, in its
// own process group, logging to <dir>/logs/<name>.log.
type process struct {
	name string
	// bin, args and env start it again (restart).
	bin       string
	args, env []string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error // set before done is closed
	log       *os.File
}

func startProcess(dir, name, bin string, args []string, env []string) (*process, error) {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	// Appended to: a restarted component's log follows its first life's.
	logFile, err := os.OpenFile(filepath.Join(dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	// Own process group, so Stop reaches any children; Pdeathsig, so the
	// component dies with us even when a test process is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, bin: bin, args: args, env: env, cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, with its error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, fmt.Errorf("%s exited: %w (see %s)", p.name, p.err, p.log.Name())
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then kills it.
func (p *process) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything left in the group (grandchildren) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// waitFor polls check every interval until it returns nil, the context ends,
// or one of the watched processes exits.
func waitFor(ctx context.Context, what string, procs []*process, check func(context.Context) error) error {
	var last error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		for _, p := range procs {
			if done, err := p.exited(); done {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %w)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

var errNotYet = errors.New("not yet")
