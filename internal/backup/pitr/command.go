package pitr

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
)

// Environment the recover command reads the new Database's passwords from.
const (
	EnvSuperuserPassword   = backup.EnvPassword
	EnvReplicationPassword = "REPLICATION_PASSWORD"
)

// Command is the manager's "recover" subcommand, run by a Database's
// recovery Job before its pods exist: it writes its Result to
// --result-file (the container's termination message).
func Command(ctx context.Context, args []string, log io.Writer) error {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	var o Options
	var t storage.Flags
	var resultFile, replicationUser, targetTime, eng, binlogArchive, targetGTID string
	t.Register(fs)
	fs.StringVar(&eng, "engine", "postgresql", "postgresql or mariadb")
	fs.StringVar(&binlogArchive, "binlog-archive", "", "MariaDB: the binary log archive's prefix in the target (none: recover to the backup's end)")
	fs.StringVar(&targetGTID, "target-gtid", "", "MariaDB: replay the binary log up to and with this GTID position")
	fs.StringVar(&o.Path, "path", "", "the base backup's path in the target")
	fs.StringVar(&o.Archive, "archive", "", "the WAL archive's prefix in the target (none: recover to the backup's end)")
	fs.StringVar(&o.RestoreCommand, "restore-command", "", "the server's restore_command (wal-fetch on --archive)")
	fs.StringVar(&targetTime, "target-time", "", "replay the transactions committed before this time (RFC 3339)")
	fs.StringVar(&o.Target.LSN, "target-lsn", "", "replay up to this WAL position")
	fs.StringVar(&o.Target.Name, "target-name", "", "replay up to this restore point")
	fs.StringVar(&o.DataDir, "pgdata", "", "the data directory to create")
	fs.StringVar(&o.DataDir, "datadir", "", "the data directory to create (the same as --pgdata)")
	fs.StringVar(&o.Scratch, "scratch", os.TempDir(), "directory for the download, the socket and the server's log")
	fs.StringVar(&o.Superuser, "user", "postgres", "the superuser (its password from "+EnvSuperuserPassword+")")
	fs.StringVar(&replicationUser, "replication-user", "", "the replication account (its password from "+EnvReplicationPassword+")")
	fs.BoolVar(&o.Drill, "drill", false, "a restore drill: recover into --pgdata, open every database, count each table's rows, then delete the copy")
	fs.StringVar(&resultFile, "result-file", "/dev/termination-log", "where the result goes (JSON)")
	fs.SetOutput(log)
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Log = func(format string, args ...any) { fmt.Fprintf(log, "recover: "+format+"\n", args...) }
	o.ServerLog = log
	if eng == "mariadb" {
		return mariadbCommand(ctx, mariadbFlags{o: o, t: t, archive: binlogArchive, targetTime: targetTime, targetGTID: targetGTID,
			replicationUser: replicationUser, resultFile: resultFile}, log)
	}
	var out *Outcome
	err := func() error {
		if o.Path == "" || o.DataDir == "" {
			return fail(backup.ReasonInvalid, "--path and --pgdata are required")
		}
		if o.Archive != "" && o.RestoreCommand == "" {
			return fail(backup.ReasonInvalid, "--archive needs --restore-command")
		}
		if targetTime != "" {
			var err error
			if o.Target.Time, err = time.Parse(time.RFC3339Nano, targetTime); err != nil {
				return fail(backup.ReasonInvalid, "--target-time: %w", err)
			}
		}
		if !o.Drill {
			// A drill changes no account: its copy is thrown away.
			o.Accounts = []Account{{Name: o.Superuser, Password: os.Getenv(EnvSuperuserPassword)}}
		}
		if replicationUser != "" && !o.Drill {
			o.Accounts = append(o.Accounts, Account{Name: replicationUser, Password: os.Getenv(EnvReplicationPassword), Replication: true})
		}
		if err := needPasswords(o.Accounts); err != nil {
			return err
		}
		var done func()
		var err error
		if o.Store, o.Scratch, done, err = openTarget(ctx, t, o.Scratch); err != nil {
			return err
		}
		defer done()
		out, err = Recover(ctx, o)
		return err
	}()
	return report(log, o.Path, ResultOf(o, out, err), resultFile, err)
}

// needPasswords fails when an account's password is not in the
// environment.
func needPasswords(accounts []Account) error {
	for _, a := range accounts {
		if a.Password == "" {
			return fail(backup.ReasonInvalid, "no password for %s in the environment", a.Name)
		}
	}
	return nil
}

// openTarget opens the backup target and makes the recovery's scratch
// directory under root (done removes it).
func openTarget(ctx context.Context, t storage.Flags, root string) (storage.Store, string, func(), error) {
	store, err := t.Open(ctx)
	if err != nil {
		return nil, "", nil, fail(backup.ReasonTargetFailed, "%w", err)
	}
	scratch, err := os.MkdirTemp(root, "recover-")
	if err != nil {
		return nil, "", nil, fail(backup.ReasonLoadFailed, "scratch space: %w", err)
	}
	return store, scratch, func() { _ = os.RemoveAll(scratch) }, nil
}

