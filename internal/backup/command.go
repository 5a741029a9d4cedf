package backup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
)

// EnvPassword passes the database password to the program through the
// environment: never on its command line, where it would show in the pod
// spec.
const EnvPassword = "DATABASE_PASSWORD"

// serverFlags are the command-line form of Server (the password comes from
// the environment).
func serverFlags(fs *flag.FlagSet, s *Server) {
	fs.Func("engine", "postgresql, mysql or mariadb", func(v string) error { s.Engine = dbv1.Engine(v); return nil })
	fs.StringVar(&s.Host, "host", "", "server host")
	fs.IntVar(&s.Port, "port", 0, "server port")
	fs.StringVar(&s.User, "user", "", "superuser name")
	fs.StringVar(&s.CAFile, "ca-file", "", "PEM CA bundle the server's certificate is verified with (TLS only, against --host)")
}

func (s *Server) complete() error {
	if !slices.Contains(dbv1.Engines(), s.Engine) {
		return fmt.Errorf("--engine %q is not one of postgresql, mysql, mariadb", s.Engine)
	}
	if s.Host == "" || s.Port <= 0 || s.User == "" {
		return fmt.Errorf("--host, --port and --user are required")
	}
	s.Password = os.Getenv(EnvPassword)
	return nil
}

// Command is the manager's "backup" subcommand, run by a backup Job.
// It writes its Result to --result-file (the container's termination
// message) and returns an error when the backup failed.
func Command(ctx context.Context, args []string, log io.Writer) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	var o Options
	var t storage.Flags
	var resultFile, maxAge string
	serverFlags(fs, &o.Server)
	t.Register(fs)
	fs.StringVar(&o.Namespace, "namespace", "", "the Database's namespace")
	fs.StringVar(&o.Database, "database", "", "the Database's name")
	fs.StringVar(&o.DatabaseUID, "database-uid", "", "the Database's UID (retention deletes only backups carrying it)")
	fs.Func("database-created", "when the Database was created (RFC 3339): retention also takes older versions' backups without a UID started since then", func(s string) (err error) {
		o.DatabaseCreated, err = time.Parse(time.RFC3339, s)
		return err
	})
	fs.StringVar(&o.Name, "name", "", "the Backup's name")
	fs.StringVar(&o.Instance, "instance", "", "the pod backed up")
	fs.StringVar(&o.Method, "method", MethodLogical, "logical (dumps) or physical (pg_basebackup; PostgreSQL)")
	fs.IntVar(&o.Retention.KeepLast, "keep-last", 0, "keep at most this many completed backups (0: no bound)")
	fs.StringVar(&maxAge, "max-age", "", "delete completed backups older than this (30d, 12h, 2w)")
	fs.StringVar(&o.Archive, "archive", "", "the Database's WAL archive in the same target: retention also deletes what no kept base backup needs")
	fs.StringVar(&resultFile, "result-file", "/dev/termination-log", "where the result goes (JSON)")
	fs.SetOutput(log)
	if err := fs.Parse(args); err != nil {
		return err
	}
	err := func() error {
		if err := o.Server.complete(); err != nil {
			return fail(ReasonInvalid, "%w", err)
		}
		if o.Namespace == "" || o.Database == "" || o.Name == "" {
			return fail(ReasonInvalid, "--namespace, --database and --name are required")
		}
		var err error
		if o.Retention.MaxAge, err = ParseMaxAge(maxAge); err != nil {
			return fail(ReasonInvalid, "%w", err)
		}
		if (o.Retention.KeepLast > 0 || o.Retention.MaxAge > 0) && o.DatabaseUID == "" {
			return fail(ReasonInvalid, "retention (--keep-last, --max-age) needs --database-uid: it deletes only the backups of that Database")
		}
		if o.Store, err = t.Open(ctx); err != nil {
			return fail(ReasonTargetFailed, "%w", err)
		}
		return nil
	}()
	var res Result
	if err != nil {
		res = ResultOf(nil, "", Pruned{}, err)
	} else {
		m, pruned, runErr := Run(ctx, o)
		loc := ""
		if m != nil {
			loc = o.Store.Location(Path(o.Namespace, o.Database, o.Name))
		}
		res, err = ResultOf(m, loc, pruned, runErr), runErr
		if m != nil {
			err = nil // a retention failure is reported, the backup stands
		}
	}
	fmt.Fprintf(log, "backup %s/%s/%s: succeeded=%t reason=%s size=%d position=%s %s\n",
		o.Namespace, o.Database, o.Name, res.Succeeded, res.Reason, res.Size, res.Position, res.Message)
	if len(res.Pruned) > 0 || res.PrunedWAL > 0 {
		fmt.Fprintf(log, "retention deleted backups %v and %d archived WAL files before %s\n", res.Pruned, res.PrunedWAL, res.WALKeptFrom)
	}
	if werr := writeResult(resultFile, res); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// RestoreCommand is the manager's "restore" subcommand, run by a restore Job.
