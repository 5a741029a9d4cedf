package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/tests/utils/pitrcheck"
)

// TestMariaDBPointInTimeRecovery: a MariaDB Database archives its binary
// log through its primary's agent (ContinuousArchiving True); a logical
// Backup (a dump) and a physical one (mariadb-backup, copied by the agent)
// record the archive and their GTID positions. A writer inserts rows on a
// long-lived session, T is noted, a table is dropped by mistake. A new
// Database bootstrapped from each Backup with recoveryTarget.time T (the
// dump loaded into its primary, the copy recovered before its pods) and
// the archive replayed to T holds every row acknowledged before T, none
// sent after T's second (the binary log keeps whole seconds), and the
// dropped table.
func TestMariaDBPointInTimeRecovery(t *testing.T) {
	t.Parallel() // its own Databases: see parallel in main_test.go
	p := newMariaPITRSource(t, "mpitr")
	p.backup("base", dbv1.BackupLogical)
	p.backup("phys") // the default with an archive
	w := p.startWriter()
	time.Sleep(1500 * time.Millisecond)
	target := time.Now() // the node's clock is the servers'
	time.Sleep(1500 * time.Millisecond)
	p.exec("DROP TABLE shop.doomed")
	writes := w.Stop()
	straddles(t, writes, target)
	// The archive reaches past T's second once the file holding it was
	// closed (the archive timeout, 10 s) and archived.
	stop := target.Truncate(time.Second).Add(time.Second)
	eventually(t, 2*time.Minute, "the archive past T", func() string {
		st := k8sDatabase(t, p.db).Status
		if st.LastRecoverableTime == nil || st.LastRecoverableTime.Time.Before(stop) || st.FirstRecoverabilityPoint == nil {
			return fmt.Sprintf("recoverable from %v to %v", st.FirstRecoverabilityPoint, st.LastRecoverableTime)
		}
		return ""
	})

	start := time.Now()
	from := map[string]string{"mpitr-at-t": "base", "mpitr-phys-at-t": "phys"}
	for name, b := range from {
		newDatabase(t, p.db.Namespace, name, dbv1.EngineMariaDB, "10.11", func(d *dbv1.Database) {
			d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: b},
				RecoveryTarget: &dbv1.RecoveryTarget{Time: target.UTC().Format(time.RFC3339Nano)}}
		})
	}
	for name, b := range from {
		t.Run(b, func(t *testing.T) {
			restored := k8sDatabase(t, &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: p.db.Namespace, Name: name}})
			cond := waitCondition(t, restored, dbv1.ConditionRestored, metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded)
			restored = waitRunning(t, restored, 1, 5*time.Minute)
			t.Logf("%s restored from %s to T and running %s after its creation: %s", name, b, time.Since(start).Round(time.Second), cond.Message)
			if !strings.Contains(cond.Message, "replayed") || !strings.Contains(cond.Message, "of the binary log") {
				t.Errorf("Restored does not say what was replayed: %s", cond.Message)
			}
			c := mariaRWAs(t, restored)
			ids := mariaEventIDs(t, c)
			lost, _ := pitrcheck.Judge(writes, ids, target)
			_, leaked := pitrcheck.Judge(writes, ids, stop)
			if lost > 0 || leaked > 0 {
				t.Errorf("restored to T: %d writes acknowledged before T missing, %d sent after T's second present (of %d rows)", lost, leaked, len(ids))
			}
			var n int
			if err := c.QueryRow("SELECT count(*) FROM shop.doomed").Scan(&n); err != nil || n != 1 {
				t.Errorf("the table dropped after T: %d rows (%v), want it back", n, err)
			}
			before, _ := pitrcheck.Sides(writes, target)
			t.Logf("restored to T: %d rows, all %d acknowledged before T among them", len(ids), before)
		})
	}
}

// mariaPITRSource is a MariaDB Database that archives its binary log to
// the default volume (archive timeout 10 s), with a table of rows and one
// to drop.
type mariaPITRSource struct {
	t  testing.TB
	db *dbv1.Database
	c  *sql.DB
}

