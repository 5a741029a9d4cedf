// Package agent is the instance agent: the database container's entrypoint
// in every database pod (the manager binary's "agent" subcommand). It
// supervises the start script and its server, holds the Database's primary
// Lease while its server is the primary, and stops the server hard when it
// can no longer prove it holds that Lease, so that a primary cut off from
// the control plane stops taking writes before the operator may promote
// another server. It serves the pod's probes, over HTTP, to the kubelet.
//
// Why the entrypoint and not a sidecar: the agent decides, before the server
// starts, whether it may start as a writable primary (a server never starts
// writable unless its agent holds the Lease), and it can stop a server that
// hangs (SIGSTOP, a stalled disk) where SQL no longer answers. A sidecar can
// do neither without sharing the process namespace.
//
// The rule, on the agent's monotonic clock: the server may take writes only
// until leaseDuration minus a margin has passed since the start of the
// agent's last successful renewal. The operator treats the Lease as expired
// only after leaseDuration plus the margin on its own monotonic clock since
// it last saw the Lease change, and hands the Lease to a new primary before
// promoting it (see internal/controller/database_lease.go).
package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/engine"
)

// Timings derive from the Lease's own duration, which the operator sets:
// renew every third of it, and keep a fifth of it as the margin for clock
// rates and scheduling (15 s: renew every 5 s, demote 12 s after the last
// renewal began, the operator waits 18 s).
func renewInterval(d time.Duration) time.Duration { return d / 3 }

// Margin is the safety margin both sides apply to a Lease of duration d.
func Margin(d time.Duration) time.Duration { return d / 5 }

// DefaultLeaseDuration is the primary Lease's duration unless the operator
// sets another.
const DefaultLeaseDuration = 15 * time.Second

// MembersAnnotation is the Database's instance count, on the primary
// Lease, kept by the operator.
const MembersAnnotation = "database.example.com/members"

// MembersSeenAnnotation is the instance count the holder's agent read
// with the Lease it last renewed. An agent that counts itself alone keeps
// its server writable while it cannot reach the API server (nobody could
// be promoted in its place), so after a scale-up from one instance the
// operator does not let that holder's Lease expire into a promotion until
// its agent has renewed knowing the new count.
const MembersSeenAnnotation = "database.example.com/members-seen"

// HolderDurationAnnotation is the Lease duration (seconds) the holder's
// agent last renewed with: the longest it may be using, which whoever
// takes the Lease by expiry waits for (its pod, force-deleted, may be gone
// from the API with the duration it was started with).
const HolderDurationAnnotation = "database.example.com/holder-duration"

// MaxLagAnnotation is spec.failover.maxLag on the primary Lease (absent:
// no bound), kept by the operator: a replica further behind than that is
// not ready, so it leaves the read-only Service, as it is not promoted.
const MaxLagAnnotation = "database.example.com/max-lag"

// replicationGrace is how long a replica may go without streaming (its
// start, a new primary to follow) before it is not ready (a variable:
// the unit tests shorten it).
var replicationGrace = 10 * time.Second

// startupWindow is how long a starting server (initdb, crash recovery) may
// take before its first answer while its agent still renews the Lease.
const startupWindow = 10 * time.Minute

// hungAfter is how long a server that answered may stop answering before
// liveness fails (the former probe's six failures ten seconds apart).
const hungAfter = time.Minute

