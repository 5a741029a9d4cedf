package backup

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/engine"
)

// Server is the instance a backup is taken from or restored into.
type Server struct {
	Engine   dbv1.Engine
	Host     string
	Port     int
	User     string
	Password string
	// CAFile, when set, is the CA bundle the server's certificate is
	// verified with, against Host: every connection is TLS, none plain.
	CAFile string
	// AgentAddr is where the instance's agent serves its peer channel
	// (a MariaDB physical backup); default Host:agent.PeerPort.
	AgentAddr string
}

func (s Server) endpoint() engine.Endpoint { return engine.Endpoint{Host: s.Host, Port: s.Port} }

// mysqlConnArgs are a MySQL or MariaDB client tool's connection options:
// TCP to Host, and with a CA the server verified against Host's name.
// (PostgreSQL's tools take theirs from the environment: clientEnv.)
func (s Server) mysqlConnArgs() []string {
	args := []string{"--host=" + s.Host, "--port=" + strconv.Itoa(s.Port), "--user=" + s.User, "--protocol=tcp"}
	switch {
	case s.CAFile == "":
	case s.Engine == dbv1.EngineMySQL:
		args = append(args, "--ssl-mode=VERIFY_IDENTITY", "--ssl-ca="+s.CAFile)
	default:
		args = append(args, "--ssl", "--ssl-ca="+s.CAFile, "--ssl-verify-server-cert")
	}
	return args
}

// BinlogClient is the MariaDB client's connection to s, through which
// archived binary logs are replayed into it (binlog.Replay).
func (s Server) BinlogClient() binlog.Client {
	return binlog.Client{Command: engine.ProfileOf(s.Engine).Client, Args: s.mysqlConnArgs(), Env: clientEnv(s)}
}

// Options describe one backup.
type Options struct {
	Server Server
	Store  storage.Store
	// Namespace, Database and Name place the backup at
	// Path(Namespace, Database, Name) and go into its manifest.
	Namespace, Database, Name string
	// DatabaseUID is the Database's UID, for the manifest; retention needs
	// it. DatabaseCreated is when the Database was created: retention
	// takes a backup without a UID (written by an older version) started
	// since then for the Database's own.
	DatabaseUID     string
	DatabaseCreated time.Time
	// Instance is the pod backed up, for the manifest.
	Instance string
	// Method is MethodLogical (dumps; the default) or MethodPhysical
	// (PostgreSQL: the data directory, pg_basebackup).
	Method string
	// Retention is applied after the backup completed.
	Retention Retention
	// Archive is the Database's WAL archive in the same target
	// (wal.Prefix), if it archives there: retention then also deletes the
	// archived files no kept base backup needs.
	Archive string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Reasons a backup or restore fails; they become the Backup's
// status.reason and the Database's condition reason.
const (
	ReasonDatabaseUnreachable = "DatabaseUnreachable"
	ReasonDumpFailed          = "DumpFailed"
	ReasonTargetFailed        = "TargetFailed"
	ReasonCorrupt             = "BackupCorrupt"
	ReasonLoadFailed          = "LoadFailed"
	ReasonInvalid             = "InvalidBackup"
)

// Error is a failure with the reason a Backup reports.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(reason string, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf is the reason of a backup or restore error.
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonDumpFailed
}

// Run takes a backup: it dumps the server's databases (or copies its data
// files: MethodPhysical) into the target, each file streamed through SHA-256, then writes the manifest, then applies
// retention. On failure it removes what it wrote.
func Run(ctx context.Context, o Options) (*Manifest, Pruned, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	dir := Path(o.Namespace, o.Database, o.Name)
	m := &Manifest{Format: FormatVersion, Engine: o.Server.Engine, Namespace: o.Namespace, Database: o.Database,
		DatabaseUID: o.DatabaseUID, Backup: o.Name, Instance: o.Instance, Method: cmp.Or(o.Method, MethodLogical), StartedAt: now().UTC()}
	if err := checkMethod(m.Method, o.Server.Engine); err != nil {
		return nil, Pruned{}, err
	}

	// Never write into another backup's directory: a reused Backup name
	// would overwrite it, and a failure would then delete its files.
	if existing, err := o.Store.List(ctx, dir+"/"); err != nil {
		return nil, Pruned{}, fail(ReasonTargetFailed, "checking %s: %w", o.Store.Location(dir), err)
	} else if len(existing) > 0 {
		return nil, Pruned{}, fail(ReasonInvalid, "%s already holds a backup (%d files): give the new backup another name", o.Store.Location(dir), len(existing))
	}
	inst, err := o.Server.open(ctx)
	if err != nil {
		return nil, Pruned{}, fail(ReasonDatabaseUnreachable, "%w", err)
	}
	defer inst.Close()
	if m.Version, err = inst.ServerVersion(ctx); err != nil {
		return nil, Pruned{}, fail(ReasonDatabaseUnreachable, "%w", err)
	}
	// The position before the dump starts: the dump's snapshot is at least
	// this far (MySQL/MariaDB dumps record their exact GTID; see below).
	if m.Position, err = position(ctx, inst, o.Server.Engine); err != nil {
		return nil, Pruned{}, err
	}

	written := func() []string {
		var keys []string
		for _, f := range m.Files {
			keys = append(keys, dir+"/"+f.Name)
		}
		return keys
	}
	cleanup := func() {
		// Best effort with a fresh context: the run's may be what ended.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, k := range written() {
			_ = o.Store.Delete(c, k)
		}
	}

	if err := takeFiles(ctx, o, inst, m, dir); err != nil {
		cleanup()
		return nil, Pruned{}, err
	}
	return finish(ctx, o, m, now, cleanup)
}

