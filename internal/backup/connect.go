package backup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"example.com/database-operator/internal/engine"
)

// connectPatience bounds how long a backup or restore Job waits for its
// server to become reachable. A Job has a single try (backoffLimit 0), so
// a DNS reply lost under load, or a pod name that resolves only once its
// endpoint is Ready again, must not fail the whole backup.
const connectPatience = 30 * time.Second

// open connects the engine layer to the server, waiting up to
// connectPatience while the server cannot be reached. A refusal by the
// server itself (a wrong password, a TLS failure) fails at once.
func (s Server) open(ctx context.Context) (engine.Instance, error) {
	var opts engine.Options
	if s.CAFile != "" {
		ca, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA bundle: %w", err)
		}
		if opts.TLS, err = engine.VerifyTLS(ca, ""); err != nil {
			return nil, fmt.Errorf("%s: %w", s.CAFile, err)
		}
	}
	var inst engine.Instance
	err := whileUnreachable(ctx, connectPatience, func() (err error) {
		inst, err = engine.Open(ctx, s.Engine, s.endpoint(), engine.Credentials{User: s.User, Password: s.Password}, opts)
		return err
	})
	return inst, err
}

// whileUnreachable calls try until it succeeds, fails for another reason
// than the network, or patience runs out; it returns try's last error.
func whileUnreachable(ctx context.Context, patience time.Duration, try func() error) error {
	deadline := time.Now().Add(patience)
	delay := 250 * time.Millisecond
	for {
		err := try()
		if err == nil || !unreachable(err) || time.Now().Add(delay).After(deadline) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 4*time.Second)
	}
}

// unreachable says whether err is the network's, not the server's: a name
// that did not resolve, a connection refused, reset or timed out.
func unreachable(err error) bool {
	var de *net.DNSError
	var oe *net.OpError
	return errors.As(err, &de) || errors.As(err, &oe) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH)
}