func RestoreCommand(ctx context.Context, args []string, log io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	var o RestoreOptions
	var t storage.Flags
	var resultFile string
	serverFlags(fs, &o.Server)
	t.Register(fs)
	fs.StringVar(&o.Path, "path", "", "the backup's path in the target")
	fs.StringVar(&o.Scratch, "scratch", os.TempDir(), "directory for the downloaded, verified files")
	fs.StringVar(&resultFile, "result-file", "/dev/termination-log", "where the result goes (JSON)")
	var pitr binlogFlags
	pitr.register(fs)
	fs.SetOutput(log)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var m *Manifest
	var replayed *binlog.Outcome
	err := func() error {
		if err := o.Server.complete(); err != nil {
			return fail(ReasonInvalid, "%w", err)
		}
		if o.Path == "" {
			return fail(ReasonInvalid, "--path is required")
		}
		var err error
		if o.Store, err = t.Open(ctx); err != nil {
			return fail(ReasonTargetFailed, "%w", err)
		}
		scratch, err := os.MkdirTemp(o.Scratch, "restore-")
		if err != nil {
			return fail(ReasonLoadFailed, "scratch space: %w", err)
		}
		defer os.RemoveAll(scratch)
		o.Scratch = scratch
		// The binary logs to replay are fetched and verified before the
		// dump is loaded: a target outside the window or a corrupt file
		// changes nothing.
		prepared, err := pitr.prepare(ctx, o, log)
		if err != nil {
			return err
		}
		if prepared != nil {
			defer prepared.Close()
		}
		if m, err = Restore(ctx, o); err != nil || prepared == nil {
			return err
		}
		if replayed, err = prepared.Apply(ctx); err != nil {
			return fail(ReasonReplayFailed, "the backup was loaded, and replaying the binary log after it failed: %w", err)
		}
		return nil
	}()
	res := Result{Succeeded: err == nil, Reason: "Restored", Path: o.Path}
	if err != nil {
		res.Reason, res.Message = ReasonOf(err), err.Error()
	} else {
		res.Location, res.Version, res.Position = o.Store.Location(o.Path), m.Version, m.Position
		res.Size, res.Checksum, res.StartedAt, res.CompletedAt = m.Size(), m.Checksum(), m.StartedAt, m.CompletedAt
		if replayed != nil {
			res.Message = replayMessage(pitr.target, replayed)
		}
	}
	fmt.Fprintf(log, "restore %s: succeeded=%t reason=%s %s\n", o.Path, res.Succeeded, res.Reason, res.Message)
	if werr := writeResult(resultFile, res); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// CopyBinary copies the running executable to dst: the init container of a
// backup Job puts the (static) manager binary where the database image,
// which has the client tools, can run it.
func CopyBinary(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Clean(dst))
}

func writeResult(path string, r Result) error {
	if path == "" {
		return nil
	}
	return os.WriteFile(path, r.Encode(), 0o644)
}
