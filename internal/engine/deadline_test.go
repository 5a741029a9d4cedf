package engine

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// silentServer accepts connections and never answers: a stopped server
// process, whose kernel still completes the TCP handshake.
func silentServer(t *testing.T) Endpoint {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for _, c := range conns {
			c.Close()
		}
	})
	return Endpoint{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port}
}

// TestOpenIsBoundedOnASilentServer: connecting to a server that accepts but
// never answers fails at ConnectTimeout, for every engine, instead of
// waiting on the driver's socket timeouts (a minute, for MySQL's).
func TestOpenIsBoundedOnASilentServer(t *testing.T) {
	ep := silentServer(t)
	for _, e := range []dbv1.Engine{dbv1.EnginePostgreSQL, dbv1.EngineMySQL, dbv1.EngineMariaDB} {
		t.Run(string(e), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := Open(context.Background(), e, ep, Credentials{User: "u", Password: "p"}, Options{ConnectTimeout: 200 * time.Millisecond})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("connected to a server that never answered")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Open still waits on a silent server: the connect timeout does not bound the handshake")
			}
		})
	}
}

// hangingInstance blocks every call until its context ends.
type hangingInstance struct{ Instance }

func (hangingInstance) Status(ctx context.Context) (Status, error) {
	<-ctx.Done()
	return Status{}, ctx.Err()
}

func (hangingInstance) Promote(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestCallsAreBounded: every call gets the option's deadline even when the
// caller's context has none; the waiting calls get the longer one.
func TestCallsAreBounded(t *testing.T) {
	b := bounded{Instance: hangingInstance{}, call: 50 * time.Millisecond, wait: 100 * time.Millisecond}
	if _, err := b.Status(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Status on a hung server: %v, want the call's deadline", err)
	}
	if err := b.Promote(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Promote on a hung server: %v, want the wait deadline", err)
	}
	// The caller's own, sooner deadline wins.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Status(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Status with a cancelled context: %v", err)
	}
}

// hangingBinlog is a hung MariaDB server's binary log.
type hangingBinlog struct{ hangingInstance }

func (hangingBinlog) BinaryLogs(ctx context.Context) ([]BinaryLog, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (hangingBinlog) FlushBinaryLogs(context.Context) error                { return nil }
func (hangingBinlog) BinlogPosition(context.Context) (string, error)       { return "0-1-1", nil }
func (hangingBinlog) BinaryLogDir(context.Context) (string, string, error) { return "/d", "/d", nil }

// The binary log of a bounded instance is reached through its bounds (an
// instance from Open is always bounded: a plain type assertion finds
// nothing), and an engine without one says so.
func TestBinaryLogsOf(t *testing.T) {
	l, err := BinaryLogsOf(bounded{Instance: hangingBinlog{}, call: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.BinaryLogs(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("BinaryLogs on a hung server: %v, want the call's deadline", err)
	}
	if _, err := BinaryLogsOf(bounded{Instance: hangingInstance{}}); !errors.Is(err, ErrNoBinaryLog) {
		t.Errorf("an engine without a binary log: %v", err)
	}
}
