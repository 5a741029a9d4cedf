package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/database-operator/internal/parameters"
)

// ErrNotInRecovery means Follow was asked of a PostgreSQL primary: it can
// only become a standby by restarting with standby.signal (after pg_rewind
// when it has diverged), which is the instance's start script's job.
var ErrNotInRecovery = errors.New("instance is a primary, not a standby: restart it as a standby (pg_rewind) to follow another primary")

type postgres struct {
	conn    *pgx.Conn
	ep      Endpoint
	peerCA  string // Options.PeerCAFile
	segSize uint64 // wal_segment_size, read at the first need
}

func openPostgres(ctx context.Context, ep Endpoint, creds Credentials, opts Options) (*postgres, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	connectTo(&cfg.Config, ep, creds, opts, "database-operator")
	// A user's statement_timeout (spec.parameters) must not cancel the
	// operator's own calls: a cancelled pg_promote(wait) goes on promoting.
	// Every call is bounded by its context instead.
	cfg.RuntimeParams["statement_timeout"] = "0"
	cfg.RuntimeParams["lock_timeout"] = "0"
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL at %s: %w", ep, err)
	}
	return &postgres{conn: conn, ep: ep, peerCA: opts.PeerCAFile}, nil
}

func (p *postgres) Close() error { return p.conn.Close(context.Background()) }

func (p *postgres) Status(ctx context.Context) (Status, error) {
	var inRecovery bool
	var readOnly string
	if err := p.conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')`).Scan(&inRecovery, &readOnly); err != nil {
		return Status{}, fmt.Errorf("PostgreSQL %s: reading role: %w", p.ep, err)
	}
	if !inRecovery {
		// The timeline is the first 8 hex digits of the current WAL file's
		// name: right after a promotion, unlike the checkpoint's timeline.
		var lsnText, walFile string
		var sync int
		if err := p.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn()),
			(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))`).Scan(&lsnText, &walFile, &sync); err != nil {
			return Status{}, fmt.Errorf("PostgreSQL %s: reading WAL position: %w", p.ep, err)
		}
		pos, err := pgPosition(walFile[:8], lsnText)
		if err != nil {
			return Status{}, err
		}
		return Status{Role: RolePrimary, ReadOnly: readOnly == "on", Received: pos, Applied: pos, SyncReplicas: sync}, nil
	}

	var received, replayed *string
	var checkpointTLI int64
	var paused bool
	if err := p.conn.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text, (SELECT timeline_id FROM pg_control_checkpoint()), pg_is_wal_replay_paused()`).Scan(&received, &replayed, &checkpointTLI, &paused); err != nil {
		return Status{}, fmt.Errorf("PostgreSQL %s: reading replay position: %w", p.ep, err)
	}
	st := Status{Role: RoleReplica, ReadOnly: true, Applying: !paused}
	if paused {
		st.ReplicationError = "WAL replay is paused (pg_wal_replay_pause)"
	}
	var receiverTLI int64
	var receiverStatus, host string
	var port int
	err := p.conn.QueryRow(ctx, `SELECT received_tli, status, coalesce(sender_host, ''), coalesce(sender_port, 0) FROM pg_stat_wal_receiver`).Scan(&receiverTLI, &receiverStatus, &host, &port)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		receiverTLI = checkpointTLI
	case err != nil:
		return Status{}, fmt.Errorf("PostgreSQL %s: reading WAL receiver: %w", p.ep, err)
	default:
		st.Streaming = receiverStatus == "streaming"
		if host != "" {
			st.Source = Endpoint{Host: host, Port: port}.String()
		}
	}
	if replayed == nil {
		return Status{}, fmt.Errorf("PostgreSQL %s: in recovery but no replay position yet", p.ep)
	}
	if st.Applied, err = pgPosition(strconv.FormatInt(receiverTLI, 16), *replayed); err != nil {
		return Status{}, err
	}
	st.Received = st.Applied
	if received != nil {
		if st.Received, err = pgPosition(strconv.FormatInt(receiverTLI, 16), *received); err != nil {
			return Status{}, err
		}
		if st.Received.LSN < st.Applied.LSN { // replayed from the archive or pg_wal beyond what streamed
			st.Received = st.Applied
		}
	}
	st.Behind = int64(st.Received.LSN - st.Applied.LSN)
	if st.ReplayTimeline, err = p.replayTimeline(ctx, st.Applied.LSN); err != nil {
		return Status{}, err
	}
	return st, nil
}

