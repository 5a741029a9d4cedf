package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// dialect holds what differs between MySQL 8.4 and MariaDB: the statements
// and status columns of replication.
type dialect interface {
	name() string
	// statementTimeLimit is the session variable that bounds a
	// statement's time.
	statementTimeLimit() string
	// canonical writes a position the way Compare and Lag read it.
	canonical(gtid string) string
	// positionQuery returns the executed GTID set of the instance.
	positionQuery() string
	replicaStatus() string
	// syncClientsStatus is the status variable counting semi-synchronous replicas.
	syncClientsStatus() string
	semiSyncReplicaVar() string
	semiSyncPrimaryVar() string
	// receivedColumn is the replica-status column with the received GTIDs.
	receivedColumn() string
	ioRunningColumn() string
	sqlRunningColumn() string
	sourceHostColumn() string
	sourcePortColumn() string
	fence() []string
	unfence() []string
	// account creates or updates an application account and its database.
	account(a Account) []string
	promote() []string
	// follow re-points a replica, over TLS as tls says (verified with the
	// CA bundle at peerCA, by the primary's name).
	follow(primary Endpoint, repl Credentials, tls replicationTLS, peerCA string) []string
	// attachFormerPrimary runs before a former primary's first CHANGE
	// MASTER/SOURCE, with replication stopped.
	attachFormerPrimary() []string
	// lag counts the transactions of primary that replica lacks.
	lag(replica, primary string) (int64, error)
	// waitApplied returns a query that blocks until gtid is applied or the
	// timeout (seconds) passes; it returns 0 on success.
	waitApplied(gtid string, timeoutSeconds int) string
	// received merges the applied and received GTIDs into how far the
	// replica has data (MySQL's Retrieved_Gtid_Set lacks what it executed
	// before; MariaDB's Gtid_IO_Pos is a position).
	received(applied, retrieved string) string
	compare(a, b string) (int, error)
}

// replicationTLS is how a replica connects to its primary.
type replicationTLS int

const (
	tlsNone       replicationTLS = iota // the primary serves plain text (not rolled since it had a certificate)
	tlsVerified                         // TLS, the primary verified by its name with the CA bundle
	tlsUnverified                       // TLS without verification: this replica has no CA bundle until it is rolled
)

// host is what a replica connects to: the primary's name when its
// certificate is checked against it, its address otherwise.
func (t replicationTLS) host(p Endpoint) string {
	if t == tlsNone {
		return p.Host
	}
	return p.name()
}

// options are CHANGE MASTER's (prefix MASTER_) or CHANGE REPLICATION
// SOURCE's (SOURCE_) TLS options. SSL = 0 undoes a TLS setting kept from
// an earlier change.
func (t replicationTLS) options(prefix, peerCA string) string {
	switch t {
	case tlsVerified:
		return fmt.Sprintf(", %[1]sSSL = 1, %[1]sSSL_CA = %[2]s, %[1]sSSL_VERIFY_SERVER_CERT = 1", prefix, mysqlLiteral(peerCA))
	case tlsUnverified:
		return fmt.Sprintf(", %[1]sSSL = 1, %[1]sSSL_VERIFY_SERVER_CERT = 0", prefix)
	}
	return ", " + prefix + "SSL = 0"
}

type mysqlDialect struct{}

func (mysqlDialect) name() string                 { return "MySQL" }
func (mysqlDialect) statementTimeLimit() string   { return "max_execution_time" }
func (mysqlDialect) canonical(gtid string) string { return gtid }
func (mysqlDialect) positionQuery() string        { return "SELECT @@GLOBAL.gtid_executed" }
func (mysqlDialect) replicaStatus() string        { return "SHOW REPLICA STATUS" }
func (mysqlDialect) syncClientsStatus() string    { return "Rpl_semi_sync_source_clients" }
func (mysqlDialect) receivedColumn() string       { return "Retrieved_Gtid_Set" }
func (mysqlDialect) ioRunningColumn() string      { return "Replica_IO_Running" }
func (mysqlDialect) sqlRunningColumn() string     { return "Replica_SQL_Running" }
func (mysqlDialect) sourceHostColumn() string     { return "Source_Host" }
func (mysqlDialect) sourcePortColumn() string     { return "Source_Port" }

