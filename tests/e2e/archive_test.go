package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/tests/utils/testservers"
)

// TestContinuousArchiving: a PostgreSQL Database with spec.backup.archive
// archives its WAL through its primary's own server (archive_command, the
// agent's binary) to an S3 server outside the cluster (versitygw on the
// node's bridge, TLS with a private CA): each segment lands there with its
// entry, and ContinuousArchiving is True. The target goes down for a
// while: the condition turns False with a Warning Event and the metric
// 0, and nothing is lost: once it is back the pending segment is
// archived, the condition is True again (a Normal Event) and the archive
// has every segment, none skipped.
func TestContinuousArchiving(t *testing.T) {
	t.Parallel() // its own Database and S3 server: see parallel in main_test.go
	ctx := context.Background()
	s3 := testservers.StartS3(t, testservers.S3TLS(), testservers.S3Listen(net.IP(node.IP().AsSlice())))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueNamespace(t)}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s3-keys"}, StringData: map[string]string{"accessKeyId": s3.AccessKey, "secretAccessKey": s3.SecretKey}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s3-ca"}, StringData: map[string]string{"ca.crt": string(s3.CA)}},
	} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	db := newDatabase(t, ns.Name, "arch", dbv1.EnginePostgreSQL, "15", func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{
			Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: "cluster-a", ForcePathStyle: true,
				CredentialsSecret: dbv1.S3Credentials{Name: "s3-keys"}, CASecret: &dbv1.SecretKeyRef{Name: "s3-ca"}}},
			Archive: &dbv1.ArchivePolicy{Enabled: true},
		}
	})
	db = waitRunning(t, db, 1, 5*time.Minute)
	dir := filepath.Join(s3.DataDir, s3.Bucket, "cluster-a", wal.Prefix(ns.Name, db.Name, string(db.UID)))
	user, password := credentials(t, db)
	c := pgRW(t, db, user, password)
	switchWAL := func() string {
		t.Helper()
		if _, err := c.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, note text); INSERT INTO orders (note) VALUES ('archived')"); err != nil {
			t.Fatal(err)
		}
		var seg string
		if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
			t.Fatal(err)
		}
		return seg
	}
	archived := func(seg string) func() string {
		return func() string {
			for _, f := range []string{seg, seg + ".json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					return err.Error()
				}
			}
			return ""
		}
	}

	first := switchWAL()
	eventually(t, 2*time.Minute, first+" in the S3 archive", archived(first))
	c1 := waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionTrue, dbv1.ReasonWALArchived)
	if v := metricValue(t, "database_operator_wal_archiving_healthy", ns.Name, db.Name); v != 1 {
		t.Errorf("database_operator_wal_archiving_healthy %v while archiving (%s)", v, c1.Message)
	}

	// The target goes down: the failure is said, never silent.
	s3.Stop()
	down := time.Now()
	pending := switchWAL()
	c2 := waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionFalse, dbv1.ReasonArchivingFailing)
	t.Logf("ContinuousArchiving False %s after the target went down: %s", time.Since(down).Round(time.Second), c2.Message)
	if !strings.Contains(c2.Message, pending) {
		t.Errorf("the condition does not name the segment that waits (%s): %s", pending, c2.Message)
	}
	waitEvent(t, ns.Name, db.Name, "Warning ArchivingFailed")
	if v := metricValue(t, "database_operator_wal_archiving_healthy", ns.Name, db.Name); v != 0 {
		t.Errorf("database_operator_wal_archiving_healthy %v while archiving fails", v)
	}

	// Back: nothing lost.
	s3.Restart(t)
	back := time.Now()
	eventually(t, 3*time.Minute, pending+" archived once the target is back", archived(pending))
	waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionTrue, dbv1.ReasonWALArchived)
	t.Logf("ContinuousArchiving True %s after the target came back", time.Since(back).Round(time.Second))
	waitEventWithin(t, ns.Name, db.Name, "Normal ArchivingResumed", time.Minute)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segments []string
	for _, e := range entries {
		if len(e.Name()) == 24 && wal.ValidName(e.Name()) {
			segments = append(segments, e.Name())
		}
	}
	sort.Strings(segments)
	for i := 1; i < len(segments); i++ {
		prev, _ := strconv.ParseUint(segments[i-1][8:], 16, 64)
		if want := fmt.Sprintf("%s%016X", segments[i-1][:8], prev+1); segments[i] != want {
			t.Errorf("the archive skips from %s to %s: %v", segments[i-1], segments[i], segments)
		}
	}
	if len(segments) == 0 || segments[len(segments)-1] < pending {
		t.Errorf("archived segments %v do not reach %s", segments, pending)
	}
}

