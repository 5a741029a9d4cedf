package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/pitr"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/pitrcheck"
	"example.com/database-operator/tests/utils/testservers"
)

// The test binary is PostgreSQL's archive and restore command too, as the
// manager binary is in a pod: started with DBOP_WAL_COMMAND set, it is
// that subcommand (wal-push, wal-fetch) and nothing else.
func TestMain(m *testing.M) {
	var err error
	switch os.Getenv("DBOP_WAL_COMMAND") {
	case "":
		os.Exit(m.Run())
	case "wal-push":
		err = wal.PushCommand(context.Background(), os.Args[1:], os.Stderr)
	case "wal-fetch":
		err = wal.FetchCommand(context.Background(), os.Args[1:], os.Stderr)
	case "recover":
		err = pitr.Command(context.Background(), os.Args[1:], os.Stderr)
	default:
		err = fmt.Errorf("DBOP_WAL_COMMAND %q", os.Getenv("DBOP_WAL_COMMAND"))
	}
	if err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// walSetup is an archive in a directory of its own (the target) and the
// test binary where the servers' account can run it.
type walSetup struct {
	dir, bin string
	// archive and restore are PostgreSQL's archive_command and
	// restore_command through the binary.
	archive, restore string
}

// walCommands copies the test binary where the servers' account can run
// it and returns PostgreSQL's archive_command and restore_command for an
// archive in a directory of its own.
func walCommands(t *testing.T) walSetup {
	t.Helper()
	dir, err := os.MkdirTemp("", "dbop-wal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "manager")
	if err := backup.CopyBinary(bin); err != nil {
		t.Fatal(err)
	}
	archiveDir := filepath.Join(dir, "archive")
	if err := os.Mkdir(archiveDir, 0o700); err != nil {
		t.Fatal(err)
	}
	testservers.GiveToPostgres(t, archiveDir)
	target := "--dir=" + archiveDir + " --prefix=shop/orders/wal"
	return walSetup{dir: archiveDir, bin: bin,
		archive: fmt.Sprintf("DBOP_WAL_COMMAND=wal-push %s %s %%p", bin, target),
		restore: fmt.Sprintf("DBOP_WAL_COMMAND=wal-fetch %s %s %%f %%p", bin, target)}
}

// recoverRun is one run of the manager's recover command, as a recovery
// Job runs it: as the servers' account, the passwords in its environment.
type recoverRun struct {
	pgdata string
	result backup.Result
	err    error
	out    string
}

func runRecover(t *testing.T, w walSetup, path string, args ...string) recoverRun {
	t.Helper()
	// Not under t.TempDir(), whose parent the servers' account cannot enter.
	dir, err := os.MkdirTemp("", "dbop-recover-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	testservers.GiveToPostgres(t, dir)
	r := recoverRun{pgdata: filepath.Join(dir, "pgdata")}
	result := filepath.Join(dir, "result.json")
	args = append([]string{"--dir=" + w.dir, "--path=" + path, "--archive=shop/orders/wal", "--restore-command=" + w.restore,
		"--pgdata=" + r.pgdata, "--scratch=" + dir, "--user=postgres", "--replication-user=replicator", "--result-file=" + result}, args...)
	cmd := testservers.PostgresCommand(t, dir, w.bin, args...)
	cmd.Env = append(cmd.Env, "DBOP_WAL_COMMAND=recover", pitr.EnvSuperuserPassword+"="+testservers.PostgresPassword,
		pitr.EnvReplicationPassword+"=replication-Password-2")
	out, err := cmd.CombinedOutput()
	r.err, r.out = err, string(out)
	b, rerr := os.ReadFile(result)
	if rerr != nil {
		t.Fatalf("the recover command left no result (%v): %v\n%s", r.err, rerr, out)
	}
	if r.result, rerr = backup.DecodeResult(b); rerr != nil {
		t.Fatalf("result %q: %v", b, rerr)
	}
	return r
}

// giveTreeToPostgres hands a directory tree the test wrote to the
// servers' account (a recovery Job reads the target as it).
func giveTreeToPostgres(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			testservers.GiveToPostgres(t, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// archived waits until the server's archiver has archived the segment it
// just switched away from.
func switchAndArchive(t *testing.T, ctx context.Context, p *testservers.Postgres) string {
	t.Helper()
	c, err := p.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var seg string
	if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var last *string
		var failed int64
		if err := c.QueryRow(ctx, "SELECT last_archived_wal, failed_count FROM pg_stat_archiver").Scan(&last, &failed); err != nil {
			t.Fatal(err)
		}
		if last != nil && *last >= seg {
			return seg
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not archived within 30 s (last %v, %d failures):\n%s", seg, deref(last), failed, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostgresPointInTimeRecovery: a server archives its WAL through the
// manager's wal-push (archive_command); writers insert timestamped rows;
// the test notes a moment T, the writers go on, a table is dropped. A new
// server on the base backup taken before, replaying the archive through
// wal-fetch (restore_command) to T, has every row acknowledged before T,
// none sent after it, and the dropped table. A segment corrupted in the
// archive is refused before replay: the recovery to T stops and says so,
// never ending quietly at an earlier point.
func TestPostgresPointInTimeRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := walCommands(t)
	archiveDir := w.dir
	src := testservers.StartPostgresWith(t, testservers.NewTopology(t), "orders-0", testservers.PostgresOptions{
		Settings: []string{"archive_mode = on", "archive_command = '" + w.archive + "'"},
	})
	pgExec(t, ctx, src, "postgres",
		"CREATE TABLE events (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE doomed (id int)", "INSERT INTO doomed VALUES (1)")
	// The base backup: the backup program's physical method (pg_basebackup
	// streamed to the target with its checksum), unpacked by
	// ExtractPhysical after it checked the copy against the manifest.
	// In the archive's target, as a Database's backups are.
	backups := storage.NewDir(archiveDir)
	m, _, err := backup.Run(ctx, backup.Options{Server: pgServer(src), Store: backups, Namespace: "shop", Database: "orders",
		DatabaseUID: "uid-1", Name: "base-1", Method: backup.MethodPhysical})
	if err != nil {
		t.Fatalf("physical backup: %v", err)
	}
	// What the test wrote there as root goes to the servers' account
	// (the archiver writes beside it, a recovery reads it).
	giveTreeToPostgres(t, archiveDir)
	if m.Method != backup.MethodPhysical || len(m.Files) != 1 || m.Files[0].Kind != backup.KindBaseBackup || m.EndPosition == "" {
		t.Fatalf("physical backup manifest %+v", m)
	}
	base := filepath.Join(t.TempDir(), "base")
	if _, err := backup.ExtractPhysical(ctx, backups, backup.Path("shop", "orders", "base-1"), t.TempDir(), base); err != nil {
		t.Fatalf("unpacking the physical backup: %v", err)
	}
	// A corrupted copy is refused before anything is unpacked.
	t.Run("a corrupted base backup is refused", func(t *testing.T) {
		key := backup.Path("shop", "orders", "base-1") + "/base.tar"
		r, err := backups.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		corrupt := storage.NewDir(t.TempDir())
		if _, err := corrupt.Put(ctx, key, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		mr, err := backups.Get(ctx, backup.Path("shop", "orders", "base-1")+"/"+backup.ManifestName)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := corrupt.Put(ctx, backup.Path("shop", "orders", "base-1")+"/"+backup.ManifestName, mr); err != nil {
			t.Fatal(err)
		}
		mr.Close()
		dest := filepath.Join(t.TempDir(), "base")
		_, err = backup.ExtractPhysical(ctx, corrupt, backup.Path("shop", "orders", "base-1"), t.TempDir(), dest)
		if backup.ReasonOf(err) != backup.ReasonCorrupt {
			t.Errorf("unpacking a corrupted base backup: %v, want %s", err, backup.ReasonCorrupt)
		}
		if _, err := os.Lstat(dest); err == nil {
			t.Error("a corrupted base backup was unpacked")
		}
	})
	// Logical restores refuse it: it is no dump.
	if _, err := backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(src), Store: backups, Path: backup.Path("shop", "orders", "base-1"), Scratch: t.TempDir()}); backup.ReasonOf(err) != backup.ReasonInvalid {
		t.Errorf("loading a physical backup as a dump: %v, want %s", err, backup.ReasonInvalid)
	}
	// What follows lies in segments only the archive holds.
	first := switchAndArchive(t, ctx, src)

	wc, err := src.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close(context.Background())
	w8 := pitrcheck.Start(ctx, wc, t.Errorf)
	time.Sleep(700 * time.Millisecond)
	var target time.Time
	c := pgConn(t, ctx, src, "postgres")
	if err := c.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&target); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	pgExec(t, ctx, src, "postgres", "DROP TABLE doomed")
	time.Sleep(200 * time.Millisecond)
	writes := w8.Stop()
	c.Close(ctx)
	last := switchAndArchive(t, ctx, src)
	before, after := pitrcheck.Sides(writes, target)
	if before == 0 || after == 0 {
		t.Fatalf("%d writes acknowledged before T, %d sent after: the writer did not straddle T", before, after)
	}
	t.Logf("archived %s to %s; %d writes acknowledged before T, %d sent after", first, last, before, after)
	entries, err := wal.Archive{Store: storage.NewDir(archiveDir), Prefix: "shop/orders/wal"}.List(ctx)
	if err != nil || len(entries) == 0 {
		t.Fatalf("archive entries: %v (%v)", entries, err)
	}

	if a, err := src.Instance(t).Archiver(ctx); err != nil || a.Mode != "on" || a.Archived < 2 || a.Failing() || a.LastArchived != last {
		t.Errorf("the archiver's report: %+v (%v), want archive_mode on and %s the last archived", a, err, last)
	}

	// The target refuses writes for a while (the directory read-only to
	// the server's account): the server reports the failure and keeps
	// the segment; once the target takes writes again it is archived,
	// and the archive has every segment, none missing.
	t.Run("the target down for a while", func(t *testing.T) {
		walDir := filepath.Join(archiveDir, "shop/orders/wal")
		if err := os.Chmod(walDir, 0o500); err != nil {
			t.Fatal(err)
		}
		pgExec(t, ctx, src, "postgres", "INSERT INTO events (at) VALUES (clock_timestamp())")
		c := pgConn(t, ctx, src, "postgres")
		defer c.Close(ctx)
		var pending string
		if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		inst := src.Instance(t)
		waitFor(t, ctx, func() bool { a, err := inst.Archiver(ctx); return err == nil && a.Failing() && a.LastFailed == pending })
		if err := os.Chmod(walDir, 0o700); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, func() bool {
			a, err := inst.Archiver(ctx)
			return err == nil && !a.Failing() && a.LastArchived == pending
		})
		entries, err := wal.Archive{Store: storage.NewDir(archiveDir), Prefix: "shop/orders/wal"}.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var segments []string
		for _, e := range entries {
			if len(e.Name) == 24 {
				segments = append(segments, e.Name)
			}
		}
		for i := 1; i < len(segments); i++ {
			if next := fmt.Sprintf("%s%016X", segments[i-1][:8], mustHex(t, segments[i-1][8:])+1); segments[i] != next {
				t.Errorf("the archive skips from %s to %s", segments[i-1], segments[i])
			}
		}
		if segments[len(segments)-1] != pending {
			t.Errorf("archived segments %v end before %s", segments, pending)
		}
	})

	basePath := backup.Path("shop", "orders", "base-1")
	var verifierBefore string
	if err := pgConn(t, ctx, src, "postgres").QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'").Scan(&verifierBefore); err != nil {
		t.Fatal(err)
	}

	// A target the backup and the archive cannot reach is refused before
	// anything is written.
	t.Run("a target outside the window is refused", func(t *testing.T) {
		for name, at := range map[string]time.Time{
			"before the backup ended": m.CompletedAt.Add(-time.Minute),
			"past the archive's end":  time.Now().Add(time.Hour),
		} {
			r := runRecover(t, w, basePath, "--target-time="+at.Format(time.RFC3339Nano))
			if r.err == nil || r.result.Succeeded || r.result.Reason != pitr.ReasonOutsideWindow {
				t.Errorf("%s: %v, result %+v, want %s\n%s", name, r.err, r.result, pitr.ReasonOutsideWindow, r.out)
			}
			if _, err := os.Lstat(r.pgdata); err == nil {
				t.Errorf("%s: a data directory was created", name)
			}
			t.Logf("%s: %s", name, r.result.Message)
		}
	})

	// The recover command (a recovery Job's program) unpacks the base
	// backup, replays the archive through wal-fetch to T, promotes, gives
	// the accounts their new passwords and shuts down cleanly; a server
	// started on the result as a new primary has what was committed before T.
	t.Run("restored to T", func(t *testing.T) {
		r := runRecover(t, w, basePath, "--target-time="+target.Format(time.RFC3339Nano))
		if r.err != nil || !r.result.Succeeded {
			t.Fatalf("recover: %v, result %+v\n%s", r.err, r.result, r.out)
		}
		t.Logf("recover: %s", r.result.Message)
		if !strings.Contains(r.out, "wal-fetch: restored "+last) {
			t.Errorf("the recovery did not fetch %s through wal-fetch:\n%s", last, r.out)
		}
		restored, rc, ids := startRecovered(t, ctx, r, "restored-0")
		lost, leaked := pitrcheck.Judge(writes, ids, target)
		if lost > 0 || leaked > 0 {
			t.Errorf("restored to T: %d writes acknowledged before T missing, %d sent after T present (of %d rows)", lost, leaked, len(ids))
		}
		var doomed int
		if err := rc.QueryRow(ctx, "SELECT count(*) FROM doomed").Scan(&doomed); err != nil || doomed != 1 {
			t.Errorf("the table dropped after T: %d rows (%v), want it back with its row", doomed, err)
		}
		// The accounts have the new Database's passwords: the replication
		// account (the source had none) made, the superuser's set again.
		var replication bool
		var verifier string
		if err := rc.QueryRow(ctx, "SELECT rolreplication AND rolcanlogin AND rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'replicator'").Scan(&replication); err != nil || !replication {
			t.Errorf("the replication account: %t (%v)", replication, err)
		}
		if err := rc.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'").Scan(&verifier); err != nil || verifier == verifierBefore {
			t.Errorf("the superuser's password was not set (%v)", err)
		}
		var inRecovery bool
		if err := rc.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
			t.Errorf("the recovered server is still in recovery (%v)", err)
		}
		if strings.Contains(restored.Log(), "database system was not properly shut down") {
			t.Errorf("the recovered data directory needed crash recovery:\n%s", restored.Log())
		}
		t.Logf("restored to T: %d rows, all %d acknowledged before T among them", len(ids), before)
	})

	// A restore drill replays the whole archive into a copy, opens every
	// database, counts each table's rows and deletes the copy.
	t.Run("a drill", func(t *testing.T) {
		// A session's temporary table, open while the archive ends: the
		// copy has its catalog entry and none of its data.
		tc := pgConn(t, ctx, src, "postgres")
		defer tc.Close(ctx)
		if _, err := tc.Exec(ctx, "CREATE TEMP TABLE scratch AS SELECT generate_series(1, 1000) AS i"); err != nil {
			t.Fatal(err)
		}
		switchAndArchive(t, ctx, src)
		var rows int64
		if err := pgConn(t, ctx, src, "postgres").QueryRow(ctx, "SELECT count(*) FROM events").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		r := runRecover(t, w, basePath, "--drill")
		if r.err != nil || !r.result.Succeeded || r.result.Reason != "Verified" {
			t.Fatalf("drill: %v, result %+v\n%s", r.err, r.result, r.out)
		}
		t.Logf("drill: %s", r.result.Message)
		if want := fmt.Sprintf("drill: postgres.public.events has %d rows", rows); !strings.Contains(r.out, want) {
			t.Errorf("the drill's log does not say %q:\n%s", want, r.out)
		}
		for _, dir := range []string{r.pgdata, r.pgdata + ".recovering"} {
			if _, err := os.Lstat(dir); err == nil {
				t.Errorf("the drill left %s", dir)
			}
		}
	})

	// The writes lie in the segment after the base backup's (whose copy
	// in the base backup a recovery would fall back on).
	t.Run("a corrupted segment stops the recovery", func(t *testing.T) {
		seg := filepath.Join(archiveDir, "shop/orders/wal", last)
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/3] ^= 0xff
		if err := os.WriteFile(seg, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := runRecover(t, w, basePath, "--target-time="+target.Format(time.RFC3339Nano))
		if r.err == nil || r.result.Succeeded || r.result.Reason != pitr.ReasonRecoveryFailed {
			t.Fatalf("recovery over a corrupt segment: %v, result %+v, want %s\n%s", r.err, r.result, pitr.ReasonRecoveryFailed, r.out)
		}
		if !strings.Contains(r.result.Message, "CORRUPT ARCHIVE") || !strings.Contains(r.result.Message, last) {
			t.Errorf("the corrupt segment %s was not reported: %s", last, r.result.Message)
		}
		if !strings.Contains(r.result.Message, "recovery ended before configured recovery target was reached") {
			t.Errorf("the recovery did not stop short of T with an error: %s", r.result.Message)
		}
		for _, dir := range []string{r.pgdata, r.pgdata + ".recovering"} {
			if _, err := os.Lstat(dir); err == nil {
				t.Errorf("a failed recovery left %s", dir)
			}
		}
		// Without a target PostgreSQL would promote at the last good
		// point, quietly short of the archive; the recovery and a drill
		// fail instead, and say where the replay ended.
		for _, args := range [][]string{nil, {"--drill"}} {
			r := runRecover(t, w, basePath, args...)
			if r.err == nil || r.result.Succeeded || r.result.Reason != pitr.ReasonRecoveryFailed ||
				!strings.Contains(r.result.Message, "short of the archive's last segment") {
				t.Errorf("recovery %v to the end over a corrupt segment: %v, result %+v, want %s\n%s", args, r.err, r.result, pitr.ReasonRecoveryFailed, r.out)
			}
			t.Logf("recovery %v to the end: %s", args, r.result.Message)
			for _, dir := range []string{r.pgdata, r.pgdata + ".recovering"} {
				if _, err := os.Lstat(dir); err == nil {
					t.Errorf("a failed recovery left %s", dir)
				}
			}
		}
	})
	// A second base backup with retention keeping one: the first goes, and
	// with it the archived files before where the second starts (the
	// corrupted one among them). A recovery from the second to a moment
	// after it finds everything it needs.
	t.Run("retention keeps what the window needs", func(t *testing.T) {
		m2, pruned, err := backup.Run(ctx, backup.Options{Server: pgServer(src), Store: backups, Namespace: "shop", Database: "orders",
			DatabaseUID: "uid-1", Name: "base-2", Method: backup.MethodPhysical, Retention: backup.Retention{KeepLast: 1}, Archive: "shop/orders/wal"})
		if err != nil {
			t.Fatalf("second physical backup: %v", err)
		}
		giveTreeToPostgres(t, archiveDir)
		if !slices.Equal(pruned.Backups, []string{"base-1"}) || m2.WALStart == "" || pruned.ArchiveKeptFrom != m2.WALStart || pruned.Archived == 0 {
			t.Fatalf("retention: %+v; base-2 starts at %q", pruned, m2.WALStart)
		}
		t.Logf("retention deleted %s and %d archived files before %s", pruned.Backups, pruned.Archived, pruned.ArchiveKeptFrom)
		wc := pgConn(t, ctx, src, "postgres")
		defer wc.Close(ctx)
		w8 := pitrcheck.Start(ctx, wc, t.Errorf)
		time.Sleep(500 * time.Millisecond)
		var target time.Time
		if err := pgConn(t, ctx, src, "postgres").QueryRow(ctx, "SELECT clock_timestamp()").Scan(&target); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		writes := w8.Stop()
		last := switchAndArchive(t, ctx, src)
		entries, err := wal.Archive{Store: backups, Prefix: "shop/orders/wal"}.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var segments []string
		for _, e := range entries {
			if n := wal.SegmentNumber(e.Name); n != "" && n < wal.SegmentNumber(m2.WALStart) {
				t.Errorf("%s is still archived, before %s", e.Name, m2.WALStart)
			}
			if len(e.Name) == 24 {
				segments = append(segments, e.Name)
			}
		}
		if len(segments) == 0 || segments[0] != m2.WALStart || segments[len(segments)-1] != last {
			t.Errorf("archived segments %v, want %s to %s", segments, m2.WALStart, last)
		}
		r := runRecover(t, w, backup.Path("shop", "orders", "base-2"), "--target-time="+target.Format(time.RFC3339Nano))
		if r.err != nil || !r.result.Succeeded {
			t.Fatalf("recover from the backup kept: %v, result %+v\n%s", r.err, r.result, r.out)
		}
		_, _, ids := startRecovered(t, ctx, r, "kept-0")
		if lost, leaked := pitrcheck.Judge(writes, ids, target); lost > 0 || leaked > 0 {
			t.Errorf("restored from the backup kept: %d writes acknowledged before T missing, %d sent after T present", lost, leaked)
		}
	})
}

