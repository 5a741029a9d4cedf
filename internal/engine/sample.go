package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	dbv1 "example.com/database-operator/api/v1"
)

// Sample is one reading of a server for its metrics (the agent's
// /metrics), taken with the monitoring account (MonitoringUser): its role
// and replication state, and what its users watch. Every query it runs
// needs only that account's rights (see Account: PostgreSQL's pg_monitor;
// MySQL and MariaDB: PROCESS, the replication and binary log monitoring
// rights).
type Sample struct {
	// Status is the server's role and replication state, as Instance.Status.
	Status Status
	// Version is the server's version string.
	Version string
	// Applying, on a replica: it applies what it receives (PostgreSQL: WAL
	// replay is not paused; MySQL and MariaDB: the SQL thread runs).
	Applying bool
	// LagSeconds, on a replica, is how far behind its source the data it
	// applied is, by the server's own account, when it gives one
	// (LagKnown): PostgreSQL, the time since the last transaction it
	// replayed was committed on the primary (while it has received more
	// than it replayed; 0 otherwise); MySQL and MariaDB, Seconds_Behind_Master
	// (unknown while the SQL or IO thread is stopped).
	LagSeconds float64
	LagKnown   bool
	// Connections are the client sessions now; MaxConnections the
	// server's max_connections.
	Connections, MaxConnections int64
	// XIDAge (PostgreSQL) is the age in transactions of the oldest
	// datfrozenxid: how close the server is to transaction ID wraparound.
	XIDAge int64
	// WALBytes is PostgreSQL's WAL position as a byte count (the
	// primary's current position, a replica's received or replayed one,
	// whichever is further); MySQL and MariaDB: the size of the binary
	// logs the server holds (0 without binary logging).
	WALBytes float64
	// DatabaseSizes are the user databases' sizes in bytes: PostgreSQL's
	// pg_database_size of every database that takes connections but the
	// templates; MySQL and MariaDB, the InnoDB tablespace files of each
	// schema but the server's own (a schema without InnoDB tables is not
	// listed: the monitoring account sees no table, only tablespaces).
	DatabaseSizes map[string]int64
}

// Sampler reads Samples of one server over a connection it keeps.
type Sampler interface {
	Sample(ctx context.Context) (Sample, error)
	Close() error
}

// sampler is what each engine's implementation offers.
type sampler interface {
	sample(ctx context.Context) (Sample, error)
	Close() error
}

// OpenSampler connects to a server to sample it, with the options' bounds
// (each Sample within CallTimeout, or the caller's deadline when that
// comes sooner). A Sample that fails leaves the connection unusable: close
// the Sampler and open another.
func OpenSampler(ctx context.Context, engine dbv1.Engine, ep Endpoint, creds Credentials, opts Options) (Sampler, error) {
	opts = opts.withDefaults()
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	var (
		s   sampler
		err error
	)
	switch engine {
	case dbv1.EnginePostgreSQL:
		s, err = openPostgres(cctx, ep, creds, opts)
	case dbv1.EngineMySQL:
		s, err = openMySQL(cctx, mysqlDialect{}, ep, creds, opts)
	case dbv1.EngineMariaDB:
		s, err = openMySQL(cctx, mariadbDialect{}, ep, creds, opts)
	default:
		return nil, fmt.Errorf("unknown engine %q", engine)
	}
	if err != nil {
		return nil, err
	}
	return boundedSampler{s: s, call: opts.CallTimeout}, nil
}

type boundedSampler struct {
	s    sampler
	call time.Duration
}

func (b boundedSampler) Sample(ctx context.Context) (Sample, error) {
	ctx, cancel := within(ctx, b.call)
	defer cancel()
	return b.s.sample(ctx)
}

func (b boundedSampler) Close() error { return b.s.Close() }

