// Package pitr recovers a PostgreSQL data directory to a moment: a
// physical base backup unpacked, then the WAL archive replayed up to a
// target by a server of its own, which is promoted, given the new
// Database's passwords and shut down cleanly. The new Database's pods then
// start on the result as on any data directory.
package pitr

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/engine"
)

// Reasons a recovery fails, besides the backup package's (BackupCorrupt,
// InvalidBackup, TargetFailed, TargetNotEmpty).
const (
	// ReasonOutsideWindow: the target lies outside what the base backup
	// and the archive can reach; nothing was written.
	ReasonOutsideWindow = "TargetOutsideWindow"
	// ReasonRecoveryFailed: the server stopped before reaching the target
	// (a corrupt or missing segment, a target it never met).
	ReasonRecoveryFailed = "RecoveryFailed"
)

// Target is where the replay stops: at most one of Time, LSN and Name;
// none replays the whole archive.
type Target struct {
	Time time.Time
	LSN  string
	Name string
}

func (t Target) String() string {
	switch {
	case !t.Time.IsZero():
		return "time " + t.Time.UTC().Format(time.RFC3339Nano)
	case t.LSN != "":
		return "position " + t.LSN
	case t.Name != "":
		return "restore point " + t.Name
	}
	return "the end of the archive"
}

// settings are the server's recovery settings for the target.
func (t Target) settings() []string {
	switch {
	case !t.Time.IsZero():
		return []string{"recovery_target_time=" + t.Time.UTC().Format("2006-01-02 15:04:05.999999+00")}
	case t.LSN != "":
		return []string{"recovery_target_lsn=" + t.LSN}
	case t.Name != "":
		return []string{"recovery_target_name=" + t.Name}
	}
	return nil
}

// Account is a role whose password the recovered server takes from the
// new Database (the backup holds the source's).
type Account struct {
	Name, Password string
	Replication    bool
}

// Options describe one recovery.
type Options struct {
	Store storage.Store
	// Path is the base backup's directory in the store.
	Path string
	// Archive is the WAL archive's prefix in the same store; "" recovers
	// to the base backup's end (no archive).
	Archive string
	// RestoreCommand is the server's restore_command (wal-fetch on
	// Archive), built by the caller: it knows where its binary lives.
	RestoreCommand string
	Target         Target
	// DataDir is the data directory to create; it must not hold data.
	DataDir string
	// Scratch holds the download, the socket and the server's log.
	Scratch string
	// Superuser connects to the recovered server (local trust).
	Superuser string
	// Accounts get the new Database's passwords.
	Accounts []Account
	// Postgres is the server binary; default "postgres" on PATH.
	Postgres string
	Log      func(format string, args ...any)
	// ServerLog, when set, also gets the recovering server's log (and
	// wal-fetch's lines in it): a Job's own log then shows the replay.
	ServerLog io.Writer
	// Drill makes the recovery a restore drill: once promoted, every
	// database is opened and each table's rows counted, then the copy is
	// thrown away (DataDir is scratch). No account is changed.
	Drill bool

	// archiveEnd is what a recovery to the end must reach (read before
	// the server starts).
	archiveEnd *archiveEnd
}

// Outcome is what the recovery reached.
type Outcome struct {
	Manifest *backup.Manifest
	// Position is the recovered server's WAL position once promoted, and
	// Timeline the new timeline it promoted to.
	Position string
	Timeline int64
	// LastReplayed is the commit time of the last transaction replayed
	// (zero when none was).
	LastReplayed time.Time
	// EndOfRecovery is where the replay ended: the new timeline's
	// switch point.
	EndOfRecovery string
	// Unpacking and Replaying are how long the base backup took to check
	// and unpack and the WAL to replay (from the server's start to its
	// promotion); Replayed is how much WAL that was, from where the base
	// backup started.
	Unpacking, Replaying time.Duration
	Replayed             int64
	// Tables is what a drill found: each table's rows, by database.
	Tables []TableCount
}

// TableCount is one table's rows, as a drill counted them.
type TableCount struct {
	Database, Schema, Table string
	Rows                    int64
}