// Config is what the agent needs; Command reads it from the environment the
// chart sets.
type Config struct {
	Namespace, Pod string
	// PodUID is this pod's UID: a pod's name outlives its incarnations,
	// and the Lease names the incarnation that holds it
	// (HolderUIDAnnotation). Empty: not checked (unit tests).
	PodUID string
	// LeaseName is the Database's primary Lease (<name>-primary).
	LeaseName string
	Leases    coordinationclient.LeaseInterface
	Engine    dbv1.Engine
	// Server is the local server, Superuser the account the agent checks it with.
	Server    engine.Endpoint
	Superuser engine.Credentials
	// TLSDir is the mounted certificate Secret (tls.crt, tls.key, ca.crt;
	// empty: none). The agent reaches its server over TLS verified with
	// the CA, and has the server reload a renewed certificate.
	TLSDir string
	// TopologyDir is the operator's topology ConfigMap, mounted: which pod
	// is primary when the Lease cannot be read.
	TopologyDir string
	// Listen is the probes' address (the kubelet's HTTP probes).
	Listen string
	// PeerListen is the peer channel's address (empty: none, and no
	// failsafe); PeerDomain the domain the members' names resolve in
	// (<name>-headless.<namespace>.svc); PeerToken what the channel's
	// callers present (PeerToken of the replication password).
	PeerListen, PeerDomain, PeerToken string
	// MetricsListen is the metrics port's address (empty: none), Metrics
	// what it serves (internal/agent/metrics), over TLS with the pod's
	// certificate as the peer channel when TLSDir is set.
	MetricsListen string
	Metrics       http.Handler
	// Command is the start script and its arguments; ServerEnv is added
	// to the environment it runs with.
	Command   []string
	ServerEnv []string
	// LeaseDuration is the primary Lease's duration the pod was started
	// with (the chart renders the operator's): the agent never uses a
	// shorter one, whatever the Lease says later, since the operator
	// waits for the longest any pod of the Database was started with.
	// Zero: DefaultLeaseDuration.
	LeaseDuration time.Duration
	// HandoverTimeout bounds how long a stopping primary waits for a
	// replica to receive its last writes (zero: DefaultHandoverTimeout).
	HandoverTimeout time.Duration
	// Open, when set, connects to the local server instead of Server
	// (unit tests).
	Open func(context.Context) (engine.Instance, error)
	Log  logr.Logger
	// Check, when set, asks the local server for its status instead of
	// connecting to Server (unit tests).
	Check func(context.Context) (engine.Status, error)
	// AfterPromotion, when set, replaces what the agent does once it sees
	// its replica promoted (ArchiveBacklog; unit tests).
	AfterPromotion func(context.Context)
	// BinlogArchive, when set, is where the primary archives its binary
	// logs (MariaDB with spec.backup.archive), BinlogTimeout at most how
	// long after a write the current file is closed for it (default 1m).
	BinlogArchive *binlog.Archive
	BinlogTimeout time.Duration
	// WALStream, when set, is where the primary streams the WAL segment
	// its server writes (PostgreSQL with spec.backup.archive).
	WALStream *wal.Archive
	// BaseBackupCommand, when set, replaces mariadb-backup for GET
	// /v1/basebackup (unit tests); tmp is its scratch directory.
	BaseBackupCommand func(ctx context.Context, tmp string) *exec.Cmd
}

// Agent is one running agent.
type Agent struct {
	cfg Config
	// peerAddr, when set, is where a member's peer channel is (unit tests).
	peerAddr func(peer string) string

	// readyMu guards notReadyWhy, readiness's answer as last logged, and
	// when it was.
	readyMu       sync.Mutex
	notReadyWhy   string
	readyLoggedAt time.Time

	mu sync.Mutex
	// Lease, as last read: its holder (pod name, and the UID of the
	// incarnation named, if any), duration, the instance count, the lag
	// bound and whether the operator fails over.
	holder, holderUID string
	duration          time.Duration
	members           int
	maxLag            int64 // -1: no bound
	failover          bool
	// incarnation: the Lease version this pod's earlier incarnation was
	// last seen to hold, and when (this agent's clock).
	incarnationVersion string
	incarnationSeen    time.Time
	// The failsafe: the primary this member last confirmed and until when
	// (duration plus margin), and whether the operator is promoting it.
	confirmedFor   string
	confirmedUntil time.Time
	refuseConfirm  bool
	// validUntil is when this agent's server must stop taking writes: the
	// start of its last successful renewal plus duration minus the margin.
	// Zero when it holds no Lease.
	validUntil time.Time
	// The local server, as last checked.
	answered, childStarted time.Time
	everAnswered           bool
	writable               bool
	// writableSince: when the checks first found the server writable in
	// this run (zero while it is not).
	writableSince time.Time
	// A replica's replication, as last checked: when it last streamed (or
	// its server started), and how much it received but has not applied.
	replica  bool
	streamed time.Time
	behind   int64
	running  bool
	// binlogs archives the binary log once this server was the primary.
	binlogs *binlog.Archiver
	// walStream streams PostgreSQL's current WAL segment (nil: not asked).
	walStream *walStreamer
	child     *exec.Cmd
	demoted   bool
	// stopping: the pod is stopping (a handover may be under way).
	stopping bool
	// busy: the server's last answer refused a session for a full
	// connection table.
	busy bool
}

// New makes an agent.
func New(cfg Config) *Agent {
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	a := &Agent{cfg: cfg, duration: cfg.LeaseDuration, maxLag: -1}
	if cfg.WALStream != nil {
		a.walStream = &walStreamer{arch: *cfg.WALStream}
	}
	return a
}