// MySQL 8.4 rewrites the password out of its logs and binary log.
func (mysqlDialect) account(a Account) []string {
	user, pw := mysqlLiteral(a.User)+"@'%'", mysqlLiteral(a.Password)
	return append([]string{
		"CREATE USER IF NOT EXISTS " + user + " IDENTIFIED BY " + pw,
		"ALTER USER " + user + " IDENTIFIED BY " + pw,
	}, grants(a, user, "PROCESS, REPLICATION CLIENT")...)
}

// grants gives an account its rights: the application account all of its
// database, the replication account the right to read the binary log, the
// monitoring account monitor (the dialect's rights to read server state)
// and performance_schema.
func grants(a Account, user, monitor string) []string {
	if a.Replication {
		return []string{"GRANT REPLICATION SLAVE ON *.* TO " + user}
	}
	if a.Monitoring {
		return []string{"GRANT " + monitor + " ON *.* TO " + user, "GRANT SELECT ON performance_schema.* TO " + user}
	}
	return []string{
		"CREATE DATABASE IF NOT EXISTS `" + a.Database + "`",
		"GRANT ALL PRIVILEGES ON `" + a.Database + "`.* TO " + user,
	}
}

// super_read_only refuses writes even from SUPER users.
func (mysqlDialect) fence() []string {
	return []string{"SET GLOBAL super_read_only = ON"}
}
func (mysqlDialect) unfence() []string {
	return []string{"SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF"}
}

// promote stops replicating; Promote then turns the semi-synchronous
// primary side on (when configured) and lifts read-only (unfence).
func (mysqlDialect) promote() []string { return []string{"STOP REPLICA", "RESET REPLICA ALL"} }

// The semi-synchronous plugin's variables: the replica side is set by the
// configuration (synchronous replication), the primary side by Promote.
func (mysqlDialect) semiSyncReplicaVar() string { return "rpl_semi_sync_replica_enabled" }
func (mysqlDialect) semiSyncPrimaryVar() string { return "rpl_semi_sync_source_enabled" }
func (mysqlDialect) follow(p Endpoint, c Credentials, tls replicationTLS, peerCA string) []string {
	// Without TLS the caching_sha2 password exchange needs the source's
	// RSA key, taken on trust; with TLS the password goes over the
	// channel and no key is fetched.
	host, security := tls.host(p), tls.options("SOURCE_", peerCA)
	if tls == tlsNone {
		security += ", GET_SOURCE_PUBLIC_KEY = 1"
	}
	return []string{
		"STOP REPLICA",
		"SET GLOBAL super_read_only = ON",
		fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_HOST = %s, SOURCE_PORT = %d, SOURCE_USER = %s, SOURCE_PASSWORD = %s, SOURCE_AUTO_POSITION = 1, SOURCE_CONNECT_RETRY = 1%s",
			mysqlLiteral(host), p.Port, mysqlLiteral(c.User), mysqlLiteral(c.Password), security),
		"START REPLICA",
	}
}

// Auto-positioning starts from gtid_executed, which a primary keeps too.
func (mysqlDialect) attachFormerPrimary() []string { return nil }
func (mysqlDialect) waitApplied(gtid string, timeout int) string {
	return fmt.Sprintf("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %d)", mysqlLiteral(gtid), timeout)
}
func (mysqlDialect) received(applied, retrieved string) string {
	switch {
	case retrieved == "":
		return applied
	case applied == "":
		return retrieved
	}
	return applied + "," + retrieved
}
func (mysqlDialect) compare(a, b string) (int, error) { return compareMySQLGTIDSet(a, b) }
func (mysqlDialect) lag(r, p string) (int64, error)   { return mysqlGTIDLag(r, p) }

type mariadbDialect struct{}

func (mariadbDialect) name() string                 { return "MariaDB" }
func (mariadbDialect) statementTimeLimit() string   { return "max_statement_time" }
func (mariadbDialect) canonical(gtid string) string { return mergeMariaDBGTID(gtid) }

