// Package engine talks to one database instance, whatever its engine, for
// what high availability needs: its role and replication position, and
// the operations of a failover or switchover (fence, promote, follow, wait
// until applied). One implementation per engine family sits behind the
// Instance interface: PostgreSQL through pgx, MySQL and MariaDB through
// go-sql-driver/mysql with a dialect each.
package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	dbv1 "example.com/database-operator/api/v1"
)

// Role is what an instance does in its replication topology.
type Role string

// The roles an instance's server can have.
const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// Endpoint is where an instance listens. In a cluster it is the pod's
// address; tests map pods to local server ports.
type Endpoint struct {
	Host string
	Port int
	// ServerName is the name the server's certificate is checked against
	// (the pod's DNS name under the headless Service, which its
	// certificate carries; a pod IP is in none): empty means Host. A
	// replica verifying its primary connects by this name.
	ServerName string
}

func (e Endpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// Is tells whether source, a replica's Status.Source, is this endpoint,
// by address or by the server name it follows it with.
func (e Endpoint) Is(source string) bool {
	return source == e.String() || (e.ServerName != "" && source == net.JoinHostPort(e.ServerName, strconv.Itoa(e.Port)))
}

// name is what a client verifying the server connects by.
func (e Endpoint) name() string {
	if e.ServerName != "" {
		return e.ServerName
	}
	return e.Host
}

// Credentials are the superuser's, from the Secret the operator generates.
// They are never logged: Credentials has no String method that shows them.
type Credentials struct {
	User     string
	Password string
}

// GoString keeps the password out of %#v output.
func (c Credentials) GoString() string { return fmt.Sprintf("engine.Credentials{User: %q}", c.User) }

// String keeps the password out of %v output.
func (c Credentials) String() string { return "user " + c.User }

// Position is how far an instance's data goes. For PostgreSQL it is a
// timeline and a WAL location; for MySQL and MariaDB a GTID set.
type Position struct {
	// Timeline is PostgreSQL's timeline ID.
	Timeline uint32 `json:"timeline,omitempty"`
	// LSN is PostgreSQL's WAL location.
	LSN LSN `json:"lsn,omitempty"`
	// GTID is the GTID set (MySQL: uuid:intervals; MariaDB: domain-server-seq).
	GTID string `json:"gtid,omitempty"`
}

func (p Position) String() string {
	if p.GTID != "" || p.LSN == 0 {
		return p.GTID
	}
	return fmt.Sprintf("%d/%s", p.Timeline, p.LSN)
}

// Status is what an instance reports about itself.
type Status struct {
	Role Role
	// ReadOnly is true when the instance refuses writes (a replica, or a fenced primary).
	ReadOnly bool
	// Received is how far the instance has received data; on a primary the
	// same as Applied.
	Received Position
	// Applied is how far the instance has applied data.
	Applied Position
	// Source is the endpoint a replica streams from, when it is known.
	Source string
	// Streaming is true when a replica is connected to its source.
	Streaming bool
	// Applying is true when a replica applies what it receives (PostgreSQL:
	// replay not paused; MySQL and MariaDB: the SQL thread runs).
	Applying bool
	// ReplicationError, on a replica, is the last replication error its
	// server reports (MySQL and MariaDB: the IO or SQL thread's), if any.
	ReplicationError string
	// Behind, on a replica, is how much it received but has not applied
	// yet: bytes of WAL (PostgreSQL), transactions (MySQL, MariaDB).
	Behind int64
	// SyncReplicas, on a primary, is how many replicas acknowledge its
	// commits now (PostgreSQL: synchronous standbys; MySQL and MariaDB:
	// semi-synchronous replicas); 0 with asynchronous replication.
	SyncReplicas int
	// ReplayTimeline, on a PostgreSQL replica, is the timeline of the WAL
	// its recovery replays (the newest timeline whose segment in pg_wal
	// holds its replay position): unlike Applied's timeline, which comes
	// from the WAL receiver or the last restartpoint, it is right even
	// with no receiver running. A replica on a timeline the primary left
	// before the replica's position holds WAL the primary never had.
	// 0 when unknown.
	ReplayTimeline uint32
	// SourceLost, on a replica, is why it can never catch up with its
	// source (the server's own words), when that is so: the source no
	// longer holds what the replica needs next. Only a rebuild helps.
	SourceLost string
}

// Writable says whether the instance answers as a primary that takes
// writes (not fenced, not a replica).
func (s Status) Writable() bool { return s.Role == RolePrimary && !s.ReadOnly }

// Instance is one database server.
type Instance interface {
	// Status reports role, read-only state and replication positions.
	Status(ctx context.Context) (Status, error)
	// Fence makes the instance refuse writes and ends client sessions, so a
	// primary that is being replaced takes no more writes.
	Fence(ctx context.Context) error
	// Unfence lets the instance take writes again (after a switchover that
	// did not happen, say).
	Unfence(ctx context.Context) error
	// Promote turns a replica into a writable primary. It returns once the
	// instance takes writes.
	Promote(ctx context.Context) error
	// Follow points a replica (or a fenced old primary that has not
	// diverged) at a new primary and starts replicating from it.
	// PostgreSQL takes the password from the server's password file, never
	// from replication.Password: the server would log it.
	Follow(ctx context.Context, primary Endpoint, replication Credentials) error
	// WaitApplied returns once the instance has applied everything it had
	// received when called, or the context ends.
	WaitApplied(ctx context.Context) error
	// Compare orders two positions of this engine: -1, 0 or 1, or an error
	// when they cannot be ordered (MySQL/MariaDB sets that diverged).
	Compare(a, b Position) (int, error)
	// Lag is how far a replica's position is behind a primary's: bytes of
	// WAL for PostgreSQL, transactions for MySQL and MariaDB; 0 when it is
	// not behind.
	Lag(replica, primary Position) (int64, error)
	// ServerVersion is the server's version string (PostgreSQL
	// server_version, MySQL/MariaDB VERSION()).
	ServerVersion(ctx context.Context) (string, error)
	// Databases lists the databases a backup holds, sorted: every database
	// that accepts connections except templates (PostgreSQL), every schema
	// except the server's own (MySQL/MariaDB).
	Databases(ctx context.Context) ([]string, error)
	// Empty reports whether the server holds no user data: nothing but the
	// default postgres database without tables (PostgreSQL), no user schema
	// (MySQL/MariaDB). A restore loads only into an empty server.
	Empty(ctx context.Context) (bool, error)
	// Close ends the connection.
	Close() error
	// EnsureAccount creates or updates the application account and its
	// database, or the replication account (on the primary; replicas get
	// it by replication).
	EnsureAccount(ctx context.Context, a Account) error
	// ForkPoint is where this server's history left timeline tli (asked
	// of a promoted PostgreSQL primary about its old primary's timeline):
	// a server on tli beyond that point holds WAL this one never had.
	// ok is false when this server is still on tli. MySQL and MariaDB
	// have no timelines (GTID sets show divergence): ErrNoTimelines.
	ForkPoint(ctx context.Context, tli uint32) (fork Position, ok bool, err error)
	// Archiver reports continuous archiving on a primary (PostgreSQL's
	// pg_stat_archiver, counted since the server started). MySQL and
	// MariaDB: ErrNoArchiver.
	Archiver(ctx context.Context) (Archiver, error)
	// KeepSlots keeps, on a PostgreSQL primary, one physical replication
	// slot per name (SlotName of each other instance): it creates those
	// missing, drops those whose names start with prefix that are not
	// listed, and reports the slots that lost WAL their replica still
	// needed (past max_slot_wal_keep_size). A lost slot is kept until
	// DropSlot, so the loss is seen until someone acts on it. MySQL and
	// MariaDB keep binary logs instead: nothing to do.
	KeepSlots(ctx context.Context, prefix string, names []string) (Slots, error)
	// ApplyParameters sets settings a running server takes (the reload
	// class of parameters.Classify; want maps names as it knows them to
	// values) and returns the names whose value it changed. PostgreSQL:
	// ALTER SYSTEM and a reload, and the names it set before that want no
	// longer has are reset; a value the server refuses is an error naming
	// it, and nothing is reloaded. MySQL and MariaDB: SET GLOBAL (a name
	// no longer wanted keeps its value until the server restarts, from
	// its configuration).
	ApplyParameters(ctx context.Context, want map[string]string) ([]string, error)
	// DropSlot drops one replication slot (a lost one, once its replica's
	// rebuild is recorded); a slot that is not there is no error.
	DropSlot(ctx context.Context, name string) error
	// ReloadTLS has the server read its certificate and key files again
	// (renewed in its mounted Secret), without a restart: PostgreSQL
	// reloads its configuration, MySQL and MariaDB reload their TLS
	// context. Open connections keep the certificate they began with.
	ReloadTLS(ctx context.Context) error
}

// Slots is what KeepSlots changed and found.
type Slots struct {
	Created, Dropped, Lost []string
}

// SlotName is the replication slot of an instance pod: slot names allow
// lower-case letters, digits and underscores only.
func SlotName(pod string) string { return strings.ReplaceAll(pod, "-", "_") }

// ErrPromotionNotStarted wraps a Promote that failed before it asked the
// server to promote: only then is the server surely still a replica. Once
// asked, a promotion may go on after the call failed (pg_promote timed out
// or was cancelled), and the caller must not hand the primary role back.
var ErrPromotionNotStarted = errors.New("the promotion was not started")

// TooManyConnections says whether err is a server refusing a session for
// a full connection table (PostgreSQL 53300, MySQL and MariaDB 1040): the
// server answered, and is alive.
func TooManyConnections(err error) bool {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	return errors.As(err, &pg) && pg.Code == "53300" || errors.As(err, &my) && my.Number == 1040
}

// Archiver is what a server's WAL archiver did since the server started.
type Archiver struct {
	// Mode is archive_mode (off, on, always): off until the server
	// restarted with archiving configured.
	Mode           string
	Archived       int64
	LastArchived   string // the file's name
	LastArchivedAt time.Time
	Failed         int64
	LastFailed     string
	LastFailedAt   time.Time
	// DataDir is data_directory and SegmentSize wal_segment_size: where
	// a promoted server's unarchived backlog lies (wal.MarkBacklog).
	DataDir     string
	SegmentSize int64
}

// Failing says whether the last attempt failed: the archiver retries the
// failed file, and the server keeps every WAL file from it on.
func (a Archiver) Failing() bool {
	return a.Failed > 0 && a.LastFailedAt.After(a.LastArchivedAt)
}

// ErrNoArchiver means the engine has no WAL archiver (MySQL, MariaDB: their
// binary log archiving is not built yet).
var ErrNoArchiver = errors.New("the engine has no WAL archiver")

// ErrNoTimelines means the engine keeps no timeline history (MySQL, MariaDB).
var ErrNoTimelines = errors.New("the engine has no timelines")

// ErrDiverged means two positions cannot be ordered: each has data the
// other lacks. A replica in that state cannot follow; it must be rebuilt.
var ErrDiverged = errors.New("positions have diverged")

// Options tune how an instance is reached. Every call is bounded: a hung
// server costs at most these (see deadline.go for the defaults).
type Options struct {
	// ConnectTimeout bounds connecting, handshake and authentication
	// included.
	ConnectTimeout time.Duration
	// CallTimeout bounds each call; WaitTimeout the calls that wait for
	// the server to apply what it received (WaitApplied, Promote).
	CallTimeout, WaitTimeout time.Duration
	// OnError, when set, is called with the error of every call that
	// fails: a caller that keeps the Instance for later calls drops it
	// then (a call that timed out leaves the connection unusable).
	OnError func(error)
	// TLS, when set, makes the connection use TLS and verify the server
	// with it: no plain-text fallback. Its ServerName, when empty, is the
	// endpoint's (see Endpoint.ServerName). Nil keeps the drivers'
	// defaults (see VerifyTLS).
	TLS *tls.Config
	// PeerCAFile is the CA bundle's path on the instance's own filesystem
	// (its mounted certificate Secret). When set, and the primary's
	// Endpoint has a ServerName (it serves a certificate), Follow has the
	// replica verify its primary with it, by that name, and refuse plain
	// text. Otherwise replication stays plain: a pod started before its
	// Database had certificates, until it is rolled.
	PeerCAFile string
}

// VerifyTLS is the TLS configuration that trusts only the CAs in caPEM
// and checks that the server's certificate names serverName.
func VerifyTLS(caPEM []byte, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in the CA bundle")
	}
	return &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}