func fail(reason, format string, args ...any) error {
	return &backup.Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Recover unpacks the base backup into a new data directory beside
// DataDir, checks the target against the archive, replays to the target
// and promotes, sets the accounts' passwords, shuts the server down
// cleanly, and only then moves the directory to DataDir: a failure at any
// step leaves no data directory a server would start on.
func Recover(ctx context.Context, o Options) (*Outcome, error) {
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if _, err := os.Stat(filepath.Join(o.DataDir, "PG_VERSION")); err == nil {
		return nil, fail(backup.ReasonNotEmpty, "%s already holds a data directory: a recovery only creates a new one, nothing was changed", o.DataDir)
	}
	m, err := backup.ReadManifest(ctx, o.Store, o.Path)
	if err != nil {
		return nil, err
	}
	if err := checkWindow(ctx, o, m); err != nil {
		return nil, err
	}
	if o.Target == (Target{}) && o.Archive != "" {
		if o.archiveEnd, err = readArchiveEnd(ctx, o); err != nil {
			return nil, err
		}
	}
	work := o.DataDir + ".recovering"
	if err := os.RemoveAll(work); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "clearing an earlier attempt: %w", err)
	}
	logf("unpacking %s into %s", o.Store.Location(o.Path), work)
	out, err := recoverInto(ctx, o, work, logf)
	if err != nil {
		// A copy of the backup, unpacked or half replayed: the backup
		// itself is intact.
		_ = os.RemoveAll(work)
		return nil, err
	}
	out.Manifest = m
	from, ferr := engine.ParseLSN(m.Position)
	if end, eerr := engine.ParseLSN(out.EndOfRecovery); ferr == nil && eerr == nil && end > from {
		out.Replayed = int64(end - from)
	}
	if o.Drill {
		// Proven restorable; nothing of it is kept.
		if err := os.RemoveAll(work); err != nil {
			return nil, fail(backup.ReasonLoadFailed, "removing the drill's copy: %w", err)
		}
		return out, nil
	}
	if err := moveIntoPlace(work, o.DataDir); err != nil {
		return nil, err
	}
	return out, nil
}

// moveIntoPlace makes the recovered work directory the data directory.
// The rename outlives a crash of the node: once the Job says it
// succeeded, the pod must find the data there.
func moveIntoPlace(work, dataDir string) error {
	if err := os.Rename(work, dataDir); err != nil {
		return fail(backup.ReasonLoadFailed, "moving the recovered data directory into place: %w", err)
	}
	if err := syncDir(filepath.Dir(dataDir)); err != nil {
		return fail(backup.ReasonLoadFailed, "syncing %s: %w", filepath.Dir(dataDir), err)
	}
	return nil
}

// recoverInto unpacks the base backup into work and replays it.
func recoverInto(ctx context.Context, o Options, work string, logf func(string, ...any)) (*Outcome, error) {
	start := time.Now()
	if _, err := backup.ExtractPhysical(ctx, o.Store, o.Path, o.Scratch, work); err != nil {
		return nil, err
	}
	unpacking := time.Since(start)
	if err := prepare(work); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "preparing %s for recovery: %w", work, err)
	}
	out, err := replay(ctx, o, work, logf)
	if out != nil {
		out.Unpacking = unpacking
	}
	return out, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkWindow refuses a target the backup and the archive cannot reach,
// before anything is written: a time before the backup ended, or after the
// last segment the archive holds was archived; any target without an
// archive.
func checkWindow(ctx context.Context, o Options, m *backup.Manifest) error {
	t := o.Target
	if t == (Target{}) {
		return nil
	}
	if o.Archive == "" {
		return fail(ReasonOutsideWindow, "%s has no WAL archive: it restores only to its own end, not to %s", o.Store.Location(o.Path), t)
	}
	if t.Time.IsZero() {
		return nil // the server says whether it met an LSN or a name
	}
	if t.Time.Before(m.CompletedAt) {
		return fail(ReasonOutsideWindow, "%s is before the base backup %s completed (%s): pick a later moment or an earlier backup",
			t, o.Store.Location(o.Path), m.CompletedAt.UTC().Format(time.RFC3339))
	}
	arch := wal.Archive{Store: o.Store, Prefix: o.Archive}
	entries, err := arch.List(ctx)
	if err != nil {
		return fail(backup.ReasonTargetFailed, "listing the WAL archive %s: %w", o.Store.Location(o.Archive), err)
	}
	var last time.Time
	for _, e := range entries {
		if e.Archived.After(last) {
			last = e.Archived
		}
	}
	// The segment the primary was writing, streamed, may reach further.
	streamed, err := arch.StreamedUntil(ctx)
	if err != nil {
		return fail(backup.ReasonTargetFailed, "reading the streamed WAL of %s: %w", o.Store.Location(o.Archive), err)
	}
	if !t.Time.Before(last) && !t.Time.Before(streamed) {
		end := fmt.Sprintf("its last segment was archived at %s", last.UTC().Format(time.RFC3339))
		if !streamed.IsZero() {
			end += fmt.Sprintf(", and what was streamed after it holds every transaction before %s", streamed.UTC().Format(time.RFC3339Nano))
		}
		return fail(ReasonOutsideWindow, "%s is past the end of the WAL archive %s: %s", t, o.Store.Location(o.Archive), end)
	}
	return nil
}