// positionQuery is the server's GTID state: per domain, the last
// transaction of each server it holds (gtid_binlog_state, which replicas
// keep too: log_slave_updates), with gtid_current_pos for what it applied
// before it logged anything (a clone).
func (mariadbDialect) positionQuery() string {
	return "SELECT CONCAT_WS(',', NULLIF(@@GLOBAL.gtid_binlog_state, ''), NULLIF(@@GLOBAL.gtid_current_pos, ''))"
}
func (mariadbDialect) replicaStatus() string     { return "SHOW SLAVE STATUS" }
func (mariadbDialect) syncClientsStatus() string { return "Rpl_semi_sync_master_clients" }
func (mariadbDialect) receivedColumn() string    { return "Gtid_IO_Pos" }
func (mariadbDialect) ioRunningColumn() string   { return "Slave_IO_Running" }
func (mariadbDialect) sqlRunningColumn() string  { return "Slave_SQL_Running" }
func (mariadbDialect) sourceHostColumn() string  { return "Master_Host" }
func (mariadbDialect) sourcePortColumn() string  { return "Master_Port" }

// MariaDB has no super_read_only: read_only stops accounts without the
// READ_ONLY ADMIN privilege (applications), and the operator's own
// superuser must not write to a fenced instance.
func (mariadbDialect) fence() []string { return []string{"SET GLOBAL read_only = ON"} }

// account gives the password as its mysql_native_password hash: neither
// the statement nor the binary log that replicates it holds the password.
func (mariadbDialect) account(a Account) []string {
	user, hash := mysqlLiteral(a.User)+"@'%'", mysqlLiteral(nativePasswordHash(a.Password))
	return append([]string{
		"CREATE USER IF NOT EXISTS " + user + " IDENTIFIED BY PASSWORD " + hash,
		"ALTER USER " + user + " IDENTIFIED BY PASSWORD " + hash,
	}, grants(a, user, "PROCESS, BINLOG MONITOR, SLAVE MONITOR")...)
}
func (mariadbDialect) unfence() []string          { return []string{"SET GLOBAL read_only = OFF"} }
func (mariadbDialect) promote() []string          { return []string{"STOP SLAVE", "RESET SLAVE ALL"} }
func (mariadbDialect) semiSyncReplicaVar() string { return "rpl_semi_sync_slave_enabled" }
func (mariadbDialect) semiSyncPrimaryVar() string { return "rpl_semi_sync_master_enabled" }
func (mariadbDialect) follow(p Endpoint, c Credentials, tls replicationTLS, peerCA string) []string {
	host, security := tls.host(p), tls.options("MASTER_", peerCA)
	return []string{
		"STOP SLAVE",
		"SET GLOBAL read_only = ON",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %d, MASTER_USER = %s, MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1%s",
			mysqlLiteral(host), p.Port, mysqlLiteral(c.User), mysqlLiteral(c.Password), security),
		"START SLAVE",
	}
}

// MASTER_USE_GTID=slave_pos starts from gtid_slave_pos, which a primary
// does not advance: start it from what the primary wrote and logged.
func (mariadbDialect) attachFormerPrimary() []string {
	return []string{"SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_binlog_pos"}
}

// waitApplied waits for the last transaction of each domain (what
// MASTER_GTID_WAIT takes: one GTID per domain).
func (mariadbDialect) waitApplied(gtid string, timeout int) string {
	if st, err := parseMariaDBGTID(gtid); err == nil {
		gtid = st.lastPositions()
	}
	return fmt.Sprintf("SELECT MASTER_GTID_WAIT(%s, %d)", mysqlLiteral(gtid), timeout)
}

// received is what a replica holds with what its IO thread received.
func (mariadbDialect) received(applied, retrieved string) string {
	return mergeMariaDBGTID(applied, retrieved)
}
func (mariadbDialect) compare(a, b string) (int, error) { return compareMariaDBGTID(a, b) }
func (mariadbDialect) lag(r, p string) (int64, error)   { return mariaDBGTIDLag(r, p) }

