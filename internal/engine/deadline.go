package engine

import (
	"context"
	"errors"
	"net"
	"time"
)

// Default bounds on the calls that leave the process. A server that stops
// answering (a stopped process, a half-open TCP connection, a partition
// that drops packets) must cost the caller at most these, never the
// driver's own socket timeouts, or one hung server stalls the control loop.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultCallTimeout    = 10 * time.Second
	// DefaultWaitTimeout bounds the calls that wait for the server to do
	// work (a replica applying what it received: WaitApplied, Promote).
	DefaultWaitTimeout = 30 * time.Second
)

// dialer makes every TCP connection to a server, with keepalive probes
// (after 10 s idle, every 5 s, three missed): a connection whose server's
// machine vanished (half-open TCP) is found dead in ~25 s even while no
// call runs, not after the kernel's two hours.
func dialer(connect time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: connect, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}}
}

// bounded applies a deadline to every call of an Instance: the caller's,
// or the call's own bound when that comes sooner.
type bounded struct {
	Instance
	call, wait time.Duration
	onError    func(error)
}

// done reports a failed call to onError and returns its error.
func (b bounded) done(err error) error {
	if err != nil && b.onError != nil {
		b.onError(err)
	}
	return err
}

func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func (b bounded) Status(ctx context.Context) (Status, error) {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	v, err := b.Instance.Status(ctx)
	return v, b.done(err)
}

func (b bounded) Fence(ctx context.Context) error {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	return b.done(b.Instance.Fence(ctx))
}

func (b bounded) Unfence(ctx context.Context) error {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	return b.done(b.Instance.Unfence(ctx))
}

func (b bounded) Promote(ctx context.Context) error {
	ctx, cancel := within(ctx, b.wait)
	defer cancel()
	return b.done(b.Instance.Promote(ctx))
}

func (b bounded) Follow(ctx context.Context, primary Endpoint, replication Credentials) error {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	return b.done(b.Instance.Follow(ctx, primary, replication))
}

func (b bounded) ReloadTLS(ctx context.Context) error {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	return b.done(b.Instance.ReloadTLS(ctx))
}

func (b bounded) WaitApplied(ctx context.Context) error {
	ctx, cancel := within(ctx, b.wait)
	defer cancel()
	return b.done(b.Instance.WaitApplied(ctx))
}

func (b bounded) ServerVersion(ctx context.Context) (string, error) {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	v, err := b.Instance.ServerVersion(ctx)
	return v, b.done(err)
}

func (b bounded) Databases(ctx context.Context) ([]string, error) {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	v, err := b.Instance.Databases(ctx)
	return v, b.done(err)
}

func (b bounded) Empty(ctx context.Context) (bool, error) {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	v, err := b.Instance.Empty(ctx)
	return v, b.done(err)
}

func (b bounded) EnsureAccount(ctx context.Context, a Account) error {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	return b.done(b.Instance.EnsureAccount(ctx, a))
}

func (b bounded) ForkPoint(ctx context.Context, tli uint32) (Position, bool, error) {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	v, ok, err := b.Instance.ForkPoint(ctx, tli)
	return v, ok, b.done(err)
}

// BinaryLogger is what a MySQL or MariaDB instance gives the binary log
// archiver (internal/backup/binlog); an Instance of another engine has
// none: assert it (bounded instances forward it, or fail with
// ErrNoBinaryLog).
type BinaryLogger interface {
	BinaryLogs(ctx context.Context) ([]BinaryLog, error)
	FlushBinaryLogs(ctx context.Context) error
	BinlogPosition(ctx context.Context) (string, error)
	BinaryLogDir(ctx context.Context) (binlogs, data string, err error)
}

// ErrNoBinaryLog means the engine keeps no binary log (PostgreSQL).
var ErrNoBinaryLog = errors.New("the engine keeps no binary log")

// BinaryLogsOf returns inst's binary log, through the bounds of a bounded
// instance; ErrNoBinaryLog for an engine without one.
func BinaryLogsOf(inst Instance) (BinaryLogger, error) {
	inner := inst
	if b, ok := inst.(bounded); ok {
		inner = b.Instance
	}
	if _, ok := inner.(BinaryLogger); !ok {
		return nil, ErrNoBinaryLog
	}
	if b, ok := inst.(bounded); ok {
		return boundedBinlog{b}, nil
	}
	return inner.(BinaryLogger), nil
}

// boundedBinlog is a bounded instance's binary log, each call within the
// call bound.
type boundedBinlog struct{ b bounded }

func (l boundedBinlog) inner() BinaryLogger { return l.b.Instance.(BinaryLogger) }

func (l boundedBinlog) BinaryLogs(ctx context.Context) ([]BinaryLog, error) {
	ctx, cancel := within(ctx, l.b.call)
	defer cancel()
	v, err := l.inner().BinaryLogs(ctx)
	return v, l.b.done(err)
}

func (l boundedBinlog) FlushBinaryLogs(ctx context.Context) error {
	ctx, cancel := within(ctx, l.b.call)
	defer cancel()
	return l.b.done(l.inner().FlushBinaryLogs(ctx))
}

func (l boundedBinlog) BinlogPosition(ctx context.Context) (string, error) {
	ctx, cancel := within(ctx, l.b.call)
	defer cancel()
	v, err := l.inner().BinlogPosition(ctx)
	return v, l.b.done(err)
}

func (l boundedBinlog) BinaryLogDir(ctx context.Context) (string, string, error) {
	ctx, cancel := within(ctx, l.b.call)
	defer cancel()
	dir, data, err := l.inner().BinaryLogDir(ctx)
	return dir, data, l.b.done(err)
}
