package backup_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/tests/utils/pitrcheck"
	"example.com/database-operator/tests/utils/testservers"
)

// mariaWriter inserts into shop.events one row per transaction on a
// session of its own, as an application would, until stopped.
func mariaWriter(t *testing.T, ctx context.Context, m *testservers.MariaDB) *pitrcheck.Writer {
	t.Helper()
	db := mariaDB(t, ctx, m)
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pitrcheck.StartFunc(ctx, func(ctx context.Context) (int64, error) {
		res, err := conn.ExecContext(ctx, "INSERT INTO shop.events () VALUES ()")
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}, t.Errorf)
}

func mariaRows(t *testing.T, ctx context.Context, m *testservers.MariaDB) []int64 {
	t.Helper()
	db := mariaDB(t, ctx, m)
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id FROM shop.events")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// ordersExist: shop.orders is there (the table the tests drop by mistake).
func ordersExist(t *testing.T, ctx context.Context, m *testservers.MariaDB) bool {
	const table = "shop.orders"
	t.Helper()
	db := mariaDB(t, ctx, m)
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE CONCAT(table_schema, '.', table_name) = ?", table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// startArchiver archives m's binary logs into arch as the agent does
// (source names the server), the files already finished first (the chain
// begins before any backup), then every 200 ms until stop returns.
func startArchiver(t *testing.T, ctx context.Context, m *testservers.MariaDB, db *sql.DB, arch binlog.Archive, source string) (*binlog.Archiver, func()) {
	t.Helper()
	archiver := &binlog.Archiver{Archive: arch, Source: source, Dir: m.Data(), Server: binlog.SQLServer{DB: db},
		Timeout: time.Second, Log: testr.New(t)}
	if err := archiver.Once(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	archived := make(chan struct{})
	go func() { defer close(archived); archiver.Run(runCtx, 200*time.Millisecond) }()
	return archiver, func() { cancel(); <-archived }
}

// corruptWhileTesting flips a byte in the middle of file until t ends,
// then puts the file back as it was.
func corruptWhileTesting(t *testing.T, file string) {
	t.Helper()
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), orig...)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(file, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(file, orig, 0o600) })
}