// replayTimeline is the newest timeline of the WAL segments in pg_wal
// that hold the byte before lsn (the last one replayed): the segment
// recovery reads is on the timeline it replays, and a newer timeline's
// copy of that segment exists only once the standby received it. 0 when
// no segment holds it (replayed from an archive, since removed).
func (p *postgres) replayTimeline(ctx context.Context, lsn LSN) (uint32, error) {
	if lsn == 0 {
		return 0, nil
	}
	if p.segSize == 0 {
		if err := p.conn.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'`).Scan(&p.segSize); err != nil {
			return 0, fmt.Errorf("PostgreSQL %s: reading wal_segment_size: %w", p.ep, err)
		}
		if p.segSize == 0 || 0x100000000%p.segSize != 0 {
			return 0, fmt.Errorf("PostgreSQL %s: wal_segment_size %d is no power of two up to 4 GiB", p.ep, p.segSize)
		}
	}
	seg := (uint64(lsn) - 1) / p.segSize
	perID := 0x100000000 / p.segSize
	suffix := fmt.Sprintf("%08X%08X", seg/perID, seg%perID)
	rows, err := p.conn.Query(ctx, `SELECT name FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$' AND substr(name, 9) = $1`, suffix)
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL %s: listing pg_wal: %w", p.ep, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL %s: listing pg_wal: %w", p.ep, err)
	}
	var newest uint32
	for _, name := range names {
		tli, err := strconv.ParseUint(name[:8], 16, 32)
		if err == nil && uint32(tli) > newest {
			newest = uint32(tli)
		}
	}
	return newest, nil
}

func pgPosition(tliHex, lsnText string) (Position, error) {
	tli, err := strconv.ParseUint(tliHex, 16, 32)
	if err != nil {
		return Position{}, fmt.Errorf("timeline %q: %w", tliHex, err)
	}
	lsn, err := ParseLSN(lsnText)
	if err != nil {
		return Position{}, err
	}
	return Position{Timeline: uint32(tli), LSN: lsn}, nil
}

// Fence stops the server taking an application's writes without a
// restart: pg_hba.conf gets rules at its top that refuse every login role
// that is neither superuser nor replication (the operator and the
// replicas still connect), new transactions default to read-only, and
// every other client session is ended. The read-only default alone is
// soft (any session may turn it off for itself); the login rules are
// what an application cannot get round. Nothing of it writes WAL, so a
// replica catching up on a fenced primary receives none of it.
func (p *postgres) Fence(ctx context.Context) error {
	if err := p.fenceLogins(ctx, true); err != nil {
		return err
	}
	// The reload in setSystem also loads the login rules.
	if err := p.setSystem(ctx, `ALTER SYSTEM SET default_transaction_read_only = on`, "on"); err != nil {
		return err
	}
	// Each session is waited for (up to sessionEndWait): one already in
	// its commit finishes it, and must not be acknowledged after the
	// caller read the position it fenced at. A session that ended on its
	// own meanwhile is no failure: those still there afterwards are.
	var pids []int32
	if err := p.conn.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&pids); err != nil {
		return fmt.Errorf("PostgreSQL %s: listing client sessions: %w", p.ep, err)
	}
	if len(pids) == 0 {
		return nil
	}
	if _, err := p.conn.Exec(ctx, `SELECT pg_terminate_backend(pid, $2) FROM unnest($1::int[]) AS pid`, pids, sessionEndWait.Milliseconds()); err != nil {
		return fmt.Errorf("PostgreSQL %s: ending client sessions: %w", p.ep, err)
	}
	var lingering int
	if err := p.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&lingering); err != nil {
		return fmt.Errorf("PostgreSQL %s: checking the ended sessions: %w", p.ep, err)
	}
	if lingering > 0 {
		return fmt.Errorf("PostgreSQL %s: %d client sessions did not end within %s", p.ep, lingering, sessionEndWait)
	}
	return nil
}