// mysqlLiteral quotes a string for MySQL and MariaDB (backslash escapes on).
func mysqlLiteral(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`, "\n", `\n`, "\r", `\r`, "\x1a", `\Z`).Replace(s) + "'"
}

type mysqlFamily struct {
	db     *sql.DB
	d      dialect
	ep     Endpoint
	peerCA string // Options.PeerCAFile
}

func openMySQL(ctx context.Context, d dialect, ep Endpoint, creds Credentials, opts Options) (*mysqlFamily, error) {
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", ep.String()
	cfg.User, cfg.Passwd = creds.User, creds.Password
	// Calls are bounded by their context (Open's bounded); the socket
	// timeouts only backstop a context without a deadline, and must not
	// cut a wait shorter than WaitTimeout.
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = opts.ConnectTimeout, opts.WaitTimeout+5*time.Second, opts.WaitTimeout+5*time.Second
	cfg.AllowNativePasswords = true
	// A user's statement time limit (spec.parameters) must not cut the
	// operator's own calls short; each is bounded by its context instead.
	cfg.Params = map[string]string{d.statementTimeLimit(): "0"}
	cfg.DialFunc = dialer(opts.ConnectTimeout).DialContext
	if c := opts.tlsFor(ep); c != nil {
		cfg.TLS = c
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to %s at %s: %w", d.name(), ep, err)
	}
	return &mysqlFamily{db: db, d: d, ep: ep, peerCA: opts.PeerCAFile}, nil
}

func (m *mysqlFamily) Close() error { return m.db.Close() }

func (m *mysqlFamily) exec(ctx context.Context, stmts []string) error {
	for _, s := range stmts {
		if _, err := m.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s %s: %s: %w", m.d.name(), m.ep, redact(s), err)
		}
	}
	return nil
}

// redact drops the password from a statement before it reaches an error.
func redact(stmt string) string {
	if i := strings.Index(stmt, " IDENTIFIED BY "); i >= 0 {
		return stmt[:i] + " IDENTIFIED BY ***"
	}
	for _, key := range []string{"SOURCE_PASSWORD = ", "MASTER_PASSWORD = "} {
		if i := strings.Index(stmt, key); i >= 0 {
			rest := stmt[i+len(key):]
			end := strings.Index(rest, ", ")
			if end < 0 {
				end = len(rest)
			}
			stmt = stmt[:i+len(key)] + "'***'" + rest[end:]
		}
	}
	return stmt
}

// replicaRow reads the replica status as column -> value; empty when the
// instance replicates from nobody.
func (m *mysqlFamily) replicaRow(ctx context.Context) (map[string]string, error) {
	rows, err := m.db.QueryContext(ctx, m.d.replicaStatus())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if !rows.Next() {
		return out, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}

func (m *mysqlFamily) Status(ctx context.Context) (Status, error) {
	st, _, err := m.status(ctx)
	return st, err
}

// status is Status, with the replica status row it was read from (empty
// on a primary).
func (m *mysqlFamily) status(ctx context.Context) (Status, map[string]string, error) {
	var readOnly bool
	var executed string
	if err := m.db.QueryRowContext(ctx, "SELECT @@GLOBAL.read_only").Scan(&readOnly); err != nil {
		return Status{}, nil, fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
	}
	if err := m.db.QueryRowContext(ctx, m.d.positionQuery()).Scan(&executed); err != nil {
		return Status{}, nil, fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
	}
	executed = m.d.canonical(strings.ReplaceAll(executed, "\n", ""))
	row, err := m.replicaRow(ctx)
	if err != nil {
		return Status{}, nil, err
	}
	st := Status{Role: RolePrimary, ReadOnly: readOnly, Applied: Position{GTID: executed}, Received: Position{GTID: executed}}
	if len(row) == 0 {
		// Unknown without semi-synchronous replication: no row, 0.
		var name string
		err := m.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+m.d.syncClientsStatus()+"'").Scan(&name, &st.SyncReplicas)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return Status{}, nil, fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
		}
		return st, row, nil
	}
	st.Role = RoleReplica
	st.Streaming = row[m.d.ioRunningColumn()] == "Yes"
	st.Applying = row[m.d.sqlRunningColumn()] == "Yes"
	// The SQL thread's error first: it is the one that stops applying.
	for _, col := range []string{"Last_SQL_Error", "Last_IO_Error"} {
		if e := strings.TrimSpace(row[col]); e != "" {
			st.ReplicationError = e
			break
		}
	}
	// Error 1236 (fatal error reading the source's binary log): the source
	// purged what this replica needs next, or the replica holds
	// transactions the source lacks. The IO thread retries for ever and
	// never gets further.
	if row["Last_IO_Errno"] == "1236" {
		st.SourceLost = row["Last_IO_Error"]
	}
	if h := row[m.d.sourceHostColumn()]; h != "" {
		st.Source = h + ":" + row[m.d.sourcePortColumn()]
	}
	st.Received = Position{GTID: m.d.received(executed, strings.ReplaceAll(row[m.d.receivedColumn()], "\n", ""))}
	if behind, err := m.d.lag(st.Applied.GTID, st.Received.GTID); err == nil {
		st.Behind = behind
	}
	return st, row, nil
}

// Fence makes the server read-only, then ends every client session but
// its own and the replication streams: read_only refuses an application's
// next statement, but a transaction it opened before may still be waiting
// to commit, and a session ended is one no client mistakes for a live
// primary. What a killed session had not committed is rolled back: it was
// never acknowledged.
func (m *mysqlFamily) Fence(ctx context.Context) error {
	if err := m.exec(ctx, m.d.fence()); err != nil {
		return err
	}
	return m.endSessions(ctx)
}

func (m *mysqlFamily) Unfence(ctx context.Context) error { return m.exec(ctx, m.d.unfence()) }

// clientSessions lists the sessions a fence ends: every one but the asking
// connection's, the server's own threads and the replicas' binary log
// streams (they must go on: a replica catches up with a fenced primary).
const clientSessions = `SELECT ID FROM information_schema.PROCESSLIST
	WHERE ID <> CONNECTION_ID() AND USER NOT IN ('system user', 'event_scheduler')
	AND COMMAND NOT IN ('Binlog Dump', 'Binlog Dump GTID', 'Daemon', 'Killed')`

// endSessions kills the sessions clientSessions lists, on one connection
// (CONNECTION_ID() is the connection's own). A session that ended
// meanwhile is no error.
func (m *mysqlFamily) endSessions(ctx context.Context) error {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, clientSessions)
	if err != nil {
		return fmt.Errorf("%s %s: listing client sessions: %w", m.d.name(), m.ep, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("%s %s: listing client sessions: %w", m.d.name(), m.ep, err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s %s: listing client sessions: %w", m.d.name(), m.ep, err)
	}
	for _, id := range ids {
		var me *mysql.MySQLError
		if _, err := conn.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil &&
			!(errors.As(err, &me) && me.Number == errUnknownThread) {
			return fmt.Errorf("%s %s: ending session %d: %w", m.d.name(), m.ep, id, err)
		}
	}
	// KILL only flags a session: one in its commit finishes it first, and
	// must not be acknowledged after the caller read the position it
	// fenced at. Wait until they are gone.
	if len(ids) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, sessionEndWait)
	defer cancel()
	q := "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID IN (" + joinIDs(ids) + ")"
	if err := poll(wctx, 50*time.Millisecond, func() (bool, error) {
		var left int
		err := conn.QueryRowContext(wctx, q).Scan(&left)
		return left == 0, err
	}); err != nil {
		return fmt.Errorf("%s %s: waiting for the ended sessions to be gone (up to %s): %w", m.d.name(), m.ep, sessionEndWait, err)
	}
	return nil
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

// errUnknownThread (ER_NO_SUCH_THREAD): the session ended on its own.
const errUnknownThread = 1094

// EnsureAccount creates or updates the application account and its
// database, on which it has every right (and none elsewhere).
func (m *mysqlFamily) EnsureAccount(ctx context.Context, a Account) error {
	if err := a.validate(); err != nil {
		return err
	}
	return m.exec(ctx, m.d.account(a))
}

// Promote applies what the replica received, stops replicating, and only
// then, with the semi-synchronous primary side on (when configured), lets
// writes in: no write is acknowledged before its replicas hold it.
func (m *mysqlFamily) Promote(ctx context.Context) error {
	if err := m.WaitApplied(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrPromotionNotStarted, err)
	}
	if err := m.exec(ctx, m.d.promote()); err != nil {
		return err
	}
	if err := m.semiSyncPrimary(ctx, true); err != nil {
		return err
	}
	return m.exec(ctx, m.d.unfence())
}

// semiSyncPrimary turns the semi-synchronous primary side on, for a
// primary of a Database whose replication is synchronous (its replica
// side, set by the configuration, says so), or off. A replica must have
// it off: it logs what it applies, and would wait, applying, for
// acknowledgements from replicas it does not have.
func (m *mysqlFamily) semiSyncPrimary(ctx context.Context, primary bool) error {
	var name, value string
	err := m.db.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE '"+m.d.semiSyncReplicaVar()+"'").Scan(&name, &value)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil // the plugin is not loaded (MySQL, asynchronous replication)
	case err != nil:
		return fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
	}
	state := "OFF"
	if primary && value == "ON" {
		state = "ON"
	}
	return m.exec(ctx, []string{"SET GLOBAL " + m.d.semiSyncPrimaryVar() + " = " + state})
}

func (m *mysqlFamily) Follow(ctx context.Context, primary Endpoint, repl Credentials) error {
	row, err := m.replicaRow(ctx)
	if err != nil {
		return err
	}
	if err := m.semiSyncPrimary(ctx, false); err != nil {
		return err
	}
	tls := tlsNone
	switch {
	case primary.ServerName == "": // the primary serves no certificate yet
	case m.peerCA != "":
		tls = tlsVerified
	default:
		tls = tlsUnverified // this replica has no CA yet: encrypted until it is rolled
	}
	stmts := m.d.follow(primary, repl, tls, m.peerCA)
	if len(row) == 0 {
		// A former primary: it has never replicated, or not since it was
		// promoted, so its replication position must start from its own data.
		stmts = append(stmts[:1:1], append(m.d.attachFormerPrimary(), stmts[1:]...)...)
	}
	return m.exec(ctx, stmts)
}

func (m *mysqlFamily) WaitApplied(ctx context.Context) error {
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	if st.Role == RolePrimary || st.Received.GTID == "" {
		return nil
	}
	timeout := 60
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(1, int(time.Until(dl).Seconds()))
	}
	var res sql.NullInt64
	if err := m.db.QueryRowContext(ctx, m.d.waitApplied(st.Received.GTID, timeout)).Scan(&res); err != nil {
		return fmt.Errorf("%s %s: waiting for %s to be applied: %w", m.d.name(), m.ep, st.Received.GTID, err)
	}
	if !res.Valid || res.Int64 != 0 {
		return fmt.Errorf("%s %s: %s not applied within %d s", m.d.name(), m.ep, st.Received.GTID, timeout)
	}
	return nil
}

func (m *mysqlFamily) Compare(a, b Position) (int, error) { return m.d.compare(a.GTID, b.GTID) }

// KeepSlots: MySQL and MariaDB have no slots; binary logs serve replicas.
func (m *mysqlFamily) KeepSlots(context.Context, string, []string) (Slots, error) {
	return Slots{}, nil
}

func (m *mysqlFamily) DropSlot(context.Context, string) error { return nil }

// ReloadTLS reloads the server's TLS context from its certificate files
// (MariaDB 10.4 and later: FLUSH SSL; MySQL 8: ALTER INSTANCE, which is
// not logged). Never into the binary log: a FLUSH logged on a replica is
// a transaction of its own, and with strict GTIDs the primary's next one
// then stops its replication.
func (m *mysqlFamily) ReloadTLS(ctx context.Context) error {
	stmt := "ALTER INSTANCE RELOAD TLS"
	if _, ok := m.d.(mariadbDialect); ok {
		stmt = "FLUSH NO_WRITE_TO_BINLOG SSL"
	}
	return m.exec(ctx, []string{stmt})
}

func (m *mysqlFamily) ForkPoint(context.Context, uint32) (Position, bool, error) {
	return Position{}, false, ErrNoTimelines
}

func (m *mysqlFamily) Lag(replica, primary Position) (int64, error) {
	return m.d.lag(replica.GTID, primary.GTID)
}

func (m *mysqlFamily) ServerVersion(ctx context.Context) (string, error) {
	var v string
	if err := m.db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&v); err != nil {
		return "", fmt.Errorf("%s %s: reading server version: %w", m.d.name(), m.ep, err)
	}
	return v, nil
}

// systemSchema reports the server's own schemas: not part of a logical
// backup (mysql holds the users, including the operator's superuser, whose
// password differs in the Database a backup is restored into).
func systemSchema(name string) bool {
	switch name {
	case "mysql", "information_schema", "performance_schema", "sys":
		return true
	}
	return false
}

func (m *mysqlFamily) Databases(ctx context.Context) ([]string, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT schema_name FROM information_schema.schemata ORDER BY schema_name`)
	if err != nil {
		return nil, fmt.Errorf("%s %s: listing databases: %w", m.d.name(), m.ep, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		if !systemSchema(n) {
			names = append(names, n)
		}
	}
	return names, rows.Err()
}