// prepare makes an unpacked base backup a server that recovers: it never
// streams from anyone (a base backup of a standby names its primary) and
// starts in archive recovery.
func prepare(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"standby.signal", "postmaster.pid"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	auto := filepath.Join(dir, "postgresql.auto.conf")
	if b, err := os.ReadFile(auto); err == nil {
		var keep []string
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "primary_conninfo") && !strings.HasPrefix(line, "primary_slot_name") {
				keep = append(keep, line)
			}
		}
		if err := os.WriteFile(auto, []byte(strings.Join(keep, "\n")), 0o600); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "recovery.signal"), nil, 0o600)
}

// replay runs the server on dir until it promoted, then sets the
// passwords and stops it cleanly.
func replay(ctx context.Context, o Options, dir string, logf func(string, ...any)) (*Outcome, error) {
	sock, err := os.MkdirTemp(o.Scratch, "sock-")
	if err != nil {
		return nil, fail(backup.ReasonLoadFailed, "socket directory: %w", err)
	}
	defer os.RemoveAll(sock)
	// Local connections only, through a socket in scratch, trusted: no
	// network, and the backup's own hba rules (the source's) never apply.
	hba := filepath.Join(sock, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all all trust\n"), 0o600); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "%w", err)
	}
	args := []string{"-D", dir,
		"-c", "listen_addresses=", "-c", "unix_socket_directories=" + sock, "-c", "hba_file=" + hba,
		// No hot standby: no client reads a half-recovered server, and
		// settings the source ran with (max_connections...) need not match.
		"-c", "hot_standby=off", "-c", "archive_mode=off",
		"-c", "recovery_target_action=promote", "-c", "recovery_target_timeline=latest",
		// The passwords set below never reach the log.
		"-c", "log_statement=none", "-c", "log_min_error_statement=panic", "-c", "logging_collector=off",
	}
	if o.RestoreCommand != "" {
		args = append(args, "-c", "restore_command="+o.RestoreCommand)
	}
	for _, s := range o.Target.settings() {
		args = append(args, "-c", s)
	}
	logFile := filepath.Join(o.Scratch, "recovery.log")
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, fail(backup.ReasonLoadFailed, "%w", err)
	}
	defer lf.Close()
	bin := o.Postgres
	if bin == "" {
		bin = "postgres"
	}
	cmd := exec.Command(bin, args...)
	var w io.Writer = lf
	if o.ServerLog != nil {
		w = io.MultiWriter(lf, o.ServerLog)
	}
	cmd.Stdout, cmd.Stderr = w, w
	logf("replaying the WAL archive to %s", o.Target)
	if err := cmd.Start(); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "starting %s: %w", bin, err)
	}
	// exited closes once the server is gone; waitErr is then its exit.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	// kill stops the server without a checkpoint: what it did is thrown
	// away (the data directory is never moved into place).
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-exited
	}
	started := time.Now()
	conn, err := waitPromoted(ctx, connConfig(o.Superuser, sock, "postgres"), exited, func() error { return waitErr }, logFile)
	replaying := time.Since(started)
	if err != nil {
		kill()
		if ctx.Err() != nil {
			return nil, fail(ReasonRecoveryFailed, "the recovery did not end in time: %w\n%s", ctx.Err(), tail(logFile, 10))
		}
		return nil, err
	}
	out, err := finish(ctx, conn, o.Accounts)
	if err == nil {
		out.Replaying = replaying
		err = reachedEnd(ctx, o, conn, dir, out)
	}
	if err == nil && o.Drill {
		out.Tables, err = countTables(ctx, conn, logf)
	}
	_ = conn.Close(context.Background())
	if err != nil {
		kill()
		return nil, err
	}
	// A clean shutdown: the data directory starts without crash recovery.
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		if waitErr != nil {
			return nil, fail(ReasonRecoveryFailed, "the recovered server did not shut down cleanly: %w\n%s", waitErr, tail(logFile, 10))
		}
	case <-ctx.Done():
		kill()
		return nil, fail(ReasonRecoveryFailed, "the recovered server did not shut down in time")
	}
	logf("recovered to %s: position %s on timeline %d", o.Target, out.Position, out.Timeline)
	return out, nil
}