// sessionEndWait bounds how long a fence waits for the sessions it ended
// to be gone.
const sessionEndWait = 5 * time.Second

func (p *postgres) Unfence(ctx context.Context) error {
	if err := p.fenceLogins(ctx, false); err != nil {
		return err
	}
	return p.setSystem(ctx, `ALTER SYSTEM RESET default_transaction_read_only`, "off")
}

// The fence's rules in pg_hba.conf sit between these lines.
const (
	hbaFenceBegin = "# database-operator fence: begin (application logins refused)"
	hbaFenceEnd   = "# database-operator fence: end"
)

// fenceLogins puts the fence's rules at the top of the server's
// pg_hba.conf (on) or takes them out (off); the caller reloads. The server
// rewrites its own file (COPY TO, as superuser), so it works wherever the
// file is; the chart's start script writes it afresh from the
// configuration at every start, so no fence outlives a restart. A role
// whose name holds a double quote cannot be named in pg_hba.conf: its
// sessions are still ended and default to read-only.
func (p *postgres) fenceLogins(ctx context.Context, on bool) error {
	var path, content string
	if err := p.conn.QueryRow(ctx, `SELECT current_setting('hba_file'), pg_read_file(current_setting('hba_file'))`).Scan(&path, &content); err != nil {
		return fmt.Errorf("PostgreSQL %s: reading pg_hba.conf: %w", p.ep, err)
	}
	lines := unfencedHBA(strings.Split(strings.TrimSuffix(content, "\n"), "\n"))
	if on {
		var roles []string
		if err := p.conn.QueryRow(ctx, `SELECT coalesce(array_agg(rolname::text ORDER BY rolname), '{}') FROM pg_roles
			WHERE rolcanlogin AND NOT rolsuper AND NOT rolreplication AND position('"' in rolname) = 0`).Scan(&roles); err != nil {
			return fmt.Errorf("PostgreSQL %s: listing login roles: %w", p.ep, err)
		}
		if len(roles) > 0 {
			users := `"` + strings.Join(roles, `","`) + `"`
			lines = append([]string{hbaFenceBegin, "local all " + users + " reject", "host all " + users + " all reject", hbaFenceEnd}, lines...)
		}
	}
	want := strings.Join(lines, "\n") + "\n"
	if want == content {
		return nil
	}
	quoted := make([]string, len(lines))
	for i, l := range lines {
		quoted[i] = sqlLiteral(l)
	}
	// One row per line; csv with delimiter and quote characters no line
	// holds writes each line as it is (text format would escape tabs), an
	// empty line as NULL (csv quotes an empty string).
	stmt := `COPY (SELECT nullif(l, '') FROM unnest(ARRAY[` + strings.Join(quoted, ",") + `]::text[]) WITH ORDINALITY AS t(l, n) ORDER BY n) TO ` +
		sqlLiteral(path) + ` WITH (FORMAT csv, DELIMITER E'\x01', QUOTE E'\x02')`
	if _, err := p.conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("PostgreSQL %s: writing pg_hba.conf: %w", p.ep, err)
	}
	return nil
}

// unfencedHBA is pg_hba.conf's lines without the fence's rules.
func unfencedHBA(lines []string) []string {
	out := make([]string, 0, len(lines))
	in := false
	for _, l := range lines {
		switch {
		case l == hbaFenceBegin:
			in = true
		case l == hbaFenceEnd:
			in = false
		case !in:
			out = append(out, l)
		}
	}
	return out
}