// takeFiles writes the backup's files into dir, recording them and the
// positions in m: a MariaDB physical backup from the instance's agent, a
// PostgreSQL one from pg_basebackup, else the dumps.
func takeFiles(ctx context.Context, o Options, inst engine.Instance, m *Manifest, dir string) error {
	if m.Method == MethodPhysical && o.Server.Engine == dbv1.EngineMariaDB {
		f, pos, err := mariadbBaseBackup(ctx, o.Store, dir, o.Server)
		if err != nil {
			return err
		}
		m.Files, m.Position = []File{f}, pos
		return nil
	}
	databases, err := inst.Databases(ctx)
	if err != nil {
		return fail(ReasonDatabaseUnreachable, "%w", err)
	}
	jobs := dumpJobs(o.Server, databases)
	if m.Method == MethodPhysical {
		jobs = []dumpJob{baseBackupJob(o.Server, o.Name)}
	}
	for _, job := range jobs {
		f, head, err := dumpFile(ctx, o.Store, dir, job, o.Server)
		if err != nil {
			return err
		}
		m.Files = append(m.Files, f)
		if gtid := dumpGTID(head); gtid != "" {
			m.Position = gtid
		}
		if f.Kind == KindBaseBackup {
			m.WALStart = baseBackupWALStart(head)
		}
	}
	if m.Method == MethodPhysical {
		// The copy is consistent once recovery has replayed its WAL up to
		// where the server was when it ended: at most here.
		if m.EndPosition, err = position(ctx, inst, o.Server.Engine); err != nil {
			return err
		}
	}
	return nil
}

// finish writes the manifest of the backup m, whose files are in the
// target, then applies retention; cleanup deletes the files when the
// manifest cannot be written.
func finish(ctx context.Context, o Options, m *Manifest, now func() time.Time, cleanup func()) (*Manifest, Pruned, error) {
	dir := Path(o.Namespace, o.Database, o.Name)
	m.CompletedAt = now().UTC()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		cleanup()
		return nil, Pruned{}, err
	}
	if _, err := o.Store.Put(ctx, dir+"/"+ManifestName, bytes.NewReader(b)); err != nil {
		cleanup()
		return nil, Pruned{}, fail(ReasonTargetFailed, "writing the manifest: %w", err)
	}
	pruned, err := retain(ctx, o, m, now())
	return m, pruned, err
}

// retain applies retention after the backup m completed: to the backups,
// then to the archive. The backup itself is good whatever fails here;
// retention is tried again after the next one.
func retain(ctx context.Context, o Options, m *Manifest, now time.Time) (Pruned, error) {
	var pruned Pruned
	var err error
	if pruned.Backups, err = Prune(ctx, o.Store, m, o.DatabaseCreated, o.Retention, now); err != nil {
		return pruned, fmt.Errorf("backup completed, but retention failed: %w", err)
	}
	if o.Archive != "" && o.Retention.bounded() {
		prune := PruneArchive
		if m.Engine != dbv1.EnginePostgreSQL {
			prune = PruneBinlogArchive
		}
		if pruned.Archived, pruned.ArchiveKeptFrom, err = prune(ctx, o.Store, o.Archive, m, o.DatabaseCreated); err != nil {
			return pruned, fmt.Errorf("backup completed, but the archive's retention failed: %w", err)
		}
	}
	return pruned, nil
}

// baseBackupWALStart reads the first WAL file a recovery from a base backup
// reads from its backup_label, the first file pg_basebackup's tar holds
// (so within head). "" when it is not there: retention then keeps the
// whole archive rather than guess.
func baseBackupWALStart(head []byte) string {
	tr := tar.NewReader(bytes.NewReader(head))
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if h.Name != "backup_label" {
			continue
		}
		label, err := io.ReadAll(tr)
		if err != nil {
			return ""
		}
		if m := labelStart.FindSubmatch(label); m != nil {
			return string(m[1])
		}
		return ""
	}
}

