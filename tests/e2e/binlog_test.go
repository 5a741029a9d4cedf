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
// Backup records the archive and its GTID position. A writer inserts rows
// on a long-lived session, T is noted, a table is dropped by mistake. A new
// Database bootstrapped from the Backup with recoveryTarget.time T loads
// the dump and replays the archive to T: every row acknowledged before T
// is there, none sent after T's second (the binary log keeps whole
// seconds), and the dropped table is back.
func TestMariaDBPointInTimeRecovery(t *testing.T) {
	t.Parallel() // its own Databases: see parallel in main_test.go
	db := createDatabase(t, "mpitr", dbv1.EngineMariaDB, "10.11", 1, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true, TimeoutSeconds: ptr.To[int32](10)}}
	})
	ns := db.Namespace
	db = waitRunning(t, db, 1, 5*time.Minute)
	user, password := credentials(t, db)
	src := openMariaDB(t, mariaDBConfig(resolveOne(t, "mpitr-rw", ns), user, password))
	mariaExec(t, src, "CREATE DATABASE shop",
		"CREATE TABLE shop.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		"CREATE TABLE shop.doomed (id INT)", "INSERT INTO shop.doomed VALUES (1)")
	waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionTrue, dbv1.ReasonBinlogArchived)

	newBackup(t, ns, "base", db.Name)
	b := waitBackup(t, ns, "base")
	if b.Status.Phase != dbv1.BackupCompleted || b.Status.Method != dbv1.BackupLogical || b.Status.ArchivePath != binlog.Prefix(ns, db.Name, string(db.UID)) {
		t.Fatalf("Backup base: phase %s (%s), method %q, archive %q: want a completed dump that records the binary log archive",
			b.Status.Phase, b.Status.Message, b.Status.Method, b.Status.ArchivePath)
	}

	conn, err := src.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := pitrcheck.StartFunc(context.Background(), func(ctx context.Context) (int64, error) {
		res, err := conn.ExecContext(ctx, "INSERT INTO shop.events () VALUES ()")
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}, t.Errorf)
	time.Sleep(1500 * time.Millisecond)
	target := time.Now() // the node's clock is the servers'
	time.Sleep(1500 * time.Millisecond)
	mariaExec(t, src, "DROP TABLE shop.doomed")
	writes := w.Stop()
	straddles(t, writes, target)
	// The archive reaches past T's second once the file holding it was
	// closed (the archive timeout, 10 s) and archived.
	stop := target.Truncate(time.Second).Add(time.Second)
	eventually(t, 2*time.Minute, "the archive past T", func() string {
		st := k8sDatabase(t, db).Status
		if st.LastRecoverableTime == nil || st.LastRecoverableTime.Time.Before(stop) || st.FirstRecoverabilityPoint == nil {
			return fmt.Sprintf("recoverable from %v to %v", st.FirstRecoverabilityPoint, st.LastRecoverableTime)
		}
		return ""
	})

	start := time.Now()
	restored := newDatabase(t, ns, "mpitr-at-t", dbv1.EngineMariaDB, "10.11", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "base"},
			RecoveryTarget: &dbv1.RecoveryTarget{Time: target.UTC().Format(time.RFC3339Nano)}}
	})
	cond := waitCondition(t, restored, dbv1.ConditionRestored, metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded)
	restored = waitRunning(t, restored, 1, 5*time.Minute)
	t.Logf("restored to T and running %s after its creation: %s", time.Since(start).Round(time.Second), cond.Message)
	if !strings.Contains(cond.Message, "replayed") || !strings.Contains(cond.Message, "of the binary log") {
		t.Errorf("Restored does not say what was replayed: %s", cond.Message)
	}
	ruser, rpassword := credentials(t, restored)
	c := openMariaDB(t, mariaDBConfig(resolveOne(t, "mpitr-at-t-rw", ns), ruser, rpassword))
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
		return ""
	})
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
}

func mariaExec(t testing.TB, c *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := c.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