// setSystem runs an ALTER SYSTEM, reloads, and waits until new sessions see
// default_transaction_read_only at want (the reload is asynchronous).
func (p *postgres) setSystem(ctx context.Context, stmt, want string) error {
	if _, err := p.conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("PostgreSQL %s: %s: %w", p.ep, stmt, err)
	}
	if _, err := p.conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("PostgreSQL %s: reloading configuration: %w", p.ep, err)
	}
	return poll(ctx, 50*time.Millisecond, func() (bool, error) {
		// The postmaster's reloaded value shows in a fresh session, and in
		// pg_file_settings at once; pg_settings of this session follows
		// its own reload, so check that after a no-op transaction.
		var got string
		err := p.conn.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'default_transaction_read_only'`).Scan(&got)
		return got == want, err
	})
}

func (p *postgres) Promote(ctx context.Context) error {
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPromotionNotStarted, err)
	}
	if st.Role == RoleReplica {
		var ok bool
		if err := p.conn.QueryRow(ctx, `SELECT pg_promote(wait => true, wait_seconds => 60)`).Scan(&ok); err != nil {
			return fmt.Errorf("PostgreSQL %s: promoting: %w", p.ep, err)
		}
		if !ok {
			return fmt.Errorf("PostgreSQL %s: promotion did not finish within 60 s", p.ep)
		}
		// The new timeline reaches pg_control only at the next checkpoint;
		// until then pg_rewind against this server sees the old timeline and
		// wrongly finds no rewind required for the former primary.
		if _, err := p.conn.Exec(ctx, `CHECKPOINT`); err != nil {
			return fmt.Errorf("PostgreSQL %s: checkpoint after promotion: %w", p.ep, err)
		}
		if _, err := p.conn.Exec(ctx, `ALTER SYSTEM RESET primary_conninfo`); err != nil {
			return fmt.Errorf("PostgreSQL %s: clearing primary_conninfo: %w", p.ep, err)
		}
	}
	return p.Unfence(ctx)
}

func (p *postgres) Follow(ctx context.Context, primary Endpoint, repl Credentials) error {
	var inRecovery bool
	if err := p.conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil {
		return fmt.Errorf("PostgreSQL %s: %w", p.ep, err)
	}
	if !inRecovery {
		return fmt.Errorf("PostgreSQL %s: %w", p.ep, ErrNotInRecovery)
	}
	// No password: the server logs every change of primary_conninfo with
	// its value. The WAL receiver reads it from the server's password file
	// (PGPASSFILE, which the start script writes and the server inherits).
	conninfo := fmt.Sprintf("host=%s port=%d user=%s application_name=%s",
		conninfoValue(primary.Host), primary.Port, conninfoValue(repl.User), conninfoValue(p.applicationName()))
	if p.peerCA != "" && primary.ServerName != "" {
		// verify-full checks the certificate against host: the primary's
		// name, resolved at each connect (a pinned address could be another
		// pod's by then, which the wildcard certificate would not tell).
		conninfo = fmt.Sprintf("host=%s port=%d user=%s application_name=%s sslmode=verify-full sslrootcert=%s",
			conninfoValue(primary.name()), primary.Port, conninfoValue(repl.User), conninfoValue(p.applicationName()), conninfoValue(p.peerCA))
	}
	// ALTER SYSTEM takes no parameters: quote the value as a literal.
	if _, err := p.conn.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = `+sqlLiteral(conninfo)); err != nil {
		return fmt.Errorf("PostgreSQL %s: setting primary_conninfo: %w", p.ep, err)
	}
	// recovery_target_timeline defaults to 'latest', so the standby follows
	// the new primary's timeline; primary_conninfo reloads without a restart.
	if _, err := p.conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("PostgreSQL %s: reloading configuration: %w", p.ep, err)
	}
	return nil
}

// ReloadTLS reloads the configuration, which reads ssl_cert_file and
// ssl_key_file again.
func (p *postgres) ReloadTLS(ctx context.Context) error {
	if _, err := p.conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("PostgreSQL %s: reloading the certificate: %w", p.ep, err)
	}
	return nil
}

