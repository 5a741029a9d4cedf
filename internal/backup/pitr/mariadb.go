package pitr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/engine"
)

// A MariaDB recovery from a physical backup, the same shape as
// PostgreSQL's: the archived binary logs up to the target are fetched and
// verified first (a target outside the window or a corrupt file changes
// nothing), the copy is unpacked and prepared beside the data directory,
// a server of the Job's own (a socket in scratch, no network, no grant
// checks) replays the binary logs into it, the new Database's accounts
// get their passwords, the replication state the source had is dropped,
// and the server is shut down cleanly. Only then does the copy move to
// the data directory: a failure at any step leaves nothing a pod would
// start on.

// MariaDBOptions describe one MariaDB recovery.
type MariaDBOptions struct {
	Store storage.Store
	// Path is the physical backup's directory in the store.
	Path string
	// Archive is the binary log archive's prefix in the same store; ""
	// recovers to the backup's own end.
	Archive string
	Target  binlog.Target
	// DataDir is the data directory to create; it must not hold data.
	DataDir string
	// Scratch holds the downloads and the server's socket.
	Scratch string
	// Superuser is the account whose password (at every host it has an
	// account for) becomes the new Database's; Accounts are the others
	// (the replication account).
	Superuser Account
	Accounts  []Account
	// Server is the server binary (default mariadbd); ServerArgs go
	// first on its command line (tests: --user=root).
	Server     string
	ServerArgs []string
	Log        func(format string, args ...any)
	// ServerLog gets the tools' and the server's output.
	ServerLog io.Writer
}

// MariaDBOutcome is what a MariaDB recovery reached.
type MariaDBOutcome struct {
	Manifest *backup.Manifest
	// Replay is what the binary log replay did (nil without an archive).
	Replay *binlog.Outcome
	// Position is the GTID position the recovered data holds up to.
	Position string
	// Unpacking is how long the backup took to download, check, unpack
	// and prepare.
	Unpacking time.Duration
}

// RecoverMariaDB recovers o.Path (and the archive to o.Target) into the
// new data directory o.DataDir.
func RecoverMariaDB(ctx context.Context, o MariaDBOptions) (*MariaDBOutcome, error) {
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if o.ServerLog == nil {
		o.ServerLog = io.Discard
	}
	if _, err := os.Stat(filepath.Join(o.DataDir, "mysql")); err == nil {
		return nil, fail(backup.ReasonNotEmpty, "%s already holds a data directory: a recovery only creates a new one, nothing was changed", o.DataDir)
	}
	m, err := backup.ReadManifest(ctx, o.Store, o.Path)
	if err != nil {
		return nil, err
	}
	sock, err := os.MkdirTemp(o.Scratch, "sock-")
	if err != nil {
		return nil, fail(backup.ReasonLoadFailed, "socket directory: %w", err)
	}
	defer os.RemoveAll(sock)
	srv := &tempServer{o: o, sock: filepath.Join(sock, "server.sock")}

	var prepared *binlog.Prepared
	switch {
	case o.Archive != "":
		if prepared, err = prepareReplay(ctx, o, m, srv.client(), logf); err != nil {
			return nil, err
		}
		defer prepared.Close()
	case !o.Target.Time.IsZero() || o.Target.GTID != nil:
		return nil, fail(ReasonOutsideWindow, "%s has no binary log archive: it restores only to its own end, not to %s", o.Store.Location(o.Path), binlog.FormatTarget(o.Target))
	}

	work := o.DataDir + ".recovering"
	if err := os.RemoveAll(work); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "clearing an earlier attempt: %w", err)
	}
	out, err := recoverCopy(ctx, o, m, prepared, srv, work, logf)
	if err != nil {
		// A copy of the backup: the backup itself is intact.
		_ = os.RemoveAll(work)
		return nil, err
	}
	if err := moveIntoPlace(work, o.DataDir); err != nil {
		return nil, err
	}
	return out, nil
}