// waitPromoted connects once the server left recovery (with hot standby
// off it takes no connection before). A server that exits first failed
// its recovery: its log says why.
func waitPromoted(ctx context.Context, cfg *pgx.ConnConfig, exited <-chan struct{}, exitErr func() error, logFile string) (*pgx.Conn, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return nil, fail(ReasonRecoveryFailed, "the server stopped before the recovery ended (%v); nothing was kept:\n%s", exitErr(), tail(logFile, 8))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil {
			continue
		}
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err == nil && !inRecovery {
			return conn, nil
		}
		_ = conn.Close(ctx)
	}
}

// connConfig connects to the recovering server's socket as user.
func connConfig(user, sock, database string) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		panic(err) // an empty connection string always parses
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Database = sock, 5432, user, database
	// Over any role's or database's own settings in the restored catalog.
	cfg.RuntimeParams["log_statement"] = "none"
	cfg.RuntimeParams["log_min_error_statement"] = "panic"
	return cfg
}

// reachedEnd refuses a recovery to the end of the archive that ended
// before it: PostgreSQL takes a segment it cannot fetch (corrupt, or
// missing: a gap) for the end of the WAL and promotes there, quietly
// short of what the archive holds. The replay must end inside or past the
// archive's last segment on the line it replays (o.archiveEnd, read before
// the server started: segments archived meanwhile do not count).
func reachedEnd(ctx context.Context, o Options, conn *pgx.Conn, dir string, out *Outcome) error {
	_, end, err := switchPoint(dir, out.Timeline)
	if err != nil {
		return fail(ReasonRecoveryFailed, "reading where the recovery ended: %w", err)
	}
	out.EndOfRecovery = end.String()
	if o.Target != (Target{}) || o.archiveEnd == nil {
		return nil // the server itself says whether it met the target
	}
	var segSize int64
	if err := conn.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'").Scan(&segSize); err != nil {
		return fail(ReasonRecoveryFailed, "reading the WAL segment size: %w", err)
	}
	last, err := o.archiveEnd.last(segSize)
	switch {
	case err != nil:
		return fail(ReasonRecoveryFailed, "%w", err)
	case last == "":
		return nil // nothing archived since the base backup
	}
	timeline, start, err := segmentStart(last, segSize)
	if err != nil {
		return fail(ReasonRecoveryFailed, "%w", err)
	}
	// Past the segment's start: a segment the server read holds at least
	// its page header and one record; ending right at its start means it
	// read none of it. Positions only grow along the line replayed.
	if end <= start {
		return fail(ReasonRecoveryFailed, "the replay ended at %s, short of the archive's last segment %s (%s on timeline %d): "+
			"a segment up to it could not be fetched (the server's log says which); nothing was kept:\n%s", end, last, start, timeline, tail(filepath.Join(o.Scratch, "recovery.log"), 8))
	}
	return nil
}

// archiveEnd is what a recovery to the end must reach, read from the
// archive before the server starts (what is archived meanwhile does not
// count): the segments archived, the latest timeline and its history.
type archiveEnd struct {
	segments []string
	latest   string // 8 hex digits
	history  string // the latest timeline's history file, if archived
}