func (p *postgres) applicationName() string {
	return strings.NewReplacer(".", "_", ":", "_").Replace(p.ep.String())
}

func (p *postgres) WaitApplied(ctx context.Context) error {
	st, err := p.Status(ctx)
	if err != nil {
		return err
	}
	if st.Role == RolePrimary {
		return nil
	}
	target := st.Received.LSN
	return poll(ctx, 20*time.Millisecond, func() (bool, error) {
		var replayed *string
		if err := p.conn.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn()::text`).Scan(&replayed); err != nil || replayed == nil {
			return false, err
		}
		lsn, err := ParseLSN(*replayed)
		return lsn >= target, err
	})
}

// Compare orders by timeline, then WAL location.
// ForkPoint reads the server's timeline history file (pg_wal/<TLI>.history
// of its current timeline, one line per ancestor: parent timeline, the
// LSN where it was left, why).
func (p *postgres) ForkPoint(ctx context.Context, tli uint32) (Position, bool, error) {
	st, err := p.Status(ctx)
	if err != nil {
		return Position{}, false, err
	}
	current := st.Applied.Timeline
	if current == tli {
		return Position{}, false, nil
	}
	var history string
	name := fmt.Sprintf("pg_wal/%08X.history", current)
	if err := p.conn.QueryRow(ctx, `SELECT pg_read_file($1)`, name).Scan(&history); err != nil {
		return Position{}, false, fmt.Errorf("PostgreSQL %s: reading %s: %w", p.ep, name, err)
	}
	for _, line := range strings.Split(history, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		parent, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || uint32(parent) != tli {
			continue
		}
		lsn, err := ParseLSN(f[1])
		if err != nil {
			return Position{}, false, fmt.Errorf("PostgreSQL %s: %s: %w", p.ep, name, err)
		}
		return Position{Timeline: tli, LSN: lsn}, true, nil
	}
	return Position{}, false, fmt.Errorf("PostgreSQL %s: timeline %d is not in the history of timeline %d", p.ep, tli, current)
}

func (p *postgres) Compare(a, b Position) (int, error) {
	switch {
	case a.Timeline != b.Timeline:
		return cmp(a.Timeline, b.Timeline), nil
	default:
		return cmp(a.LSN, b.LSN), nil
	}
}

// Lag is the WAL between the two locations. Across a timeline switch the
// locations still count bytes of one WAL stream, so the difference holds.
func (p *postgres) Lag(replica, primary Position) (int64, error) {
	return walBytesBehind(replica.LSN, primary.LSN), nil
}

func walBytesBehind(replica, primary LSN) int64 {
	if primary <= replica {
		return 0
	}
	return int64(primary - replica)
}

func cmp[T ~uint32 | ~uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// conninfoValue quotes a libpq connection-string value.
func conninfoValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// sqlLiteral quotes a string as a standard SQL literal.
func (p *postgres) KeepSlots(ctx context.Context, prefix string, names []string) (Slots, error) {
	var out Slots
	// Only the operator's own slots: the prefix and an ordinal
	// (<name>_<n>). A user's own slot named <name>_cdc is not touched.
	rows, err := p.conn.Query(ctx, `SELECT slot_name, coalesce(wal_status, '') FROM pg_replication_slots
		WHERE slot_type = 'physical' AND starts_with(slot_name, $1) AND substr(slot_name, length($1) + 1) ~ '^[0-9]+$'`, prefix)
	if err != nil {
		return out, fmt.Errorf("PostgreSQL %s: listing replication slots: %w", p.ep, err)
	}
	have := map[string]string{}
	for rows.Next() {
		var name, status string
		if err := rows.Scan(&name, &status); err != nil {
			rows.Close()
			return out, fmt.Errorf("PostgreSQL %s: listing replication slots: %w", p.ep, err)
		}
		have[name] = status
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("PostgreSQL %s: listing replication slots: %w", p.ep, err)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(have)) {
		switch {
		case !slices.Contains(names, name):
			if err := p.DropSlot(ctx, name); err != nil {
				errs = append(errs, err)
				continue
			}
			out.Dropped = append(out.Dropped, name)
		case have[name] == "lost":
			out.Lost = append(out.Lost, name)
		}
	}
	for _, name := range names {
		if _, ok := have[name]; ok {
			continue
		}
		// Reserved at once: the WAL from here on is kept for a replica
		// that has not connected yet (a former primary, after a failover).
		if _, err := p.conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true)`, name); err != nil {
			errs = append(errs, fmt.Errorf("PostgreSQL %s: creating replication slot %s: %w", p.ep, name, err))
			continue
		}
		out.Created = append(out.Created, name)
	}
	return out, errors.Join(errs...)
}