// Run supervises the server until ctx ends (the pod stops: the server gets
// the same signal) or the server exits on its own (the agent returns its
// error, and the kubelet restarts the container). A server the agent
// stopped for want of the Lease is started again, as what the Lease then
// says, once the agent may.
func (a *Agent) Run(ctx context.Context) error {
	srv := &http.Server{Addr: a.cfg.Listen, Handler: a.probes(), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("probes on %s: %w", a.cfg.Listen, err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	// The pod's server certificate, read again when it is renewed.
	certs := &certFiles{dir: a.cfg.TLSDir}
	for _, l := range []struct {
		what, addr string
		handler    http.Handler
	}{{"peer channel", a.cfg.PeerListen, a.peerHandler()}, {"metrics", a.cfg.MetricsListen, a.cfg.Metrics}} {
		if l.addr == "" || l.handler == nil {
			continue
		}
		hs := &http.Server{Addr: l.addr, Handler: l.handler, ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", l.what, l.addr, err)
		}
		if a.cfg.TLSDir != "" {
			ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get})
		}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	}

	// The loops outlive the pod's stop signal: the Lease is renewed and the
	// guard watches the server until the server has stopped (a handover
	// may take a while).
	loops, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	if err := becomeSubreaper(); err != nil {
		a.cfg.Log.Info("orphaned processes go to PID 1, not the agent", "error", err.Error())
	}
	go reapLoop(loops, a.serverPid)
	go a.leaseLoop(loops)
	go a.checkLoop(loops)
	go a.guardLoop(loops)
	go a.binlogLoop(loops)
	go a.walStreamLoop(loops)

	fenced := false
	for {
		primary, err := a.startAs(ctx)
		if err != nil {
			return err
		}
		err = a.runServer(ctx, primary, fenced)
		a.mu.Lock()
		demoted := a.demoted
		a.demoted = false
		a.mu.Unlock()
		switch {
		case ctx.Err() != nil:
			a.afterStop(loops)
			return nil
		case demoted:
			// It may hold writes the new primary lacks: it starts fenced,
			// and the operator records them before anything discards them.
			a.cfg.Log.Info("the server was stopped for want of the primary Lease; starting it again, fenced, as the Lease says")
			fenced = true
		default:
			return fmt.Errorf("the server exited: %w", err)
		}
	}
}

// startAs blocks until the server may start and says as what: the Lease's
// holder when it can be read (this pod only once it renewed the Lease), ""
// to let the start script follow the mounted topology (the Lease cannot be
// read and the topology names another pod). A pod the topology names as
// primary never starts without the Lease.
func (a *Agent) startAs(ctx context.Context) (string, error) {
	waiting := false
	var t takeover
	for {
		l, err := a.getLease(ctx)
		switch {
		case err == nil && holderOf(l) == a.cfg.Pod:
			start, again := a.asHolder(ctx, l, &t)
			if start {
				return a.cfg.Pod, nil
			}
			if again {
				continue
			}
		case err == nil && holderOf(l) != "":
			return holderOf(l), nil
		case a.topologyPrimary() != a.cfg.Pod:
			return "", nil
		}
		if !waiting {
			a.cfg.Log.Info("waiting for the primary Lease before starting the server", "lease", a.cfg.LeaseName, "error", errString(err))
			waiting = true
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// takeover tracks a new incarnation taking the Lease over from an earlier
// one of its pod: started once it renewed the Lease, outlasted once no
// member's confirmation keeps the earlier one writing.
type takeover struct{ started, outlasted bool }

// asHolder decides, when the Lease names this pod, whether its server may
// start as the primary now (start: renewed) or the Lease must be looked at
// again at once (again). An earlier incarnation of this pod that holds it
// (deleted without a grace period: it may still run on a node that lost
// the API server) is taken over only once its renewal has expired, and the
// server starts only once no member still confirms it (the failsafe); the
// renewal that starts it is a fresh one (the wait may have been long).
func (a *Agent) asHolder(ctx context.Context, l *coordinationv1.Lease, t *takeover) (start, again bool) {
	switch {
	case !a.holds():
		if a.incarnationExpired(l) && a.renew(ctx, l, time.Now(), true) {
			t.started = true
			return false, true
		}
		return false, false
	case t.started && !t.outlasted:
		t.outlasted = a.outlastConfirmations(ctx)
		return false, t.outlasted
	}
	return a.renew(ctx, l, time.Now(), true), false
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// incarnationExpired: the Lease version l (held by another incarnation of
// this pod) has not changed for the longest duration it may run with
// (this agent's, or the one the holder renewed with) plus the margin, by
// this agent's clock, as the operator waits before it moves a Lease. An
// incarnation that counted itself the only instance keeps writing while
// it cannot reach the API server: its Lease never expires that way, and
// the new incarnation waits until someone says it is gone (the holder's
// UID removed from the Lease, or the Lease moved).
func (a *Agent) incarnationExpired(l *coordinationv1.Lease) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if l.ResourceVersion != a.incarnationVersion || a.incarnationSeen.IsZero() {
		a.incarnationVersion, a.incarnationSeen = l.ResourceVersion, now
		a.cfg.Log.Info("the primary Lease names another incarnation of this pod: waiting for it to expire before taking it",
			"holderUID", a.holderUID, "version", l.ResourceVersion)
		if l.Annotations[MembersSeenAnnotation] == "1" {
			a.cfg.Log.Error(errors.New("the earlier incarnation counted itself the only instance"),
				"not taking the primary Lease by expiry: alone, the earlier incarnation keeps writing while it cannot reach the API server; "+
					"if that pod is gone (its node down, or deleted with no grace period), remove the Lease's annotation "+HolderUIDAnnotation,
				"lease", a.cfg.LeaseName)
		}
	}
	if l.Annotations[MembersSeenAnnotation] == "1" {
		return false
	}
	d := a.duration
	if s, err := strconv.Atoi(l.Annotations[HolderDurationAnnotation]); err == nil && time.Duration(s)*time.Second > d {
		d = time.Duration(s) * time.Second
	}
	return now.Sub(a.incarnationSeen) > d+Margin(d)
}

// outlastConfirmations waits, once this incarnation renewed the Lease,
// until no other member's confirmation can keep an earlier incarnation
// writing (the failsafe: it needs every member's). The members' views of
// the Lease catch up within a renew interval, after which they refuse the
// earlier incarnation; each is then asked, as the operator asks a
// candidate, how long its last confirmation still runs, and that is
// waited out. One member that answers is enough (the earlier incarnation
// needs all of them); none answering: false, and the agent tries again.
func (a *Agent) outlastConfirmations(ctx context.Context) bool {
	a.mu.Lock()
	n, d := a.members, a.duration
	a.mu.Unlock()
	i := strings.LastIndex(a.cfg.Pod, "-")
	if n < 2 || i < 0 || (a.cfg.PeerDomain == "" && a.peerAddr == nil) {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(renewInterval(d) + Margin(d)):
	}
	var longest time.Duration
	answered := 0
	for k := 0; k < n; k++ {
		peer := a.cfg.Pod[:i] + "-" + strconv.Itoa(k)
		if peer == a.cfg.Pod {
			continue
		}
		addr, cfg, err := a.peerTarget(peer)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		p, err := AskPromoting(cctx, addr, a.cfg.PeerToken, cfg)
		cancel()
		if err != nil {
			continue
		}
		answered++
		longest = max(longest, time.Duration(p.RemainingMillis)*time.Millisecond)
	}
	if answered == 0 {
		a.cfg.Log.Info("no other member answers: cannot tell whether one still confirms an earlier incarnation of this pod; waiting")
		return false
	}
	a.cfg.Log.Info("taking over from an earlier incarnation of this pod once the members' last confirmations of it ran out", "wait", longest)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(longest):
	}
	return true
}

// adopting: the topology says the instances start on volumes kept from an
// earlier Database and names no primary yet (see the operator's
// database_adopt.go): a replica then replicates from nobody, and is ready
// as long as it answers.
func (a *Agent) adopting() bool {
	if a.cfg.TopologyDir == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(a.cfg.TopologyDir, "adopt")); err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(a.cfg.TopologyDir, "primary"))
	return err != nil || strings.TrimSpace(string(b)) == ""
}