// startRecovered starts a server on a recovery's data directory, as the
// new Database's first pod would, and reads the writer's rows from it.
func startRecovered(t *testing.T, ctx context.Context, r recoverRun, pod string) (*testservers.Postgres, *pgx.Conn, []int64) {
	t.Helper()
	restored := testservers.PostgresOnData(t, pod, r.pgdata, false, testservers.PostgresOptions{})
	restored.Restart(t)
	waitPromoted(t, ctx, restored)
	c := pgConn(t, ctx, restored, "postgres")
	t.Cleanup(func() { c.Close(context.Background()) })
	ids, err := pitrcheck.Rows(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return restored, c, ids
}

// mustHex parses a WAL file name's log and segment numbers as one number
// (right while the segment number stays below 0xFF, as in these tests).
func mustHex(t *testing.T, s string) uint64 {
	t.Helper()
	var n uint64
	if _, err := fmt.Sscanf(s, "%016X", &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitPromoted(t *testing.T, ctx context.Context, p *testservers.Postgres) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := p.Connect(ctx)
		if err == nil {
			var inRecovery bool
			err = c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
			c.Close(ctx)
			if err == nil && !inRecovery {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still recovering after a minute (%v):\n%s", p.Pod, err, p.Log())
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatal(ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestArchiveAcrossFailover: the primary's target refuses its pushes while
// it completes segments its replica receives; the primary is lost; the
// replica promoted archives only what it writes itself, and the archive
// has a gap at the failover, which a recovery to the end stops at. The
// agent's step after a promotion (ArchiveBacklog) hands the segments the
// old primary never archived to the new primary's archiver: the archive
// has no gap, and a recovery to the end has every acknowledged write,
// before the failover and after it.
func TestArchiveAcrossFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := walCommands(t)
	opts := testservers.PostgresOptions{Settings: []string{"archive_mode = on", "archive_command = '" + w.archive + "'"}}
	topo := testservers.NewTopology(t)
	primary := testservers.StartPostgresWith(t, topo, "orders-0", opts)
	pgExec(t, ctx, primary, "postgres", "CREATE TABLE events (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	replica := testservers.StartPostgresWith(t, topo, "orders-1", opts)
	backups := storage.NewDir(w.dir)
	if _, _, err := backup.Run(ctx, backup.Options{Server: pgServer(primary), Store: backups, Namespace: "shop", Database: "orders",
		DatabaseUID: "uid-1", Name: "base", Method: backup.MethodPhysical}); err != nil {
		t.Fatalf("physical backup: %v", err)
	}
	giveTreeToPostgres(t, w.dir)
	switchAndArchive(t, ctx, primary)

	// The target refuses the primary's pushes; it completes two more
	// segments, which its replica receives.
	walDir := filepath.Join(w.dir, "shop/orders/wal")
	if err := os.Chmod(walDir, 0o500); err != nil {
		t.Fatal(err)
	}
	wc := pgConn(t, ctx, primary, "postgres")
	w8 := pitrcheck.Start(ctx, wc, t.Errorf)
	for range 2 {
		time.Sleep(300 * time.Millisecond)
		pgExec(t, ctx, primary, "postgres", "SELECT pg_switch_wal()")
	}
	time.Sleep(300 * time.Millisecond)
	writes := w8.Stop()
	wc.Close(ctx)
	var end string
	if err := pgConn(t, ctx, primary, "postgres").QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	rc := pgConn(t, ctx, replica, "postgres")
	waitFor(t, ctx, func() bool {
		var caught bool
		return rc.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", end).Scan(&caught) == nil && caught
	})
	rc.Close(ctx)
	primary.Stop()
	if err := os.Chmod(walDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := replica.Instance(t).Promote(ctx); err != nil {
		t.Fatalf("promoting the replica: %v", err)
	}
	backlog, err := wal.Backlog(replica.Data(), 16<<20)
	if err != nil || len(backlog) == 0 {
		t.Fatalf("the promoted replica's backlog %v (%v), want the segments the old primary did not archive", backlog, err)
	}
	archive := wal.Archive{Store: backups, Prefix: "shop/orders/wal"}
	archived := func() map[string]bool {
		entries, err := archive.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, e := range entries {
			names[e.Name] = true
		}
		return names
	}
	// Without the agent's step, the new primary never archives those the
	// old one did not.
	time.Sleep(2 * time.Second)
	names := archived()
	var missing []string
	for _, s := range backlog {
		if !names[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) < 2 {
		t.Fatalf("the archive lacks %v of the backlog %v: want the two segments completed while the target refused the old primary", missing, backlog)
	}
	t.Logf("the old primary never archived %v", missing)

	// What the new primary's agent does once it sees the promotion.
	agent.New(agent.Config{Engine: dbv1.EnginePostgreSQL, Server: engine.Endpoint{Host: "127.0.0.1", Port: replica.Port},
		Superuser: engine.Credentials{User: "postgres", Password: replica.Password}, Log: testr.New(t)}).ArchiveBacklog(ctx)
	markedAt := time.Now()
	waitFor(t, ctx, func() bool {
		names := archived()
		for _, s := range backlog {
			if !names[s] {
				return false
			}
		}
		return true
	})
	t.Logf("the backlog archived %s after it was marked", time.Since(markedAt).Round(time.Millisecond))
	// Those archived before were taken again as the same contents: the
	// new primary's archiver reports no failure.
	if a, err := replica.Instance(t).Archiver(ctx); err != nil || a.Failed > 0 {
		t.Errorf("the new primary's archiver: %+v (%v), want no failure", a, err)
	}
	// And marked archived: a status file the archiver cannot open has it
	// archive the segment again and again, and keep it in pg_wal.
	time.Sleep(time.Second)
	if strings.Contains(replica.Log(), "archive_status") {
		t.Errorf("the archiver could not mark the backlog archived:\n%s", replica.Log())
	}
	nc := pgConn(t, ctx, replica, "postgres")
	w8 = pitrcheck.Start(ctx, nc, t.Errorf)
	time.Sleep(500 * time.Millisecond)
	writes = append(writes, w8.Stop()...)
	nc.Close(ctx)
	switchAndArchive(t, ctx, replica)
	giveTreeToPostgres(t, w.dir)

	r := runRecover(t, w, backup.Path("shop", "orders", "base"))
	if r.err != nil || !r.result.Succeeded {
		t.Fatalf("recovery to the end across the failover: %v, result %+v\n%s", r.err, r.result, r.out)
	}
	t.Logf("recovered: %s", r.result.Message)
	_, _, ids := startRecovered(t, ctx, r, "after-0")
	if lost, _ := pitrcheck.Judge(writes, ids, time.Now()); lost > 0 {
		t.Errorf("%d acknowledged writes missing after a recovery to the end (of %d)", lost, len(writes))
	}
}