func (p *postgres) DropSlot(ctx context.Context, name string) error {
	// A slot still in use (its walsender not yet gone) cannot be dropped:
	// the error says so, and the next reconcile tries again.
	if _, err := p.conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name); err != nil {
		return fmt.Errorf("PostgreSQL %s: dropping replication slot %s: %w", p.ep, name, err)
	}
	return nil
}

func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// poll calls check every interval until it reports done, fails, or ctx ends.
func poll(ctx context.Context, interval time.Duration, check func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (p *postgres) ServerVersion(ctx context.Context) (string, error) {
	var v string
	if err := p.conn.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "", fmt.Errorf("PostgreSQL %s: reading server version: %w", p.ep, err)
	}
	return v, nil
}

func (p *postgres) Databases(ctx context.Context) ([]string, error) {
	rows, err := p.conn.Query(ctx, `SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname`)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL %s: listing databases: %w", p.ep, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL %s: listing databases: %w", p.ep, err)
	}
	return names, nil
}

func (p *postgres) Empty(ctx context.Context) (bool, error) {
	var others, tables int
	err := p.conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres'),
		(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%')`).Scan(&others, &tables)
	if err != nil {
		return false, fmt.Errorf("PostgreSQL %s: checking for data: %w", p.ep, err)
	}
	return others == 0 && tables == 0, nil
}

// EnsureAccount creates or updates the application account (a role that
// logs in with the given password and nothing more) and its database,
// which it owns, or the replication account (a role that logs in and
// streams WAL: REPLICATION, no database). The password travels as a SCRAM
// verifier.
func (p *postgres) EnsureAccount(ctx context.Context, a Account) error {
	if err := a.validate(); err != nil {
		return err
	}
	verifier, err := SCRAMVerifier(a.Password)
	if err != nil {
		return err
	}
	role := pgx.Identifier{a.User}.Sanitize()
	var exists bool
	if err := p.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, a.User).Scan(&exists); err != nil {
		return fmt.Errorf("PostgreSQL %s: looking up role %s: %w", p.ep, a.User, err)
	}
	verb := "CREATE ROLE " + role
	if exists {
		verb = "ALTER ROLE " + role + " WITH"
	}
	replication := "NOREPLICATION"
	if a.Replication {
		replication = "REPLICATION"
	}
	if _, err := p.conn.Exec(ctx, verb+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "+replication+" NOBYPASSRLS PASSWORD '"+verifier+"'"); err != nil {
		return fmt.Errorf("PostgreSQL %s: %s (password set by verifier): %w", p.ep, verb, err)
	}
	if a.Replication {
		return nil
	}
	if a.Monitoring {
		// pg_monitor reads every statistics view and setting, no table.
		if _, err := p.conn.Exec(ctx, "GRANT pg_monitor TO "+role); err != nil {
			return fmt.Errorf("PostgreSQL %s: granting pg_monitor to %s: %w", p.ep, a.User, err)
		}
		return nil
	}
	if err := p.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, a.Database).Scan(&exists); err != nil {
		return fmt.Errorf("PostgreSQL %s: looking up database %s: %w", p.ep, a.Database, err)
	}
	if !exists {
		if _, err := p.conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{a.Database}.Sanitize()+" OWNER "+role); err != nil {
			return fmt.Errorf("PostgreSQL %s: creating database %s: %w", p.ep, a.Database, err)
		}
	}
	return nil
}