func (m *mysqlFamily) Empty(ctx context.Context) (bool, error) {
	dbs, err := m.Databases(ctx)
	return len(dbs) == 0, err
}

func (m *mysqlFamily) ApplyParameters(ctx context.Context, want map[string]string) ([]string, error) {
	var changed []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if err := settingName(name); err != nil {
			return changed, err
		}
		read := func() (string, error) {
			var v sql.NullString
			err := m.db.QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v)
			return v.String, err
		}
		before, err := read()
		if err != nil {
			return changed, fmt.Errorf("%s %s: reading %s: %w", m.d.name(), m.ep, name, err)
		}
		if _, err := m.db.ExecContext(ctx, "SET GLOBAL "+name+" = "+mysqlSettingValue(want[name])); err != nil {
			return changed, fmt.Errorf("%s %s: setting %s: %w", m.d.name(), m.ep, name, err)
		}
		if after, err := read(); err != nil || after != before {
			changed = append(changed, name)
		}
	}
	return changed, nil
}

func (m *mysqlFamily) Archiver(context.Context) (Archiver, error) { return Archiver{}, ErrNoArchiver }

// BinaryLog is one of a MySQL or MariaDB server's binary log files.
type BinaryLog struct {
	Name string
	Size int64
}

// BinaryLogs lists the server's binary log files, oldest first (SHOW
// BINARY LOGS): the last is the one it writes.
func (m *mysqlFamily) BinaryLogs(ctx context.Context) ([]BinaryLog, error) {
	return BinaryLogs(ctx, m.db)
}