// recoverCopy unpacks and prepares the backup in work, replays the binary
// log into it (prepared; nil without an archive), sets the accounts and
// shuts the server down cleanly.
func recoverCopy(ctx context.Context, o MariaDBOptions, m *backup.Manifest, prepared *binlog.Prepared, srv *tempServer, work string,
	logf func(string, ...any)) (*MariaDBOutcome, error) {
	start := time.Now()
	logf("unpacking and preparing %s in %s", o.Store.Location(o.Path), work)
	if _, err := backup.ExtractMariaDBBackup(ctx, o.Store, o.Path, o.Scratch, work, o.ServerLog); err != nil {
		return nil, err
	}
	out := &MariaDBOutcome{Manifest: m, Position: m.Position, Unpacking: time.Since(start)}
	defer func() { _ = srv.kill() }()
	if prepared != nil {
		// Its session loads the grant tables first: the replayed
		// GRANTs and ALTER USERs need them. Sessions after it would
		// then need a password: the server starts again for the rest.
		if err := srv.start(ctx, work); err != nil {
			return nil, err
		}
		logf("replaying the binary log archive from %s to %s", m.Position, binlog.FormatTarget(o.Target))
		var err error
		if out.Replay, err = prepared.Apply(ctx); err != nil {
			return nil, fail(ReasonRecoveryFailed, "replaying the binary log: %w", err)
		}
		out.Position = out.Replay.End.String()
		if err := srv.stop(); err != nil {
			return nil, err
		}
	}
	if err := srv.start(ctx, work); err != nil {
		return nil, err
	}
	if err := srv.sql(ctx, finishSQL(o)); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "setting the new Database's accounts: %w", err)
	}
	if err := srv.stop(); err != nil {
		return nil, err
	}
	// The copy's files, written by mbstream and the server, are on
	// disk before the directory is the data directory: the pod must
	// find them there after a crash of the node.
	if err := syncTree(work); err != nil {
		return nil, fail(backup.ReasonLoadFailed, "syncing the recovered files: %w", err)
	}
	return out, nil
}

// prepareReplay fetches and verifies the archived binary logs from the
// backup's position to the target.
func prepareReplay(ctx context.Context, o MariaDBOptions, m *backup.Manifest, client binlog.Client, logf func(string, ...any)) (*binlog.Prepared, error) {
	from, err := binlog.ParsePosition(m.Position)
	if err != nil || len(from) == 0 {
		return nil, fail(backup.ReasonInvalid, "backup %s records no GTID position (%q) to replay the binary log from", o.Store.Location(o.Path), m.Position)
	}
	p, err := binlog.Prepare(ctx, binlog.ReplayOptions{Archive: binlog.Archive{Store: o.Store, Prefix: o.Archive}, From: from, Taken: m.CompletedAt,
		Target: o.Target, Client: client, Scratch: o.Scratch, Logf: logf})
	switch {
	case errors.Is(err, binlog.ErrOutsideWindow):
		return nil, fail(ReasonOutsideWindow, "nothing was written: %w", err)
	case errors.Is(err, wal.ErrCorrupt) || errors.Is(err, wal.ErrNotArchived) || errors.Is(err, binlog.ErrNoChain):
		return nil, fail(backup.ReasonArchiveCorrupt, "nothing was written: %w", err)
	case err != nil:
		return nil, fail(backup.ReasonTargetFailed, "nothing was written: %w", err)
	}
	return p, nil
}