func newMariaPITRSource(t testing.TB, name string) *mariaPITRSource {
	db := createDatabase(t, name, dbv1.EngineMariaDB, "10.11", 1, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true, TimeoutSeconds: ptr.To[int32](10)}}
	})
	p := &mariaPITRSource{t: t, db: waitRunning(t, db, 1, 5*time.Minute)}
	p.c = mariaRWAs(t, p.db)
	p.exec("CREATE DATABASE shop",
		"CREATE TABLE shop.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		"CREATE TABLE shop.doomed (id INT)", "INSERT INTO shop.doomed VALUES (1)")
	waitCondition(t, p.db, dbv1.ConditionContinuousArchiving, metav1.ConditionTrue, dbv1.ReasonBinlogArchived)
	return p
}

func (p *mariaPITRSource) exec(stmts ...string) {
	p.t.Helper()
	for _, s := range stmts {
		if _, err := p.c.Exec(s); err != nil {
			p.t.Fatalf("%s: %v", s, err)
		}
	}
}

// backup takes a Backup (physical, the default with an archive, unless
// method says otherwise) and checks it records the archive.
func (p *mariaPITRSource) backup(name string, method ...dbv1.BackupMethod) {
	t := p.t
	t.Helper()
	want := dbv1.BackupPhysical
	newBackup(t, p.db.Namespace, name, p.db.Name, func(b *dbv1.Backup) {
		if len(method) > 0 {
			b.Spec.Method, want = method[0], method[0]
		}
	})
	b := waitBackup(t, p.db.Namespace, name)
	if b.Status.Phase != dbv1.BackupCompleted || b.Status.Method != want || b.Status.ArchivePath != binlog.Prefix(p.db.Namespace, p.db.Name, string(p.db.UID)) {
		t.Fatalf("Backup %s: phase %s (%s), method %q, archive %q: want a completed %s backup that records the binary log archive",
			name, b.Status.Phase, b.Status.Message, b.Status.Method, b.Status.ArchivePath, want)
	}
}

// startWriter inserts rows on one session of its own until stopped (or
// until its first error).
func (p *mariaPITRSource) startWriter() *pitrcheck.Writer {
	conn, err := p.c.Conn(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	w := pitrcheck.StartFunc(context.Background(), func(ctx context.Context) (int64, error) {
		res, err := conn.ExecContext(ctx, "INSERT INTO shop.events () VALUES ()")
		if err != nil {
			_ = conn.Close()
			return 0, err
		}
		return res.LastInsertId()
	}, func(string, ...any) {})
	return w
}

// recoveryPoint loses the primary's machine under writes (the server
// killed mid-write, nothing more archived), deletes the Database with its
// volumes, and restores the latest moment the archive holds from Backup
// backup into a new Database: the acknowledged writes lost, the recovery
// point, and the Restored message (the replay's figures).
func (p *mariaPITRSource) recoveryPoint(backup, name string, writeFor time.Duration) (int, time.Duration, string) {
	t := p.t
	t.Helper()
	writes := loseUnderWrites(t, p.db, p.startWriter(), writeFor)
	start := time.Now()
	restored := newDatabase(t, p.db.Namespace, name, dbv1.EngineMariaDB, "10.11", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: backup}}
	})
	cond := waitCondition(t, restored, dbv1.ConditionRestored, metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded)
	restored = waitRunning(t, restored, 1, 5*time.Minute)
	t.Logf("%s restored to the end of the archive and running %s after its creation: %s", name, time.Since(start).Round(time.Second), cond.Message)
	ids := mariaEventIDs(t, mariaRWAs(t, restored))
	lost, holes, point := pitrcheck.Loss(writes, ids)
	if holes > 0 {
		t.Errorf("the restore holds %d rows but misses %d writes acknowledged before the last of them", len(ids), holes)
	}
	return lost, point, cond.Message
}

// mariaRWAs opens db's -rw Service as its superuser.
func mariaRWAs(t testing.TB, db *dbv1.Database) *sql.DB {
	user, password := credentials(t, db)
	cfg := mariaDBConfig(resolveOne(t, db.Name+"-rw", db.Namespace), user, password)
	cfg.Timeout = 5 * time.Second
	return openMariaDB(t, cfg)
}

// mariaEventIDs reads shop.events' ids (tried for a minute: the Service's
// address may be new).
func mariaEventIDs(t testing.TB, c *sql.DB) []int64 {
	t.Helper()
	var ids []int64
	eventually(t, time.Minute, "the restored rows", func() string {
		ids = nil
		rows, err := c.Query("SELECT id FROM shop.events")
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err.Error()
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return err.Error()
		}
		return ""
	})
	return ids
}