// serverPid is the server's process (the start script's, which execs it), 0 when none runs.
func (a *Agent) serverPid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.child == nil || a.child.Process == nil {
		return 0
	}
	return a.child.Process.Pid
}

// topologyPrimary is the mounted topology's primary; instance 0 before the
// operator wrote one (as the start scripts read it); none while the
// instances start on kept volumes and no primary is chosen yet.
func (a *Agent) topologyPrimary() string {
	if b, err := os.ReadFile(filepath.Join(a.cfg.TopologyDir, "primary")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b))
	}
	if a.adopting() {
		return ""
	}
	i := strings.LastIndex(a.cfg.Pod, "-")
	if i < 0 {
		return ""
	}
	return a.cfg.Pod[:i] + "-0"
}

// runServer runs the start script (which execs the server) until it ends,
// passing on the signal that stops the pod.
func (a *Agent) runServer(ctx context.Context, primary string, fenced bool) error {
	cmd := exec.Command(a.cfg.Command[0], a.cfg.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), a.cfg.ServerEnv...)
	if primary != "" {
		cmd.Env = append(cmd.Env, "AGENT_PRIMARY="+primary)
	}
	if fenced && primary != a.cfg.Pod {
		cmd.Env = append(cmd.Env, "AGENT_FENCED=1")
	}
	// A group of its own: a demotion stops the script and everything it
	// started. And the server dies with the agent: with the container's
	// process namespace where there is one, through Pdeathsig where there
	// is not; a server whose agent is gone would take writes unguarded.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	a.cfg.Log.Info("server started", "pid", cmd.Process.Pid, "primary", primary)
	a.mu.Lock()
	a.child, a.running, a.childStarted, a.everAnswered = cmd, true, time.Now(), false
	a.mu.Unlock()

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// The pod is stopping: a primary hands its role over first (see
		// handover.go), then the server stops at once.
		err = a.stopServer(context.WithoutCancel(ctx), func() {
			_ = cmd.Process.Signal(engine.ProfileOf(a.cfg.Engine).StopSignal)
		}, func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}, done)
	}
	a.mu.Lock()
	a.running, a.child, a.writable, a.writableSince = false, nil, false, time.Time{}
	a.mu.Unlock()
	return err
}