// report logs a recovery's result and writes it to resultFile (the Job's
// termination message).
func report(log io.Writer, path string, res backup.Result, resultFile string, err error) error {
	fmt.Fprintf(log, "recover %s: succeeded=%t reason=%s %s\n", path, res.Succeeded, res.Reason, res.Message)
	if resultFile != "" {
		if werr := os.WriteFile(resultFile, res.Encode(), 0o644); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// ResultOf is the Result a recovery Job reports.
func ResultOf(o Options, out *Outcome, err error) backup.Result {
	if err != nil {
		return backup.Result{Reason: backup.ReasonOf(err), Message: err.Error(), Path: o.Path}
	}
	m := out.Manifest
	to := o.Target.String()
	if o.Archive == "" {
		to = "the end of the base backup (no WAL archive)"
	}
	msg := fmt.Sprintf("recovered to %s: the replay ended at %s, promoted on timeline %d", to, out.EndOfRecovery, out.Timeline)
	if !out.LastReplayed.IsZero() {
		msg += ", the last transaction replayed committed at " + out.LastReplayed.UTC().Format(time.RFC3339Nano)
	}
	msg += fmt.Sprintf("; unpacked %s in %s (%s), replayed %s of WAL in %s (%s)",
		megabytes(m.Size()), out.Unpacking.Round(time.Millisecond), rate(m.Size(), out.Unpacking),
		megabytes(out.Replayed), out.Replaying.Round(time.Millisecond), rate(out.Replayed, out.Replaying))
	reason := "Recovered"
	if o.Drill {
		reason = "Verified"
		databases := map[string]bool{}
		var rows int64
		for _, t := range out.Tables {
			databases[t.Database] = true
			rows += t.Rows
		}
		msg += fmt.Sprintf("; every database opened, %d tables in %d databases hold %d rows (each table's count is in the Job's log); the copy was deleted",
			len(out.Tables), len(databases), rows)
	}
	return backup.Result{Succeeded: true, Reason: reason, Message: msg, Path: o.Path, Location: o.Store.Location(o.Path),
		Version: m.Version, Position: out.Position, Size: m.Size(), Checksum: m.Checksum(), StartedAt: m.StartedAt, CompletedAt: m.CompletedAt}
}

func megabytes(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// rate is n bytes over d in MB/s.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/1e6/d.Seconds())
}

// mariadbFlags are the recover command's flags for a MariaDB recovery.
type mariadbFlags struct {
	o                               Options
	t                               storage.Flags
	archive, targetTime, targetGTID string
	replicationUser, resultFile     string
}

// mariadbCommand is the recover command for MariaDB: RecoverMariaDB.
func mariadbCommand(ctx context.Context, f mariadbFlags, log io.Writer) error {
	o := MariaDBOptions{Path: f.o.Path, Archive: f.archive, DataDir: f.o.DataDir, Scratch: f.o.Scratch, Log: f.o.Log, ServerLog: log,
		Superuser: Account{Name: f.o.Superuser, Password: os.Getenv(EnvSuperuserPassword)}}
	var out *MariaDBOutcome
	err := func() error {
		switch {
		case f.o.Drill:
			return fail(backup.ReasonInvalid, "restore drills of MariaDB physical backups are not built yet")
		case o.Path == "" || o.DataDir == "":
			return fail(backup.ReasonInvalid, "--path and --datadir are required")
		case f.targetTime != "" && f.targetGTID != "":
			return fail(backup.ReasonInvalid, "--target-time and --target-gtid exclude each other")
		}
		var err error
		if f.targetTime != "" {
			if o.Target.Time, err = time.Parse(time.RFC3339Nano, f.targetTime); err != nil {
				return fail(backup.ReasonInvalid, "--target-time: %w", err)
			}
		}
		if f.targetGTID != "" {
			if o.Target.GTID, err = binlog.ParsePosition(f.targetGTID); err != nil {
				return fail(backup.ReasonInvalid, "--target-gtid: %w", err)
			}
		}
		if f.replicationUser != "" {
			o.Accounts = []Account{{Name: f.replicationUser, Password: os.Getenv(EnvReplicationPassword), Replication: true}}
		}
		if err := needPasswords(append([]Account{o.Superuser}, o.Accounts...)); err != nil {
			return err
		}
		var done func()
		if o.Store, o.Scratch, done, err = openTarget(ctx, f.t, o.Scratch); err != nil {
			return err
		}
		defer done()
		out, err = RecoverMariaDB(ctx, o)
		return err
	}()
	return report(log, o.Path, MariaDBResultOf(o, out, err), f.resultFile, err)
}

// MariaDBResultOf is the Result a MariaDB recovery Job reports.
func MariaDBResultOf(o MariaDBOptions, out *MariaDBOutcome, err error) backup.Result {
	if err != nil {
		return backup.Result{Reason: backup.ReasonOf(err), Message: err.Error(), Path: o.Path}
	}
	m := out.Manifest
	msg := fmt.Sprintf("recovered to the end of the physical backup (no binary log archive), position %s", out.Position)
	if out.Replay != nil {
		r := out.Replay
		msg = fmt.Sprintf("recovered to %s: replayed %d transactions of the binary log (%d files, %s, fetched and verified in %s, applied in %s), position %s",
			binlog.FormatTarget(o.Target), r.Transactions, r.Files, megabytes(r.Bytes), r.Fetch.Round(time.Millisecond), r.Apply.Round(time.Millisecond), out.Position)
	}
	msg += fmt.Sprintf("; downloaded, checked, unpacked and prepared %s in %s (%s)", megabytes(m.Size()), out.Unpacking.Round(time.Millisecond), rate(m.Size(), out.Unpacking))
	return backup.Result{Succeeded: true, Reason: "Recovered", Message: msg, Path: o.Path, Location: o.Store.Location(o.Path),
		Version: m.Version, Position: out.Position, Size: m.Size(), Checksum: m.Checksum(), StartedAt: m.StartedAt, CompletedAt: m.CompletedAt}
}