var labelStart = regexp.MustCompile(`(?m)^START WAL LOCATION: [0-9A-F]+/[0-9A-F]+ \(file ([0-9A-F]{24})\)$`)

// checkMethod refuses a backup method the engine has not.
func checkMethod(method string, e dbv1.Engine) error {
	switch {
	case method != MethodLogical && method != MethodPhysical:
		return fail(ReasonInvalid, "method %q is neither %s nor %s", method, MethodLogical, MethodPhysical)
	case method == MethodPhysical && e == dbv1.EngineMySQL:
		return fail(ReasonInvalid, "physical backups of MySQL need xtrabackup or the clone plugin, which this operator does not run yet: take a logical one")
	}
	return nil
}

// position is the instance's applied position, as a manifest writes it.
func position(ctx context.Context, inst engine.Instance, e dbv1.Engine) (string, error) {
	st, err := inst.Status(ctx)
	if err != nil {
		return "", fail(ReasonDatabaseUnreachable, "reading the position: %w", err)
	}
	return positionString(e, st.Applied), nil
}

func positionString(e dbv1.Engine, p engine.Position) string {
	if e == dbv1.EnginePostgreSQL {
		if p.LSN == 0 {
			return ""
		}
		return p.LSN.String()
	}
	return p.GTID
}

// dumpJob is one file of a backup and the command that produces it.
type dumpJob struct {
	file File
	cmd  []string
}

// dumpJobs lists the commands a backup runs. PostgreSQL: the globals, then
// one custom-format dump per database (each its own consistent snapshot).
// MySQL/MariaDB: one dump of every user schema in a single transaction, with
// the GTID position it is consistent with.
func dumpJobs(s Server, databases []string) []dumpJob {
	switch s.Engine {
	case dbv1.EnginePostgreSQL:
		host, port := "--host="+s.Host, "--port="+strconv.Itoa(s.Port)
		jobs := []dumpJob{{file: File{Name: "globals.sql", Kind: KindGlobals},
			cmd: []string{"pg_dumpall", host, port, "--username=" + s.User, "--no-password", "--globals-only"}}}
		for i, db := range databases {
			jobs = append(jobs, dumpJob{file: File{Name: fmt.Sprintf("db-%04d.dump", i+1), Database: db, Kind: KindPGDump},
				cmd: []string{engine.ProfileOf(s.Engine).Dump, host, port, "--username=" + s.User, "--no-password", "--format=custom", pgDatabaseArg(db)}})
		}
		return jobs
	case dbv1.EngineMySQL:
		// --set-gtid-purged=OFF: with ON the dump turns binary logging off
		// for its load, and the restored Database's replicas would never
		// receive the data. The position is the one read before the dump.
		cmd := append([]string{engine.ProfileOf(s.Engine).Dump}, s.mysqlConnArgs()...)
		cmd = append(cmd, "--single-transaction",
			"--set-gtid-purged=OFF", "--source-data=2", "--routines", "--triggers", "--events", "--hex-blob")
		return []dumpJob{{file: File{Name: "dump.sql", Kind: KindSQL}, cmd: withDatabases(cmd, databases)}}
	default:
		// Accounts first (the mysql schema itself is not dumped: it holds
		// the superuser, whose password is the restored Database's own).
		dump := engine.ProfileOf(s.Engine).Dump
		users := append([]string{dump}, s.mysqlConnArgs()...)
		users = append(users, "--system=users", "--insert-ignore")
		cmd := append([]string{dump}, s.mysqlConnArgs()...)
		cmd = append(cmd, "--single-transaction", "--gtid", "--master-data=2", "--routines", "--triggers", "--events", "--hex-blob")
		return []dumpJob{
			{file: File{Name: "users.sql", Kind: KindUsers}, cmd: users},
			{file: File{Name: "dump.sql", Kind: KindSQL}, cmd: withDatabases(cmd, databases)},
		}
	}
}

// baseBackupJob copies a PostgreSQL server's data directory: pg_basebackup
// as a tar stream on its output, with the WAL the copy needs fetched into
// it at the end (-X fetch), so the backup restores on its own; with
// continuous archiving, the archive takes a recovery on from its end.
// From a replica too: pg_basebackup copies a standby.
func baseBackupJob(s Server, name string) dumpJob {
	return dumpJob{file: File{Name: "base.tar", Kind: KindBaseBackup}, cmd: []string{
		"pg_basebackup", "--host=" + s.Host, "--port=" + strconv.Itoa(s.Port), "--username=" + s.User, "--no-password",
		"--pgdata=-", "--format=tar", "--wal-method=fetch", "--checkpoint=fast", "--label=database-operator " + name}}
}

