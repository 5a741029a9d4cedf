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

// TestContinuousArchivingToAVolume: archiving to the default volume target
// creates its claim before the pods start (they mount it), and the
// primary's server archives there: ContinuousArchiving names the segment
// it just closed.
func TestContinuousArchivingToAVolume(t *testing.T) {
	t.Parallel() // its own Database: see parallel in main_test.go
	ctx := context.Background()
	db := createDatabase(t, "archvol", dbv1.EnginePostgreSQL, "15", 1, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	db = waitRunning(t, db, 1, 5*time.Minute)
	user, password := credentials(t, db)
	c := pgRW(t, db, user, password)
	var seg string
	if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, seg+" archived to the volume", func() string {
		for _, cond := range k8sDatabase(t, db).Status.Conditions {
			if cond.Type == dbv1.ConditionContinuousArchiving {
				if cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "archived "+seg) {
					return ""
				}
				return fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		return "no ContinuousArchiving condition"
	})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-backups"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("the default backup claim: %v", err)
	}
}