// archiveAll closes the primary's current binary log and archives
// everything it finished.
func archiveAll(t *testing.T, ctx context.Context, m *testservers.MariaDB, r *binlog.Archiver) {
	t.Helper()
	mariaExec(t, ctx, m, "FLUSH BINARY LOGS")
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMariaDBPointInTimeRecovery archives a MariaDB primary's binary logs
// while a writer inserts rows, takes a logical backup, notes a moment T,
// keeps writing and drops a table by mistake; a fresh server restored from
// the backup and replayed to T holds every row acknowledged before T,
// none sent after T's second, and the table. A corrupted archived file
// fails the replay before anything is applied, naming the last good point.
func TestMariaDBPointInTimeRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The source's primary is its instance 1 (server id 1001), as after a
	// failover: the restored Database's own instance 1 is a replica with
	// that id, which would skip the replayed transactions as its own
	// events if they kept the source's server id.
	topo := testservers.NewTopology(t)
	topo.SetPrimary(t, "shop-1")
	primary := testservers.StartMariaDB(t, topo, "shop-1")
	fillMariaDB(t, ctx, primary, 2000)
	mariaExec(t, ctx, primary, "CREATE TABLE shop.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))")

	root := t.TempDir()
	store := storage.NewDir(root)
	arch := binlog.Archive{Store: store, Prefix: binlog.Prefix("prod", "shop", "uid-1")}
	db := mariaDB(t, ctx, primary)
	defer db.Close()
	archiver, stopArchiver := startArchiver(t, ctx, primary, db, arch, "shop-1-a")

	writer := mariaWriter(t, ctx, primary)
	time.Sleep(time.Second)
	m, _, err := backup.Run(ctx, backup.Options{Server: mariaServer(primary), Store: store, Namespace: "prod", Database: "shop", Name: "shop-1"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	target := time.Now()
	time.Sleep(1500 * time.Millisecond)
	// A GTID target: the source's position between two moments; every
	// write acknowledged before the first is in it, none sent after the
	// second.
	var gtidTarget string
	gtidBefore := time.Now()
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtidTarget); err != nil {
		t.Fatal(err)
	}
	gtidAfter := time.Now()
	time.Sleep(time.Second)
	mariaExec(t, ctx, primary, "DROP TABLE shop.orders") // the mistake
	time.Sleep(time.Second)
	writes := writer.Stop()
	stopArchiver()
	archiveAll(t, ctx, primary, archiver)
	if st := archiver.Status(); st.Archived < 3 || st.Failing() || st.Gaps > 0 {
		t.Fatalf("archiver: %+v, want files archived every second of writes, none failing, no gap", st)
	}
	// An idle server is left alone: its new file grows by itself (the
	// server's checkpoint event) but holds no write to wait.
	idle := archiver.Status().Archived
	for range 6 {
		time.Sleep(500 * time.Millisecond)
		if err := archiver.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := archiver.Status(); st.Archived != idle {
		t.Errorf("an idle server's binary log was closed and archived %d times in 3 s (timeout 1 s)", st.Archived-idle)
	}
	from, err := binlog.ParsePosition(m.Position)
	if err != nil || len(from) == 0 {
		t.Fatalf("the backup's position %q: %v", m.Position, err)
	}

	// restore restores the backup into a new primary with a replica, then
	// replays the archive to tg.
	type restored struct{ primary, replica *testservers.MariaDB }
	restore := func(t *testing.T, tg binlog.Target) (restored, *binlog.Outcome, error) {
		pair := testservers.StartMariaDBCluster(t, "copy", 2)
		fresh := pair[0]
		// A server whose own history runs past the source's sequence
		// numbers in their domain (loading a large dump does that):
		// gtid_strict_mode refuses the source's GTIDs after its own.
		mariaExec(t, ctx, fresh, "SET SESSION gtid_seq_no = 1000000", "CREATE DATABASE history", "DROP DATABASE history")
		if _, err := backup.Restore(ctx, backup.RestoreOptions{Server: mariaServer(fresh), Store: store,
			Path: backup.Path("prod", "shop", "shop-1"), Scratch: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		out, err := binlog.Replay(ctx, binlog.ReplayOptions{Archive: arch, From: from, Taken: m.StartedAt, Target: tg,
			Client: mariaServer(fresh).BinlogClient(), Scratch: t.TempDir(), Logf: t.Logf})
		return restored{fresh, pair[1]}, out, err
	}

	t.Run("to a moment", func(t *testing.T) {
		r, out, err := restore(t, binlog.Target{Time: target})
		fresh := r.primary
		if err != nil {
			t.Fatal(err)
		}
		rows := mariaRows(t, ctx, fresh)
		// The binary log dates transactions in whole seconds: the
		// target's second is replayed whole.
		lost, _ := pitrcheck.Judge(writes, rows, target)
		_, leaked := pitrcheck.Judge(writes, rows, target.Truncate(time.Second).Add(time.Second))
		before, after := pitrcheck.Sides(writes, target)
		t.Logf("replayed %d transactions (%d files, %d bytes); %d writes before T, %d after; %d rows restored", out.Transactions, out.Files, out.Bytes, before, after, len(rows))
		if lost > 0 || leaked > 0 || before == 0 || after == 0 {
			t.Errorf("restored to %s: %d acknowledged writes lost, %d later writes leaked (%d before, %d after)", target.Format(time.RFC3339Nano), lost, leaked, before, after)
		}
		if !ordersExist(t, ctx, fresh) {
			t.Error("the table dropped after T is gone from the restore")
		}
		// The restored server took the replayed transactions under its
		// own server id: its replica (the source's server id) has them.
		replica := r.replica
		wait, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		for got := 0; got != len(rows); got = len(mariaRows(t, ctx, replica)) {
			select {
			case <-wait.Done():
				t.Fatalf("the restored primary's replica %s (server id %d) has %d of its %d rows", replica.Pod, replica.ServerID, got, len(rows))
			case <-time.After(100 * time.Millisecond):
			}
		}
	})

	t.Run("to the end", func(t *testing.T) {
		r, _, err := restore(t, binlog.Target{})
		fresh := r.primary
		if err != nil {
			t.Fatal(err)
		}
		lost, holes, _ := pitrcheck.Loss(writes, mariaRows(t, ctx, fresh))
		if lost > 0 || holes > 0 {
			t.Errorf("restored to the archive's end: %d writes lost, %d holes", lost, holes)
		}
		if ordersExist(t, ctx, fresh) {
			t.Error("the table dropped before the end is there")
		}
	})

	t.Run("outside the window", func(t *testing.T) {
		_, _, err := restore(t, binlog.Target{Time: time.Now().Add(time.Hour)})
		if !errors.Is(err, binlog.ErrOutsideWindow) || !strings.Contains(err.Error(), "after the archive's end") {
			t.Errorf("a target after the archive's end: %v", err)
		}
	})

	// restoreCommand runs the restore Job's program into a new server,
	// replaying the archive with args.
	restoreCommand := func(t *testing.T, name string, args ...string) (*testservers.MariaDB, backup.Result, error) {
		fresh := testservers.StartMariaDBPrimary(t)
		t.Setenv(backup.EnvPassword, testservers.MariaDBRootPassword)
		result := filepath.Join(t.TempDir(), "result")
		err := backup.RestoreCommand(ctx, append([]string{"--engine=mariadb", "--host=127.0.0.1", "--port=" + itoa(fresh.Port), "--user=root",
			"--dir=" + root, "--path=" + backup.Path("prod", "shop", name), "--scratch=" + t.TempDir(), "--result-file=" + result,
			"--binlog-archive=" + arch.Prefix}, args...), testWriter{t})
		var res backup.Result
		if b, rerr := os.ReadFile(result); rerr != nil || json.Unmarshal(b, &res) != nil {
			t.Fatalf("no result: %v", rerr)
		}
		return fresh, res, err
	}

	t.Run("to a GTID, through the restore program", func(t *testing.T) {
		fresh, res, err := restoreCommand(t, "shop-1", "--target-gtid="+gtidTarget)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", res.Message)
		rows := mariaRows(t, ctx, fresh)
		lost, _ := pitrcheck.Judge(writes, rows, gtidBefore)
		_, leaked := pitrcheck.Judge(writes, rows, gtidAfter)
		if lost > 0 || leaked > 0 || !strings.Contains(res.Message, "to GTID "+gtidTarget) {
			t.Errorf("restored to GTID %s: %d acknowledged writes lost, %d later ones leaked; %s", gtidTarget, lost, leaked, res.Message)
		}
	})

	t.Run("a corrupted file stops the restore before it loads anything", func(t *testing.T) {
		files, err := arch.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := binlog.Chain(files, from)
		if err != nil || len(chain) < 2 {
			t.Fatalf("chain %v: %v", chain, err)
		}
		bad := chain[1]
		corruptWhileTesting(t, filepath.Join(root, arch.Prefix, bad.Source, bad.Name))
		fresh, res, err := restoreCommand(t, "shop-1")
		if err == nil || res.Reason != backup.ReasonArchiveCorrupt || !strings.Contains(res.Message, bad.Name) || !strings.Contains(res.Message, "can restore up to") {
			t.Fatalf("restore over a corrupted file: %v, result %+v", err, res)
		}
		t.Logf("refused: %s", res.Message)
		if ordersExist(t, ctx, fresh) {
			t.Error("the dump was loaded before the archive was found corrupt")
		}
		// The replay alone meets it the same way, before applying anything.
		if _, err := binlog.Replay(ctx, binlog.ReplayOptions{Archive: arch, From: from, Client: mariaServer(fresh).BinlogClient(), Scratch: t.TempDir()}); !errors.Is(err, wal.ErrCorrupt) {
			t.Errorf("replay over a corrupted file: %v", err)
		}
	})

	// A second backup with retention keeping one: the first goes, and
	// with it the archived files no replay from the second reads; the
	// replay from the second is what it was, and a restore from it
	// reaches writes made after it.
	t.Run("retention keeps what the kept backup replays", func(t *testing.T) {
		files, err := arch.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := len(files["shop-1-a"])
		m2, pruned, err := backup.Run(ctx, backup.Options{Server: mariaServer(primary), Store: store, Namespace: "prod", Database: "shop",
			DatabaseUID: "uid-1", DatabaseCreated: m.StartedAt.Add(-time.Minute), Name: "shop-2",
			Retention: backup.Retention{KeepLast: 1}, Archive: arch.Prefix})
		if err != nil {
			t.Fatal(err)
		}
		from2, err := binlog.ParsePosition(m2.Position)
		if err != nil {
			t.Fatal(err)
		}
		chainBefore, err := binlog.Chain(files, from2)
		if err != nil {
			t.Fatal(err)
		}
		if len(pruned.Backups) != 1 || pruned.Backups[0] != "shop-1" || pruned.Archived == 0 || pruned.ArchiveKeptFrom != from2.String() {
			t.Fatalf("retention: %+v, want shop-1 and the files before %s deleted", pruned, from2)
		}
		if files, err = arch.List(ctx); err != nil || len(files["shop-1-a"]) != total-pruned.Archived {
			t.Fatalf("%d files left of %d, %d deleted (%v)", len(files["shop-1-a"]), total, pruned.Archived, err)
		}
		if chainAfter, err := binlog.Chain(files, from2); err != nil || names(chainAfter) != names(chainBefore) {
			t.Errorf("the replay from the kept backup changed: %s (%v), was %s", names(chainAfter), err, names(chainBefore))
		}
		t.Logf("retention deleted %d of %d archived files; the replay from shop-2 reads %s", pruned.Archived, total, names(chainBefore))
		later := mariaWriter(t, ctx, primary)
		time.Sleep(time.Second)
		writes := later.Stop()
		archiveAll(t, ctx, primary, archiver)
		fresh, res, err := restoreCommand(t, "shop-2")
		if err != nil {
			t.Fatal(err)
		}
		if lost, holes, _ := pitrcheck.Loss(writes, mariaRows(t, ctx, fresh)); lost > 0 || holes > 0 || len(writes) == 0 {
			t.Errorf("restored from the kept backup to the end: %d of %d writes lost, %d holes; %s", lost, len(writes), holes, res.Message)
		}
	})

	// The file the server writes is streamed: with a timeout that never
	// closes it, a restore to the end holds every write acknowledged
	// before the archiver's last round, the file never closed.
	t.Run("the file being written is streamed", func(t *testing.T) {
		streamer := &binlog.Archiver{Archive: arch, Source: "shop-1-a", Dir: primary.Data(), Server: binlog.SQLServer{DB: db},
			Timeout: time.Hour, Stream: true, Log: testr.New(t)}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); streamer.Run(runCtx, 200*time.Millisecond) }()
		w := mariaWriter(t, ctx, primary)
		time.Sleep(1500 * time.Millisecond)
		writes := w.Stop()
		time.Sleep(time.Second) // a round or more after the last write
		stop()
		<-done
		st := streamer.Status()
		files, err := arch.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs := files["shop-1-a"]
		if len(fs) == 0 || !fs[len(fs)-1].Streamed || st.Streamed == 0 || st.Failing() {
			t.Fatalf("nothing streamed: %+v", st)
		}
		fresh, res, err := restoreCommand(t, "shop-2")
		if err != nil {
			t.Fatal(err)
		}
		lost, holes, _ := pitrcheck.Loss(writes, mariaRows(t, ctx, fresh))
		t.Logf("streamed %d bytes of %s; %s", st.Streamed, fs[len(fs)-1].Name, res.Message)
		if lost > 0 || holes > 0 || len(writes) == 0 {
			t.Errorf("restored to the end of a streamed file: %d of %d writes lost, %d holes", lost, len(writes), holes)
		}
	})
}

// names lists archived files as a replay reads them.
func names(fs []binlog.File) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return strings.Join(out, " ")
}

// testWriter is the test's log as an io.Writer.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