// finishSQL gives the accounts the new Database's passwords and drops
// the source's replication state: the recovered server is a new
// Database's first primary, with an empty GTID history of its own as a
// new one has, replicating from nobody (a backup of a replica names the
// source's primary).
func finishSQL(o MariaDBOptions) string {
	var b strings.Builder
	b.WriteString("SET SESSION sql_log_bin = 0;\nFLUSH PRIVILEGES;\n")
	// Passwords as their hashes: a statement a server echoes in an error
	// (the Job's result, an Event) never holds one.
	account := func(user, host, password string) {
		id := engine.MySQLLiteral(user) + "@" + engine.MySQLLiteral(host)
		by := engine.MariaDBIdentifiedBy(password)
		fmt.Fprintf(&b, "CREATE USER IF NOT EXISTS %s %s;\nALTER USER %s %s;\n", id, by, id, by)
	}
	root := engine.MySQLLiteral(o.Superuser.Name)
	account(o.Superuser.Name, "localhost", o.Superuser.Password)
	account(o.Superuser.Name, "%", o.Superuser.Password)
	fmt.Fprintf(&b, "GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION;\n", root)
	for _, a := range o.Accounts {
		account(a.Name, "%", a.Password)
		if a.Replication {
			fmt.Fprintf(&b, "GRANT REPLICATION SLAVE ON *.* TO %s@'%%';\n", engine.MySQLLiteral(a.Name))
		}
	}
	b.WriteString("STOP ALL SLAVES;\nRESET SLAVE ALL;\nSET GLOBAL gtid_slave_pos = '';\n")
	return b.String()
}

// syncTree flushes every file under dir, and the directories, to disk.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

// tempServer is the recovery's own server: a socket in scratch, no
// network, no grant checks (nothing else can reach it).
type tempServer struct {
	o    MariaDBOptions
	sock string
	cmd  *exec.Cmd
	done chan error
}

func (s *tempServer) client() binlog.Client {
	return binlog.Client{Command: "mariadb", Args: []string{"--no-defaults", "--socket=" + s.sock, "--user=root"},
		Env: []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C"}, Init: "FLUSH PRIVILEGES;\n"}
}

func (s *tempServer) start(ctx context.Context, dir string) error {
	bin := s.o.Server
	if bin == "" {
		bin = "mariadbd"
	}
	// --no-defaults must come first: no option file of the image applies.
	args := append(append([]string{"--no-defaults"}, s.o.ServerArgs...), "--datadir="+dir, "--socket="+s.sock,
		"--pid-file="+s.sock+".pid", "--skip-networking", "--skip-grant-tables", "--skip-slave-start", "--skip-log-bin",
		// The passwords set below never reach a log.
		"--general-log=OFF", "--slow-query-log=OFF")
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.o.ServerLog, s.o.ServerLog
	if err := s.cmd.Start(); err != nil {
		return fail(ReasonRecoveryFailed, "starting %s: %w", bin, err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Minute); ; {
		if err := s.sql(ctx, "SELECT 1"); err == nil {
			return nil
		}
		select {
		case err := <-s.done:
			s.cmd = nil
			return fail(ReasonRecoveryFailed, "the server exited on the prepared copy before taking connections: %v (its log is in the Job's)", err)
		case <-ctx.Done():
			_ = s.kill()
			return fail(ReasonRecoveryFailed, "waiting for the server to start: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.kill()
			return fail(ReasonRecoveryFailed, "the server on the prepared copy took no connection within 10 minutes")
		}
	}
}

// sql runs statements through the client, on its standard input.
func (s *tempServer) sql(ctx context.Context, stmts string) error {
	c := s.client()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Command, append(c.Args, "--batch")...)
	cmd.Env = c.Env
	cmd.Stdin = strings.NewReader(stmts)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// stop shuts the server down cleanly (SIGTERM: no login needed once the
// grant tables are in force) and waits for it.
func (s *tempServer) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fail(ReasonRecoveryFailed, "shutting the server down: %w", err)
	}
	select {
	case err := <-s.done:
		s.cmd = nil
		if err != nil {
			return fail(ReasonRecoveryFailed, "the server's shutdown failed: %w", err)
		}
		return nil
	case <-time.After(5 * time.Minute):
		return fail(ReasonRecoveryFailed, "the server did not shut down within 5 minutes")
	}
}

// kill stops a server still running (a failed recovery); its exit status
// says nothing then.
func (s *tempServer) kill() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.cmd = nil
	return err
}