// TestPointInTimeRecovery: a PostgreSQL Database archives its WAL to the
// default volume target (its claim made before the pods, which mount it;
// ContinuousArchiving names the segment just closed) and takes a Backup,
// physical by default when archiving. Writers insert rows on a session of
// their own; the test notes a moment T on the server's clock, the writers
// go on, a table is dropped. A new Database bootstrapped from the Backup
// with recoveryTarget T is recovered by a Job before its pods exist, then
// runs with two instances (the replica clones the recovered primary with
// the new Database's replication password): every row acknowledged before
// T is there, none sent after, and the dropped table is back.
func TestPointInTimeRecovery(t *testing.T) {
	t.Parallel() // its own Databases: see parallel in main_test.go
	ctx := context.Background()
	db := createDatabase(t, "pitr", dbv1.EnginePostgreSQL, "15", 1, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	ns := db.Namespace
	db = waitRunning(t, db, 1, 5*time.Minute)
	user, password := credentials(t, db)
	c := pgRW(t, db, user, password)
	if _, err := c.Exec(ctx, `CREATE TABLE events (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TABLE doomed (id int); INSERT INTO doomed VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	switchArchived := func() string {
		t.Helper()
		var seg string
		if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, seg+" archived to the volume", func() string {
			for _, cond := range k8sDatabase(t, db).Status.Conditions {
				if cond.Type == dbv1.ConditionContinuousArchiving {
					// "<primary> archived <segment> at ...": this one or a later one.
					if _, rest, ok := strings.Cut(cond.Message, " archived "); cond.Status == metav1.ConditionTrue && ok && len(rest) >= len(seg) && rest[:len(seg)] >= seg {
						return ""
					}
					return fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
				}
			}
			return "no ContinuousArchiving condition"
		})
		return seg
	}
	first := switchArchived()
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: db.Name + "-backups"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("the default backup claim: %v", err)
	}

	newBackup(t, ns, "base", db.Name)
	b := waitBackup(t, ns, "base")
	if b.Status.Phase != dbv1.BackupCompleted || b.Status.Method != dbv1.BackupPhysical || b.Status.ArchivePath != wal.Prefix(ns, db.Name, string(db.UID)) {
		t.Fatalf("Backup base: phase %s (%s), method %q, archive %q: want a completed physical backup that records the archive",
			b.Status.Phase, b.Status.Message, b.Status.Method, b.Status.ArchivePath)
	}

	type write struct {
		id          int64
		sent, acked time.Time
	}
	var writes []write
	stop, done := make(chan struct{}), make(chan struct{})
	wc := pgRW(t, db, user, password)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			w := write{sent: time.Now()}
			if err := wc.QueryRow(ctx, "INSERT INTO events DEFAULT VALUES RETURNING id").Scan(&w.id); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			w.acked = time.Now()
			writes = append(writes, w)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	var target time.Time
	if err := c.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&target); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := c.Exec(ctx, "DROP TABLE doomed"); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	last := switchArchived()
	var before, after int
	for _, w := range writes {
		switch {
		case w.acked.Before(target):
			before++
		case w.sent.After(target):
			after++
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d writes acknowledged before T, %d sent after: the writer did not straddle T", before, after)
	}
	t.Logf("archived %s to %s; %d writes acknowledged before T, %d sent after", first, last, before, after)

	// The source reports the window T lies in.
	eventually(t, time.Minute, "the recoverability window in the status", func() string {
		st := k8sDatabase(t, db).Status
		if st.FirstRecoverabilityPoint == nil || st.LastRecoverableTime == nil {
			return fmt.Sprintf("first %v, last %v", st.FirstRecoverabilityPoint, st.LastRecoverableTime)
		}
		if !st.FirstRecoverabilityPoint.Equal(b.Status.CompletedAt) || st.LastRecoverableTime.Time.Before(target.Truncate(time.Second)) {
			return fmt.Sprintf("window %s to %s, want from %s to past %s", st.FirstRecoverabilityPoint, st.LastRecoverableTime, b.Status.CompletedAt, target)
		}
		return ""
	})

	at := target.UTC().Format(time.RFC3339Nano)
	restored := newDatabase(t, ns, "pitr-at-t", dbv1.EnginePostgreSQL, "15", func(d *dbv1.Database) {
		d.Spec.Replicas = 2
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "base"}, RecoveryTarget: &dbv1.RecoveryTarget{Time: at}}
	})
	start := time.Now()
	restored = waitRunning(t, restored, 2, 6*time.Minute)
	cond := waitCondition(t, restored, dbv1.ConditionRestored, metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded)
	t.Logf("recovered and running with 2 instances %s after its creation: %s", time.Since(start).Round(time.Second), cond.Message)
	waitEvent(t, ns, restored.Name, "Normal RestoreSucceeded")
	ruser, rpassword := credentials(t, restored)
	rc := pgRW(t, restored, ruser, rpassword)
	rows, err := rc.Query(ctx, "SELECT id FROM events")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	present := map[int64]bool{}
	for _, id := range ids {
		present[id] = true
	}
	var lost, leaked int
	for _, w := range writes {
		switch {
		case w.acked.Before(target) && !present[w.id]:
			lost++
		case w.sent.After(target) && present[w.id]:
			leaked++
		}
	}
	if lost > 0 || leaked > 0 {
		t.Errorf("recovered to T: %d writes acknowledged before T missing, %d sent after T present (of %d rows)", lost, leaked, len(ids))
	}
	var doomed int
	if err := rc.QueryRow(ctx, "SELECT count(*) FROM doomed").Scan(&doomed); err != nil || doomed != 1 {
		t.Errorf("the table dropped after T: %d rows (%v), want it back", doomed, err)
	}
	t.Logf("recovered to T: %d rows, all %d acknowledged before T among them, none of the %d sent after", len(ids), before, after)
}