func (a *Agent) getLease(ctx context.Context) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := a.cfg.Leases.Get(ctx, a.cfg.LeaseName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.holder, a.holderUID = holderOf(l), l.Annotations[HolderUIDAnnotation]
	if n, err := strconv.Atoi(l.Annotations[MembersAnnotation]); err == nil {
		a.members = n
	}
	a.maxLag = -1
	if n, err := strconv.ParseInt(l.Annotations[MaxLagAnnotation], 10, 64); err == nil && n >= 0 {
		a.maxLag = n
	}
	a.failover = l.Annotations[FailoverAnnotation] == "enabled"
	a.duration = a.cfg.LeaseDuration
	if s := l.Spec.LeaseDurationSeconds; s != nil && time.Duration(*s)*time.Second > a.duration {
		// Never shorter than the pod started with: the operator waits for
		// the longest of the two (a shorter one on the Lease is ignored).
		a.duration = time.Duration(*s) * time.Second
	}
	if !a.holdsLocked() {
		a.validUntil = time.Time{}
		// The Lease is another's: confirm whoever holds it from now on
		// (a promotion that was announced did not make this pod primary).
		a.refuseConfirm = false
	}
	a.mu.Unlock()
	return l, nil
}

// renew writes a new renewTime on a Lease this pod holds (a conflict means
// the Lease changed hands or was renewed elsewhere: no renewal). Only a
// successful write extends validUntil, from start: the moment before the
// read that led to it.
func (a *Agent) renew(ctx context.Context, l *coordinationv1.Lease, start time.Time, starting bool) bool {
	return a.renewErr(ctx, l, start, starting) == nil
}

// errServerUnhealthy: no renewal for a server that does not answer.
var errServerUnhealthy = errors.New("the server does not answer")

// renewErr is renew, saying why it did not renew.
func (a *Agent) renewErr(ctx context.Context, l *coordinationv1.Lease, start time.Time, starting bool) error {
	if !starting && !a.serverHealthy() {
		a.cfg.Log.Info("not renewing the primary Lease: the server does not answer")
		return errServerUnhealthy
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l = l.DeepCopy()
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	if a.cfg.PodUID != "" {
		l.Annotations[HolderUIDAnnotation] = a.cfg.PodUID
	}
	a.mu.Lock()
	l.Annotations[MembersSeenAnnotation] = strconv.Itoa(a.members)
	l.Annotations[HolderDurationAnnotation] = strconv.Itoa(int(a.duration / time.Second))
	a.mu.Unlock()
	if _, err := a.cfg.Leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		a.cfg.Log.Info("renewing the primary Lease failed", "error", err.Error())
		return err
	}
	a.mu.Lock()
	if a.validUntil.IsZero() {
		a.cfg.Log.Info("holding the primary Lease", "lease", a.cfg.LeaseName, "duration", a.duration)
	}
	a.validUntil = start.Add(a.duration - Margin(a.duration))
	a.mu.Unlock()
	return nil
}

// serverHealthy: the server answered lately, or it is starting and has
// not answered yet (within the startup window).
func (a *Agent) serverHealthy() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if !a.running {
		return false
	}
	if !a.everAnswered {
		return now.Sub(a.childStarted) < startupWindow
	}
	// As readiness: a server that has not answered three checks running
	// is not renewed for, so a hung server stops within the Lease time
	// of its last answer.
	return now.Sub(a.answered) < 3*checkInterval
}

// leaseLoop reads the Lease every renew interval and renews it while this
// pod holds it and its server answers. A single instance keeps its
// validity while the API server is unreachable.
func (a *Agent) leaseLoop(ctx context.Context) {
	for {
		start := time.Now()
		l, err := a.getLease(ctx)
		if err == nil && a.holds() {
			// A renewal the API server did not answer (it is coming back,
			// or busy) is an outage like a read it did not answer: the
			// failsafe applies. A conflict is an answer: the Lease changed.
			if err = a.renewErr(ctx, l, start, false); err == nil || apierrors.IsConflict(err) || errors.Is(err, errServerUnhealthy) {
				err = nil
			}
		}
		switch {
		case err == nil:
		case !apierrors.IsNotFound(err) && a.holds() && a.serverHealthy() && (a.isAlone() || a.failsafe(ctx)):
			// The API server is away: a single instance, or a primary every
			// other member confirms, keeps taking writes for another period.
			a.mu.Lock()
			a.validUntil = start.Add(a.duration - Margin(a.duration))
			a.mu.Unlock()
		}
		a.mu.Lock()
		every := renewInterval(a.duration)
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(every))):
		}
	}
}

// isAlone: a Database of one instance keeps writing while the API server
// is unreachable (nobody could be promoted in its place).
func (a *Agent) isAlone() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.members == 1
}

func (a *Agent) holds() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holdsLocked()
}

// holdsLocked: the Lease names this pod, and this incarnation of it when
// it names one.
func (a *Agent) holdsLocked() bool {
	return a.holder == a.cfg.Pod && (a.holderUID == "" || a.cfg.PodUID == "" || a.holderUID == a.cfg.PodUID)
}