// readArchiveEnd reads the archive's end before a recovery to it.
func readArchiveEnd(ctx context.Context, o Options) (*archiveEnd, error) {
	a := wal.Archive{Store: o.Store, Prefix: o.Archive}
	entries, err := a.List(ctx)
	if err != nil {
		return nil, fail(backup.ReasonTargetFailed, "listing the WAL archive %s: %w", o.Store.Location(o.Archive), err)
	}
	end := &archiveEnd{}
	histories := map[string]bool{}
	for _, e := range entries {
		switch {
		case len(e.Name) == 24:
			end.segments = append(end.segments, e.Name)
		case strings.HasSuffix(e.Name, ".history"):
			histories[e.Name] = true
		default:
			continue
		}
		end.latest = max(end.latest, e.Name[:8])
	}
	// The latest timeline's segment its primary was writing, streamed:
	// the replay must reach into it too, or it stopped short of what the
	// stream protects (wal-fetch serves it; a failed fetch of it would end
	// the recovery quietly before it).
	keys, err := o.Store.List(ctx, o.Archive)
	if err != nil {
		return nil, fail(backup.ReasonTargetFailed, "listing the WAL archive %s: %w", o.Store.Location(o.Archive), err)
	}
	for _, name := range a.Streamed(keys) {
		if len(name) == 24 && (name[:8] == end.latest || end.latest == "") {
			end.segments = append(end.segments, name)
			end.latest = name[:8]
		}
	}
	if history := end.latest + ".history"; histories[history] {
		file := filepath.Join(o.Scratch, history)
		if _, err := a.Fetch(ctx, history, file); err != nil {
			return nil, fail(ReasonRecoveryFailed, "reading timeline %s's history from the archive: %w", end.latest, err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fail(backup.ReasonLoadFailed, "%w", err)
		}
		end.history = string(b)
	}
	return end, nil
}

// last is the archive's last segment on the line a recovery to the end
// replays: the latest timeline's, and before it the segments of each
// timeline it descends from up to where that one was left (its later
// segments are an abandoned history). "" when there is none.
func (a *archiveEnd) last(segSize int64) (string, error) {
	ends, err := wal.SwitchSegments(a.history, segSize)
	if err != nil {
		return "", fmt.Errorf("timeline %s's history: %w", a.latest, err)
	}
	last := ""
	for _, name := range a.segments {
		tli, seg := name[:8], name[8:]
		end, ancestor := ends[tli]
		if (tli == a.latest || ancestor && seg < end) && (last == "" || seg > last[8:]) {
			last = name
		}
	}
	return last, nil
}

// switchPoint reads the timeline history file a promotion wrote: the
// timeline the replay ended on and where.
func switchPoint(dir string, timeline int64) (int64, engine.LSN, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pg_wal", fmt.Sprintf("%08X.history", timeline)))
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 2 {
		return 0, 0, fmt.Errorf("timeline %d's history ends with %q", timeline, lines[len(lines)-1])
	}
	parent, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("timeline %d's history: %w", timeline, err)
	}
	lsn, err := engine.ParseLSN(fields[1])
	return parent, lsn, err
}

// segmentStart is a WAL segment's timeline and the position it starts at.
func segmentStart(name string, segSize int64) (int64, engine.LSN, error) {
	var n [3]uint64
	for i := range n {
		var err error
		if len(name) != 24 || segSize <= 0 {
			err = errors.New("no")
		} else {
			n[i], err = strconv.ParseUint(name[8*i:8*i+8], 16, 32)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%q is no WAL segment name (segment size %d)", name, segSize)
		}
	}
	return int64(n[0]), engine.LSN(n[1]<<32 + n[2]*uint64(segSize)), nil
}

// countTables opens every database that takes connections and counts each
// table's rows, reading every row and every value whole (a page that
// cannot be read fails the drill). Temporary tables, whose sessions are
// gone, are not read.
func countTables(ctx context.Context, conn *pgx.Conn, logf func(string, ...any)) ([]TableCount, error) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname")
	if err != nil {
		return nil, fail(ReasonRecoveryFailed, "listing the databases: %w", err)
	}
	databases, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fail(ReasonRecoveryFailed, "listing the databases: %w", err)
	}
	cfg := conn.Config()
	var out []TableCount
	for _, db := range databases {
		c := cfg.Copy()
		c.Database = db
		dc, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			return nil, fail(ReasonRecoveryFailed, "database %q does not open: %w", db, err)
		}
		counts, err := countIn(ctx, dc, db)
		_ = dc.Close(context.Background())
		if err != nil {
			return nil, err
		}
		for _, t := range counts {
			logf("drill: %s.%s.%s has %d rows", t.Database, t.Schema, t.Table, t.Rows)
		}
		out = append(out, counts...)
	}
	return out, nil
}