// tlsFor is o.TLS for endpoint ep, nil when TLS is not asked for.
func (o Options) tlsFor(ep Endpoint) *tls.Config {
	if o.TLS == nil {
		return nil
	}
	c := o.TLS.Clone()
	if c.ServerName == "" {
		c.ServerName = ep.name()
	}
	return c
}

// Open connects to an instance of the given engine. The Instance it
// returns bounds every call with the options' timeouts (or the caller's
// deadline, when that comes sooner).
func Open(ctx context.Context, engine dbv1.Engine, ep Endpoint, creds Credentials, opts Options) (Instance, error) {
	opts = opts.withDefaults()
	// The drivers bound the TCP connect only: a server that accepts and
	// then never answers would hold the handshake.
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	var (
		inst Instance
		err  error
	)
	switch engine {
	case dbv1.EnginePostgreSQL:
		inst, err = openPostgres(cctx, ep, creds, opts)
	case dbv1.EngineMySQL:
		inst, err = openMySQL(cctx, mysqlDialect{}, ep, creds, opts)
	case dbv1.EngineMariaDB:
		inst, err = openMySQL(cctx, mariadbDialect{}, ep, creds, opts)
	default:
		return nil, fmt.Errorf("unknown engine %q", engine)
	}
	if err != nil {
		return nil, err
	}
	return bounded{Instance: inst, call: opts.CallTimeout, wait: opts.WaitTimeout, onError: opts.OnError}, nil
}

func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	return o
}