// checkLoop asks the local server, every second, whether it answers and
// takes writes.
func (a *Agent) checkLoop(ctx context.Context) {
	check := a.checkFunc()
	for ctx.Err() == nil {
		a.mu.Lock()
		running := a.running
		a.mu.Unlock()
		if running {
			st, err := check(ctx)
			a.mu.Lock()
			if engine.TooManyConnections(err) {
				// The server answered, refusing the session: it is alive and
				// its role is as last seen. A full connection table must not
				// look like a hung server and stop a healthy primary.
				a.answered = time.Now()
				if !a.busy {
					a.cfg.Log.Info("the server refuses new sessions (its connection table is full); it counts as answering", "error", err.Error())
				}
				a.busy = true
			} else if err == nil {
				a.busy = false
				now := time.Now()
				if !a.everAnswered || !a.replica {
					a.streamed = now // the grace starts with the first answer as a replica
				}
				a.answered, a.everAnswered = now, true
				if st.Writable() && !a.writable {
					a.writableSince = now
				}
				if a.replica && st.Role == engine.RolePrimary {
					go a.afterPromotion(ctx) // promoted (writable or fenced still)
				}
				a.writable = st.Writable()
				a.replica, a.behind = st.Role == engine.RoleReplica, st.Behind
				if st.Streaming {
					a.streamed = now
				}
			}
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(checkInterval):
		}
	}
}

const checkInterval = time.Second

// afterPromotion runs once the agent saw its replica turn into a primary.
func (a *Agent) afterPromotion(ctx context.Context) {
	if a.cfg.AfterPromotion != nil {
		a.cfg.AfterPromotion(ctx)
		return
	}
	if a.cfg.Engine == dbv1.EnginePostgreSQL {
		a.ArchiveBacklog(ctx)
	}
}

// ArchiveBacklog hands the WAL segments the old primary completed and
// never archived back to this server's archiver (wal.MarkBacklog): a
// promoted standby archives only what it writes itself, and the archive
// would have a gap at the failover.
func (a *Agent) ArchiveBacklog(ctx context.Context) {
	// Tried for a while: the segments are in pg_wal now, and the server
	// may remove them at its next checkpoints.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var inst engine.Instance
	var arch engine.Archiver
	err := poll(ctx, 3*time.Second, func() error {
		var err error
		if inst, err = a.openLocal(ctx, 10*time.Second); err != nil {
			return err
		}
		if arch, err = inst.Archiver(ctx); err != nil {
			_ = inst.Close()
		}
		return err
	})
	if err != nil {
		a.cfg.Log.Error(err, "after the promotion: cannot read the server's archiving settings to archive the WAL its old primary did not")
		return
	}
	defer func() { _ = inst.Close() }()
	if arch.Mode == "" || arch.Mode == "off" {
		return
	}
	marked, err := wal.MarkBacklog(arch.DataDir, arch.SegmentSize)
	if err != nil {
		a.cfg.Log.Error(err, "after the promotion: the WAL the old primary did not archive may leave a gap in the archive", "marked", marked)
	}
	if len(marked) == 0 {
		return
	}
	// A configuration reload wakes the archiver, which would otherwise
	// look at its ready files within a minute.
	if err := inst.ReloadTLS(ctx); err != nil {
		a.cfg.Log.Error(err, "after the promotion: waking the archiver")
	}
	a.cfg.Log.Info("after the promotion: the WAL segments the old primary completed are archived by this server (those archived already are taken as the same)", "segments", marked)
}

// poll runs try every interval until it succeeds or ctx ends (its last
// error then).
func poll(ctx context.Context, interval time.Duration, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(interval):
		}
	}
}

// checkFunc is how the agent asks its server for its state.
func (a *Agent) checkFunc() func(context.Context) (engine.Status, error) {
	if a.cfg.Check != nil {
		return a.cfg.Check
	}
	return (&localServer{cfg: a.cfg}).status
}

// localServer checks the local server over a new connection each time: a
// server whose PostgreSQL postmaster hangs still answers on a connection
// it already has (its backend runs on), while it accepts no new client.
type localServer struct {
	cfg Config
	// loaded is the certificate and key the server was last asked to
	// load (their digest; empty until the first check); failedAt is when
	// a reload last failed (tried again a while later, not every check);
	// stamp is the files' modification times when last read.
	loaded   string
	stamp    string
	failedAt time.Time
}

// reloadRetry is how long after a failed reload the next is tried.
const reloadRetry = 30 * time.Second

func (l *localServer) status(ctx context.Context) (engine.Status, error) {
	inst, err := openLocal(ctx, l.cfg, time.Second)
	if err != nil {
		return engine.Status{}, err
	}
	defer inst.Close()
	l.reloadRenewed(ctx, inst)
	return inst.Status(ctx)
}