// pgDatabaseArg names a database for pg_dump as the value of a connection
// string. A bare name is itself parsed as one when it holds '=' or starts
// with postgres://, so a database named "host=elsewhere" would send the
// dump's connection, and its password, to another server.
func pgDatabaseArg(name string) string {
	return "--dbname=dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'"
}

// withDatabases names the schemas to dump. "--" ends the options: a schema
// named "--no-data" is a name, not an option that drops the data. With no
// schema there is nothing to run: the file says so, and restores to an
// empty server.
func withDatabases(cmd []string, databases []string) []string {
	if len(databases) == 0 {
		return nil
	}
	return append(append(cmd, "--databases", "--"), databases...)
}

// emptyDump is the dump of a server without user schemas.
const emptyDump = "-- database-operator: the server had no user schemas when this backup was taken\n"

// headSize is how much of a dump's start is kept to find its GTID.
const headSize = 64 << 10

// dumpFile runs one dump command and streams its output into the target
// under dir/name, hashing and counting it on the way.
func dumpFile(ctx context.Context, store storage.Store, dir string, job dumpJob, s Server) (File, []byte, error) {
	if job.cmd == nil {
		n, err := store.Put(ctx, dir+"/"+job.file.Name, bytes.NewReader([]byte(emptyDump)))
		if err != nil {
			return File{}, nil, fail(ReasonTargetFailed, "writing %s to the backup target: %w", job.file.Name, err)
		}
		sum := sha256.Sum256([]byte(emptyDump))
		f := job.file
		f.Size, f.SHA256 = n, hex.EncodeToString(sum[:])
		return f, nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, job.cmd[0], job.cmd[1:]...)
	cmd.Env = clientEnv(s)
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return File{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return File{}, nil, fail(ReasonDumpFailed, "starting %s: %w", job.cmd[0], err)
	}
	h := sha256.New()
	head := &headBuffer{max: headSize}
	n, putErr := store.Put(ctx, dir+"/"+job.file.Name, io.TeeReader(out, io.MultiWriter(h, head)))
	if putErr != nil {
		cancel() // stop the dump: nowhere to write it
	}
	waitErr := cmd.Wait()
	switch {
	case waitErr != nil && putErr == nil:
		_ = store.Delete(context.WithoutCancel(ctx), dir+"/"+job.file.Name)
		return File{}, nil, fail(classifyDump(stderr.String()), "%s %s failed: %v: %s", job.cmd[0], what(job), waitErr, stderr.String())
	case putErr != nil:
		return File{}, nil, fail(ReasonTargetFailed, "writing %s to the backup target: %w", job.file.Name, putErr)
	}
	f := job.file
	f.Size, f.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	return f, head.Bytes(), nil
}

func what(job dumpJob) string {
	if job.file.Database != "" {
		return "of database " + strconv.Quote(job.file.Database)
	}
	return "(" + job.file.Name + ")"
}

// classifyDump tells a server that could not be reached or logged into from
// other dump failures.
func classifyDump(stderr string) string {
	if connectionFailure.MatchString(stderr) {
		return ReasonDatabaseUnreachable
	}
	return ReasonDumpFailed
}

var connectionFailure = regexp.MustCompile(`(?i)connection (to server .* failed|refused)|could not connect|can't connect|got error: 20(0[0-9]|1[0-9]|4[0-9])|access denied|password authentication failed|no route to host|timed out`)

// clientEnv passes the password to the client tools through the
// environment, never on their command line, and has PostgreSQL's verify
// the server (TLS, the CA's signature, the host's name).
func clientEnv(s Server) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "PGPASSWORD=" + s.Password, "MYSQL_PWD=" + s.Password, "PGCONNECT_TIMEOUT=10", "LC_ALL=C"}
	if s.CAFile != "" {
		env = append(env, "PGSSLMODE=verify-full", "PGSSLROOTCERT="+s.CAFile)
	}
	return env
}

var mariaGTID = regexp.MustCompile(`(?m)^-- SET GLOBAL gtid_slave_pos\s*=\s*'([^']*)'`)
var mysqlGTID = regexp.MustCompile(`(?m)^SET @@GLOBAL\.GTID_PURGED\s*=\s*(?:/\*!80000 '\+'\*/\s*)?'([^']*)'`)

// dumpGTID finds the GTID position a MySQL/MariaDB dump is consistent with.
func dumpGTID(head []byte) string {
	if m := mariaGTID.FindSubmatch(head); m != nil {
		return string(m[1])
	}
	if m := mysqlGTID.FindSubmatch(head); m != nil {
		return string(bytes.ReplaceAll(m[1], []byte("\n"), nil))
	}
	return ""
}

// tailBuffer keeps the last max bytes written (a tool's stderr).
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.TrimSpace(t.b)) }

// headBuffer keeps the first max bytes written.
type headBuffer struct {
	max int
	bytes.Buffer
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - h.Len(); room > 0 {
		h.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