func (p *postgres) ApplyParameters(ctx context.Context, want map[string]string) (changed []string, err error) {
	// What was set is reloaded even when a later setting fails: it is in
	// postgresql.auto.conf already, and the next call would find it there
	// and not reload it.
	defer func() {
		if len(changed) == 0 {
			return
		}
		if _, rerr := p.conn.Exec(ctx, `SELECT pg_reload_conf()`); rerr != nil && err == nil {
			err = fmt.Errorf("PostgreSQL %s: reloading configuration: %w", p.ep, rerr)
		}
	}()
	return p.alterSystem(ctx, want)
}

// alterSystem makes postgresql.auto.conf hold want (and no other user
// setting) and returns the names it changed.
func (p *postgres) alterSystem(ctx context.Context, want map[string]string) ([]string, error) {
	// What postgresql.auto.conf holds: ALTER SYSTEM's own file, read after
	// postgresql.conf, so what it says wins.
	rows, err := p.conn.Query(ctx, `SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE '%/postgresql.auto.conf' ORDER BY seqno`)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL %s: reading postgresql.auto.conf: %w", p.ep, err)
	}
	auto := map[string]string{}
	for rows.Next() {
		var name, setting string
		if err := rows.Scan(&name, &setting); err != nil {
			rows.Close()
			return nil, err
		}
		auto[name] = setting
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var changed []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		v := want[name]
		if have, ok := auto[name]; ok && sameSetting(have, v) {
			continue
		}
		if err := settingName(name); err != nil {
			return changed, err
		}
		value := sqlLiteral(v)
		if postgresListParameters[name] {
			var items []string
			for _, item := range strings.Split(v, ",") {
				items = append(items, sqlLiteral(strings.TrimSpace(item)))
			}
			value = strings.Join(items, ", ")
		}
		if _, err := p.conn.Exec(ctx, `ALTER SYSTEM SET `+name+` = `+value); err != nil {
			return changed, fmt.Errorf("PostgreSQL %s: setting %s: %w", p.ep, name, err)
		}
		changed = append(changed, name)
	}
	for _, name := range slices.Sorted(maps.Keys(auto)) {
		if _, wanted := want[name]; wanted || parameters.OperatorOwned("postgresql", name) != "" {
			continue // the operator's own (the fence, primary_conninfo) stay
		}
		if err := settingName(name); err != nil {
			return changed, err
		}
		if _, err := p.conn.Exec(ctx, `ALTER SYSTEM RESET `+name); err != nil {
			return changed, fmt.Errorf("PostgreSQL %s: resetting %s: %w", p.ep, name, err)
		}
		changed = append(changed, name)
	}
	return changed, nil
}

func (p *postgres) Archiver(ctx context.Context) (Archiver, error) {
	var a Archiver
	var lastArchived, lastFailed *string
	var lastArchivedAt, lastFailedAt *time.Time
	if err := p.conn.QueryRow(ctx, `SELECT current_setting('archive_mode'), archived_count, last_archived_wal, last_archived_time, failed_count, last_failed_wal, last_failed_time,
			current_setting('data_directory'), (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')
		FROM pg_stat_archiver`).
		Scan(&a.Mode, &a.Archived, &lastArchived, &lastArchivedAt, &a.Failed, &lastFailed, &lastFailedAt, &a.DataDir, &a.SegmentSize); err != nil {
		return Archiver{}, fmt.Errorf("PostgreSQL %s: reading pg_stat_archiver: %w", p.ep, err)
	}
	if lastArchived != nil {
		a.LastArchived = *lastArchived
	}
	if lastArchivedAt != nil {
		a.LastArchivedAt = *lastArchivedAt
	}
	if lastFailed != nil {
		a.LastFailed = *lastFailed
	}
	if lastFailedAt != nil {
		a.LastFailedAt = *lastFailedAt
	}
	return a, nil
}