// openLocal connects to the local server as the superuser, over TLS
// verified with the mounted CA when there is one (Config.Open instead,
// when set), each call bounded by callTimeout: a second for the checks
// (a server slower than that is not answering), longer for a fence.
func openLocal(ctx context.Context, cfg Config, callTimeout time.Duration) (engine.Instance, error) {
	if cfg.Open != nil {
		return cfg.Open(ctx)
	}
	opts, err := localOptions(cfg, callTimeout)
	if err != nil {
		return nil, err
	}
	return engine.Open(ctx, cfg.Engine, cfg.Server, cfg.Superuser, opts)
}

// localOptions are the options of the agent's connections to its server.
func localOptions(cfg Config, callTimeout time.Duration) (engine.Options, error) {
	opts := engine.Options{ConnectTimeout: time.Second, CallTimeout: callTimeout}
	if cfg.TLSDir != "" {
		// Read each time: the kubelet swaps the files when the CA changes.
		ca, err := os.ReadFile(filepath.Join(cfg.TLSDir, "ca.crt"))
		if err != nil {
			return engine.Options{}, fmt.Errorf("reading the CA bundle: %w", err)
		}
		if opts.TLS, err = engine.VerifyTLS(ca, ""); err != nil {
			return engine.Options{}, fmt.Errorf("%s: %w", filepath.Join(cfg.TLSDir, "ca.crt"), err)
		}
	}
	return opts, nil
}

func (a *Agent) openLocal(ctx context.Context, callTimeout time.Duration) (engine.Instance, error) {
	return openLocal(ctx, a.cfg, callTimeout)
}

// reloadRenewed has the server load its certificate and key again when
// the files changed since it last did: the operator renews them in the
// Secret before they expire, the kubelet rewrites the mounted files, and
// the server keeps serving without a restart. The first check reloads
// once too (the files may have changed while the server started). A
// failed reload is tried again at the next check.
func (l *localServer) reloadRenewed(ctx context.Context, inst engine.Instance) {
	if l.cfg.TLSDir == "" {
		return
	}
	files := []string{filepath.Join(l.cfg.TLSDir, "tls.crt"), filepath.Join(l.cfg.TLSDir, "tls.key")}
	// The modification times first: the files are read only when they
	// were rewritten, not at every check.
	stamp := filesStamp(files...)
	if stamp == l.stamp || time.Since(l.failedAt) < reloadRetry {
		return
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			l.cfg.Log.Error(err, "reading the server certificate")
			return
		}
		h.Write(b)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	if digest != l.loaded {
		if err := inst.ReloadTLS(ctx); err != nil {
			l.failedAt = time.Now()
			l.cfg.Log.Error(err, "reloading the server certificate; trying again later", "retryIn", reloadRetry.String())
			return
		}
		if l.loaded != "" {
			l.cfg.Log.Info("server certificate reloaded: it was renewed", "digest", digest[:12])
		}
	}
	l.loaded, l.stamp = digest, stamp
}

// filesStamp is the modification times of files ("" for one that cannot
// be read): it changes when the kubelet rewrites a mounted Secret.
func filesStamp(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			b.WriteString(fi.ModTime().String())
		}
		b.WriteByte('/')
	}
	return b.String()
}

// guardLoop enforces the rule: a server that takes writes, or last did and
// no longer answers, past validUntil is stopped, unless a renewal made
// right then succeeds (a replica just promoted after the operator handed
// it the Lease renews before its first check).
func (a *Agent) guardLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		a.mu.Lock()
		expired := a.running && a.writable && time.Now().After(a.validUntil)
		a.mu.Unlock()
		if !expired {
			continue
		}
		// Bounded: the time it takes comes out of the margin.
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		l, err := a.getLease(rctx)
		renewed := err == nil && a.holds() && a.renew(rctx, l, start, false)
		cancel()
		switch {
		case renewed:
		case (err != nil || a.holds()) && a.stillValid():
			// The Lease loop renewed meanwhile: its write won the race
			// this one lost (a conflict), and the Lease is held.
		case (err != nil || a.holds()) && a.justPromoted():
			a.cfg.Log.Info("the server was just promoted and its primary Lease could not be confirmed yet; trying again", "error", fmt.Sprint(err))
		case err == nil && a.fencedNow(ctx):
		default:
			a.demote()
		}
	}
}

// justPromoted: the server turned writable while this agent held no Lease
// (validUntil zero), less than the margin ago. The operator promotes a
// replica only once it took the Lease in its name, so for these first
// moments a Lease read that failed, or a renewal that lost a race with the
// operator's own write, is tried again rather than taken for a Lease held
// by another: a busy API server slower than the guard's one-second read
// had this agent kill the server the operator had just promoted (the
// promotion failed half-way and the failover went round again). A Lease
// read that names another holder still stops it at once.
func (a *Agent) justPromoted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.validUntil.IsZero() && !a.writableSince.IsZero() && time.Since(a.writableSince) < Margin(a.duration)
}