// FlushBinaryLogs closes the current binary log file and starts the next.
func (m *mysqlFamily) FlushBinaryLogs(ctx context.Context) error {
	if err := FlushBinaryLogs(ctx, m.db); err != nil {
		return fmt.Errorf("%s %s: %w", m.d.name(), m.ep, err)
	}
	return nil
}

// FlushBinaryLogs runs FLUSH BINARY LOGS on db.
func FlushBinaryLogs(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		return fmt.Errorf("closing the current binary log: %w", err)
	}
	return nil
}

// BinaryLogDir is the directory holding the server's binary log files and
// its data directory.
func (m *mysqlFamily) BinaryLogDir(ctx context.Context) (binlogs, data string, err error) {
	var base sql.NullString
	if err := m.db.QueryRowContext(ctx, "SELECT @@log_bin_basename, @@datadir").Scan(&base, &data); err != nil {
		return "", "", fmt.Errorf("%s %s: reading where the binary logs are: %w", m.d.name(), m.ep, err)
	}
	if !base.Valid || base.String == "" {
		return "", "", fmt.Errorf("%s %s: the server keeps no binary log (log-bin is off)", m.d.name(), m.ep)
	}
	return filepath.Dir(base.String), data, nil
}

// BinaryLogs runs SHOW BINARY LOGS on db.
func BinaryLogs(ctx context.Context, db *sql.DB) ([]BinaryLog, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("listing the binary logs: %w", err)
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []BinaryLog
	for rows.Next() {
		var f BinaryLog
		dest := []any{&f.Name, &f.Size}
		for range len(cols) - 2 { // MySQL 8 adds Encrypted
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// BinlogPosition reads @@gtid_binlog_pos (MariaDB): the last transaction
// the server logged in each domain.
func BinlogPosition(ctx context.Context, db *sql.DB) (string, error) {
	var pos string
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return "", fmt.Errorf("reading the binary log position: %w", err)
	}
	return pos, nil
}

// BinlogPosition reads the server's @@gtid_binlog_pos.
func (m *mysqlFamily) BinlogPosition(ctx context.Context) (string, error) {
	return BinlogPosition(ctx, m.db)
}
