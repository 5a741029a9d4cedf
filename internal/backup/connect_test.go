package backup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// A closed port: the address a listener had a moment ago.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestNetworkFailuresAreUnreachable(t *testing.T) {
	// What the engine layer returns for a server that refuses connections,
	// for each engine's driver.
	for _, e := range []dbv1.Engine{dbv1.EnginePostgreSQL, dbv1.EngineMariaDB} {
		ep := engine.Endpoint{Host: "127.0.0.1", Port: closedPort(t)}
		_, err := engine.Open(context.Background(), e, ep, engine.Credentials{User: "u", Password: "p"}, engine.Options{})
		if err == nil || !unreachable(err) {
			t.Errorf("%s, connection refused: %v: want a network failure", e, err)
		}
	}
	lost := fmt.Errorf("connecting: %w", &net.DNSError{Err: "i/o timeout", Name: "db-0.db-headless", Server: "10.0.0.10:53", IsTimeout: true})
	if !unreachable(lost) {
		t.Errorf("%v: want a network failure", lost)
	}
	if refused := errors.New(`FATAL: password authentication failed for user "postgres"`); unreachable(refused) {
		t.Errorf("%v: a server's refusal is not the network's", refused)
	}
}

func TestOpenWaitsWhileUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tries := 0
	err := whileUnreachable(context.Background(), 10*time.Second, func() error {
		if tries++; tries < 3 {
			return refused
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Errorf("after two refusals: %v in %d tries, want success on the third", err, tries)
	}

	tries = 0
	denied := errors.New("password authentication failed")
	if err := whileUnreachable(context.Background(), 10*time.Second, func() error { tries++; return denied }); !errors.Is(err, denied) || tries != 1 {
		t.Errorf("a server's refusal: %v after %d tries, want it at once", err, tries)
	}

	tries = 0
	start := time.Now()
	if err := whileUnreachable(context.Background(), time.Second, func() error { tries++; return refused }); !errors.Is(err, refused) || tries < 2 {
		t.Errorf("never reachable: %v after %d tries, want the network's error after a few", err, tries)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("never reachable: waited %s, patience 1s", waited)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tries = 0
	if err := whileUnreachable(ctx, time.Minute, func() error { tries++; return refused }); !errors.Is(err, refused) || tries != 1 {
		t.Errorf("cancelled: %v after %d tries, want one", err, tries)
	}
}