// stillValid: the Lease loop extended validUntil since the guard found it
// run out (a successful renewal, or the failsafe's confirmation).
func (a *Agent) stillValid() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Now().Before(a.validUntil)
}

// fencedNow asks the server, briefly, whether it still takes writes, once
// the Lease was read and names another holder. A switchover fences the
// server and hands the Lease on within a second: the last check may be
// older than the fence, and killing a fenced server turns its clean stop
// into crash recovery. A Lease taken after it expired was acted on at
// validUntil already; a server that does not answer in time is stopped.
func (a *Agent) fencedNow(ctx context.Context) bool {
	if a.holds() {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, fenceCheckTimeout)
	defer cancel()
	st, err := a.checkFunc()(cctx)
	if err != nil || st.Writable() {
		return false
	}
	a.mu.Lock()
	a.writable = false
	a.mu.Unlock()
	return true
}

// fenceCheckTimeout bounds fencedNow. A local server answers in
// milliseconds, but a busy machine took more than the half second this
// was (the guard then killed a MariaDB primary a switchover had just
// fenced, mid-commit). Waiting is safe: the Lease names another holder
// while this agent's validity runs only after a switchover or a handover,
// which fence the server first; any other move waits for that validity to
// run out, by which time the guard acted already.
const fenceCheckTimeout = 2 * time.Second

// demote stops the server at once (SIGKILL to its process group): it may
// no longer take writes, and a hung server answers no fence. Crash
// recovery at the next start loses nothing it acknowledged.
func (a *Agent) demote() {
	a.mu.Lock()
	if !a.running || a.child == nil || a.demoted {
		a.mu.Unlock()
		return
	}
	a.demoted = true
	// The kill first: a log line (a slow or full output) must not delay it.
	_ = syscall.Kill(-a.child.Process.Pid, syscall.SIGKILL)
	holder, validUntil := a.holder, a.validUntil
	a.mu.Unlock()
	a.cfg.Log.Error(errors.New("primary Lease not held"), "stopped the server: it may take writes and this agent cannot prove it holds the primary Lease",
		"lease", a.cfg.LeaseName, "holder", holder, "validUntil", validUntil.Format(time.RFC3339Nano))
}

// probes serves /livez (the agent runs) and /readyz (the server can serve
// its role now: it answers; a primary holds the Lease; a replica
// replicates, within spec.failover.maxLag of what it received).
func (a *Agent) probes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if why := a.notLive(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		why := a.notReady()
		a.logReadiness(why)
		if why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// logReadiness logs readiness's answer when it turns (ready, or not and
// why), and a changed reason at most every readinessRelog: a kubelet's
// Event of a failed HTTP probe names only the status code, so the agent's
// log says why.
func (a *Agent) logReadiness(why string) {
	a.readyMu.Lock()
	defer a.readyMu.Unlock()
	now := time.Now()
	turned := (why == "") != (a.notReadyWhy == "") || a.readyLoggedAt.IsZero()
	if !turned && (why == a.notReadyWhy || now.Sub(a.readyLoggedAt) < readinessRelog) {
		return
	}
	a.notReadyWhy, a.readyLoggedAt = why, now
	if why == "" {
		a.cfg.Log.Info("ready: the server can serve its role")
		return
	}
	a.cfg.Log.Info("not ready", "reason", why)
}

// readinessRelog bounds how often a changing reason (a lag, a time) is
// logged again while the server stays not ready.
const readinessRelog = 30 * time.Second

// notLive: a server that answered once and then not for a minute is
// hung; the kubelet restarts the container. A busy server that answers
// slowly is never restarted for it.
func (a *Agent) notLive() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running && a.everAnswered && time.Since(a.answered) > hungAfter {
		return fmt.Sprintf("the server has not answered for %s", time.Since(a.answered).Round(time.Second))
	}
	return ""
}

func (a *Agent) notReady() string {
	adopting := a.adopting()
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	switch {
	case a.stopping:
		return "the pod is stopping"
	case !a.running:
		return "the server is not running"
	case !a.everAnswered || now.Sub(a.answered) > 3*checkInterval:
		return "the server does not answer"
	case a.writable && now.After(a.validUntil):
		return "the server takes writes without the primary Lease"
	case a.replica && !adopting && now.Sub(a.streamed) > replicationGrace:
		return fmt.Sprintf("the replica has not replicated for %s", now.Sub(a.streamed).Round(time.Second))
	case a.replica && a.maxLag >= 0 && a.behind > a.maxLag:
		return fmt.Sprintf("the replica is %d behind what it received, beyond spec.failover.maxLag %d", a.behind, a.maxLag)
	}
	return ""
}

// Probe asks a running agent's probe endpoint at listen.
func Probe(ctx context.Context, listen, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return call(ctx, http.MethodGet, path, listen, "", nil, nil)
}