func countIn(ctx context.Context, conn *pgx.Conn, db string) ([]TableCount, error) {
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence <> 't' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		ORDER BY 1, 2`)
	if err != nil {
		return nil, fail(ReasonRecoveryFailed, "listing the tables of %q: %w", db, err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TableCount, error) {
		t := TableCount{Database: db}
		return t, r.Scan(&t.Schema, &t.Table)
	})
	if err != nil {
		return nil, fail(ReasonRecoveryFailed, "listing the tables of %q: %w", db, err)
	}
	// Every row read from the table itself, every value whole (its TOAST
	// too): an index would answer a count without reading the rows.
	for _, scan := range []string{"indexscan", "indexonlyscan", "bitmapscan"} {
		if _, err := conn.Exec(ctx, "SET enable_"+scan+" = off"); err != nil {
			return nil, fail(ReasonRecoveryFailed, "%w", err)
		}
	}
	for i := range tables {
		t := &tables[i]
		q := "SELECT count(*), coalesce(sum(octet_length(t::text)), 0) FROM ONLY " + pgx.Identifier{t.Schema, t.Table}.Sanitize() + " t"
		var size int64
		if err := conn.QueryRow(ctx, q).Scan(&t.Rows, &size); err != nil {
			return nil, fail(ReasonRecoveryFailed, "reading table %s.%s.%s: %w", db, t.Schema, t.Table, err)
		}
	}
	return tables, nil
}

// finish reads where the recovery ended and gives the accounts their new
// passwords (the statements are not logged: log_statement is none).
func finish(ctx context.Context, conn *pgx.Conn, accounts []Account) (*Outcome, error) {
	out := &Outcome{}
	for _, a := range accounts {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", a.Name).Scan(&exists); err != nil {
			return nil, fail(ReasonRecoveryFailed, "reading role %s: %w", a.Name, err)
		}
		verb, attrs := "ALTER", " LOGIN"
		if !exists {
			verb = "CREATE"
		}
		if a.Replication {
			attrs += " REPLICATION"
		}
		// The verifier, never the password, is in the statement: a role's
		// own log_statement could log it.
		verifier, err := engine.SCRAMVerifier(a.Password)
		if err != nil {
			return nil, fail(ReasonRecoveryFailed, "hashing the password of role %s: %w", a.Name, err)
		}
		stmt := fmt.Sprintf("%s ROLE %s WITH%s PASSWORD '%s'", verb, pgx.Identifier{a.Name}.Sanitize(), attrs, verifier)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, fail(ReasonRecoveryFailed, "setting the password of role %s: %w", a.Name, err)
		}
	}
	// The checkpoint records the new timeline in the control file.
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, fail(ReasonRecoveryFailed, "checkpoint after the recovery: %w", err)
	}
	var last *time.Time
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, (SELECT timeline_id FROM pg_control_checkpoint()), pg_last_xact_replay_timestamp()`).
		Scan(&out.Position, &out.Timeline, &last)
	if err != nil {
		return nil, fail(ReasonRecoveryFailed, "reading the recovered position: %w", err)
	}
	if last != nil {
		out.LastReplayed = *last
	}
	return out, nil
}

// tail is the last n lines of the server's log that say what went wrong
// (FATAL, PANIC, ERROR, and wal-fetch's own CORRUPT ARCHIVE), for an error
// message.
func tail(file string, n int) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "FATAL") && !strings.Contains(line, "PANIC") && !strings.Contains(line, "ERROR") && !strings.Contains(line, "CORRUPT ARCHIVE") ||
			strings.Contains(line, "the database system is starting up") || strings.Contains(line, "is not accepting connections") {
			continue // the refusals of this program's own connection attempts
		}
		if len(lines) > 0 && lines[len(lines)-1] == line {
			continue // the server retries restore_command
		}
		lines = append(lines, line)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