func (p *postgres) sample(ctx context.Context) (Sample, error) {
	st, err := p.Status(ctx)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{Status: st, WALBytes: float64(max(st.Applied.LSN, st.Received.LSN)), DatabaseSizes: map[string]int64{}}
	if err := p.conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('max_connections')::bigint,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
		(SELECT coalesce(max(age(datfrozenxid)), 0) FROM pg_database)`).Scan(&s.Version, &s.MaxConnections, &s.Connections, &s.XIDAge); err != nil {
		return Sample{}, fmt.Errorf("PostgreSQL %s: reading server state: %w", p.ep, err)
	}
	rows, err := p.conn.Query(ctx, `SELECT datname, pg_database_size(oid) FROM pg_database WHERE datallowconn AND NOT datistemplate`)
	if err != nil {
		return Sample{}, fmt.Errorf("PostgreSQL %s: reading database sizes: %w", p.ep, err)
	}
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			rows.Close()
			return Sample{}, fmt.Errorf("PostgreSQL %s: reading database sizes: %w", p.ep, err)
		}
		s.DatabaseSizes[name] = size
	}
	if err := rows.Err(); err != nil {
		return Sample{}, fmt.Errorf("PostgreSQL %s: reading database sizes: %w", p.ep, err)
	}
	if st.Role != RoleReplica {
		return s, nil
	}
	var paused bool
	var since *float64
	if err := p.conn.QueryRow(ctx, `SELECT pg_is_wal_replay_paused(),
		extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8`).Scan(&paused, &since); err != nil {
		return Sample{}, fmt.Errorf("PostgreSQL %s: reading replay state: %w", p.ep, err)
	}
	s.Applying = !paused
	switch {
	case st.Behind == 0:
		s.LagSeconds, s.LagKnown = 0, true
	case since != nil:
		s.LagSeconds, s.LagKnown = max(0, *since), true
	}
	return s, nil
}

// sampleColumns are the replica status columns of whether the SQL thread
// runs and of its lag, and the table of InnoDB's tablespaces (PROCESS
// right; names are schema/table in the server's file name encoding).
func sampleColumns(d dialect) (sqlRunning, lag, tablespaces string) {
	if _, ok := d.(mariadbDialect); ok {
		return "Slave_SQL_Running", "Seconds_Behind_Master", "information_schema.INNODB_SYS_TABLESPACES"
	}
	return "Replica_SQL_Running", "Seconds_Behind_Source", "information_schema.INNODB_TABLESPACES"
}

// errNoBinaryLogging (ER_NO_BINARY_LOGGING): SHOW BINARY LOGS on a server
// that writes none.
const errNoBinaryLogging = 1381

func (m *mysqlFamily) sample(ctx context.Context) (Sample, error) {
	st, row, err := m.status(ctx)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{Status: st, DatabaseSizes: map[string]int64{}}
	fail := func(what string, err error) (Sample, error) {
		return Sample{}, fmt.Errorf("%s %s: reading %s: %w", m.d.name(), m.ep, what, err)
	}
	var name string
	if err := m.db.QueryRowContext(ctx, `SELECT VERSION(), @@GLOBAL.max_connections`).Scan(&s.Version, &s.MaxConnections); err != nil {
		return fail("server version", err)
	}
	if err := m.db.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Threads_connected'`).Scan(&name, &s.Connections); err != nil {
		return fail("connections", err)
	}
	sqlRunning, lagColumn, tablespaces := sampleColumns(m.d)
	// The schema is the part of the tablespace's name before the slash,
	// decoded from the server's file name encoding (my@002ddb is my-db).
	rows, err := m.db.QueryContext(ctx, `SELECT CONVERT(CONVERT(BINARY SUBSTRING_INDEX(NAME, '/', 1) USING filename) USING utf8mb4) AS db,
		SUM(FILE_SIZE) FROM `+tablespaces+` WHERE NAME LIKE '%/%' GROUP BY db`)
	if err != nil {
		return fail("database sizes", err)
	}
	for rows.Next() {
		var db string
		var size int64
		if err := rows.Scan(&db, &size); err != nil {
			rows.Close()
			return fail("database sizes", err)
		}
		if !systemSchema(db) {
			s.DatabaseSizes[db] = size
		}
	}
	if err := rows.Err(); err != nil {
		return fail("database sizes", err)
	}
	if s.WALBytes, err = m.binaryLogBytes(ctx); err != nil {
		return fail("binary logs", err)
	}
	if st.Role != RoleReplica {
		return s, nil
	}
	s.Applying = row[sqlRunning] == "Yes"
	if v, err := strconv.ParseFloat(row[lagColumn], 64); err == nil {
		s.LagSeconds, s.LagKnown = v, true
	}
	return s, nil
}

// binaryLogBytes sums the sizes SHOW BINARY LOGS lists.
func (m *mysqlFamily) binaryLogBytes(ctx context.Context) (float64, error) {
	rows, err := m.db.QueryContext(ctx, `SHOW BINARY LOGS`)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errNoBinaryLogging {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var total float64
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		if len(vals) > 1 {
			size, err := strconv.ParseFloat(string(vals[1]), 64)
			if err != nil {
				return 0, fmt.Errorf("binary log size %q: %w", vals[1], err)
			}
			total += size
		}
	}
	return total, rows.Err()
}
