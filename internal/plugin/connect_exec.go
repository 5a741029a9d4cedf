package plugin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
)

// credentials are the application account's, from its Secret.
type credentials struct {
	User, Password, Database string
	// Host and Port are the -rw Service's, for a client in the cluster.
	Host, Port string
}

// clientCommand is the client at path (ec's program) connecting to
// host:port with cr, extra appended to its arguments (what followed --).
// The password is only in its environment: env (the plugin's own), then
// ec.PasswordEnv, which wins over one env may hold.
func clientCommand(ec engineClient, path string, env []string, host string, port int, cr credentials, extra []string) *exec.Cmd {
	cmd := exec.Command(path, append(ec.args(host, port, cr.User, cr.Database), extra...)...)
	cmd.Env = append(append([]string{}, env...), ec.PasswordEnv+"="+cr.Password)
	return cmd
}

// runClient runs cmd with the streams and returns its exit code as an
// exitCodeError when not 0. While it runs, an interrupt (Ctrl-C) is the
// client's alone: psql and mysql cancel the running statement and go on,
// and the plugin must not end under them, taking the port-forward along.
func runClient(cmd *exec.Cmd, program string, in io.Reader, out, errOut io.Writer) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errOut
	// A handler, not signal.Ignore: an ignored signal stays ignored in
	// the child, a handled one is reset to its default there.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)

	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		code := exit.ExitCode()
		if code <= 0 { // killed by a signal
			code = ExitFailed
		}
		return exitCodeError{err: fmt.Errorf("%s: %w", program, err), code: code}
	default:
		return fmt.Errorf("running %s: %w", program, err)
	}
}
