package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresScheduledBackupRetentionRestore: a schedule whose run was
// missed (the operator was down) creates its Backup, whose Job has the
// expected spec and backs up a replica to the default volume; on-demand
// backups follow and retention (keepLast 2) deletes the oldest, data and
// object; a new Database bootstrapped from the last backup has no
// read-write endpoint until the backup is verified and loaded, then holds
// the same rows; a Database recreated over volumes that hold data keeps
// them; a corrupted backup is refused, nothing is loaded and the restore is
// reported failed. Every Job runs as a real pod on the process node.
func TestPostgresScheduledBackupRetentionRestore(t *testing.T) {
	ctx := context.Background()
	db := createDatabase(t, "bk", dbv1.EnginePostgreSQL, "15", 2)
	ns := db.Namespace
	waitRunning(t, db, 2, 5*time.Minute)
	user, password := credentials(t, db)
	primary := pgRW(t, db, user, password)
	for _, stmt := range []string{"CREATE TABLE orders (id serial PRIMARY KEY, note text)",
		"INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(0, 199) g"} {
		if _, err := primary.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	replica := db.Name + "-1"
	scheduled := &dbv1.Backup{}
	var (
		first *dbv1.Backup // the scheduled run's backup
		claim string       // the default claim's directory on the node
		want  int          // the rows the last backup holds
	)

	if !t.Run("the missed scheduled run is taken", func(t *testing.T) {
		// A daily run two minutes ago: the next one is a day away, so no
		// scheduled run comes (and is skipped, or counts for retention) while
		// the test runs, whenever it runs. The operator reads the schedule in
		// this machine's time zone, as this does.
		run := time.Now().Add(-2 * time.Minute)
		updateDatabase(t, db, func(db *dbv1.Database) {
			db.Spec.Backup = &dbv1.BackupPolicy{Schedule: fmt.Sprintf("%d %d * * *", run.Minute(), run.Hour()),
				Retention: dbv1.BackupRetention{KeepLast: ptr.To[int32](2)}}
		})
		// The schedule's last run was ten minutes ago: the run two minutes ago
		// was missed, and is taken now.
		eventually(t, 30*time.Second, "the missed scheduled run's Backup", func() string {
			list := &dbv1.BackupList{}
			if err := k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"database.example.com/scheduled": "true"}); err != nil {
				return err.Error()
			}
			if len(list.Items) == 1 {
				*scheduled = list.Items[0]
				return ""
			}
			cur := &dbv1.Database{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), cur); err != nil {
				return err.Error()
			}
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Status.LastScheduledBackup = &metav1.Time{Time: time.Now().Add(-10 * time.Minute)}
			if err := k8s.Status().Patch(ctx, cur, patch); err != nil {
				return err.Error()
			}
			return fmt.Sprintf("%d scheduled Backups", len(list.Items))
		})
		if !strings.HasPrefix(scheduled.Name, "bk-") || len(scheduled.Name) != len("bk-")+12 {
			t.Errorf("scheduled Backup name %q", scheduled.Name)
		}
	}) {
		return
	}

	// The Job: owned by the Backup, one attempt, a deadline, the instance's
	// image, a replica as the source, the default claim, secrets by reference.
	if !t.Run("the backup Job backs up a replica to the default claim", func(t *testing.T) {
		job := &batchv1.Job{}
		eventually(t, 30*time.Second, "the backup Job", func() string {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: scheduled.Name}, job); err != nil {
				return err.Error()
			}
			return ""
		})
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
			t.Fatal(err)
		}
		if db.Status.CurrentPrimary != db.Name+"-0" {
			t.Fatalf("primary %q, want %s-0", db.Status.CurrentPrimary, db.Name)
		}
		instance, err := cs.CoreV1().Pods(ns).Get(ctx, db.Name+"-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctr := job.Spec.Template.Spec.Containers[0]
		args := strings.Join(ctr.Args, " ")
		switch {
		case !metav1.IsControlledBy(job, scheduled):
			t.Errorf("Job owners %v", job.OwnerReferences)
		case ptr.Deref(job.Spec.BackoffLimit, -1) != 0 || ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) != 3600:
			t.Errorf("backoffLimit %v deadline %v", job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds)
		case ctr.Image != instance.Spec.Containers[0].Image:
			t.Errorf("image %s, the instances run %s", ctr.Image, instance.Spec.Containers[0].Image)
		case !strings.HasPrefix(args, "backup --engine=postgresql --host="+replica+".bk-headless."+ns+".svc "):
			t.Errorf("not backing up the replica %s: %s", replica, args)
		case !strings.Contains(args, "--dir=/backups") || !strings.Contains(args, "--keep-last=2"):
			t.Errorf("args %s", args)
		case job.Spec.Template.Spec.Volumes[2].PersistentVolumeClaim == nil || job.Spec.Template.Spec.Volumes[2].PersistentVolumeClaim.ClaimName != "bk-backups":
			t.Errorf("volumes %+v", job.Spec.Template.Spec.Volumes)
		case ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.SecretKeyRef.Name != "bk-credentials" || ctr.Env[0].Value != "":
			t.Errorf("password env %+v", ctr.Env[0])
		case job.Spec.Template.Spec.InitContainers[0].Image != operatorImage:
			t.Errorf("init container %+v", job.Spec.Template.Spec.InitContainers[0])
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bk-backups"}, &corev1.PersistentVolumeClaim{}); err != nil {
			t.Errorf("default backup claim: %v", err)
		}
	}) {
		return
	}

	if !t.Run("the scheduled backup completes onto the claim", func(t *testing.T) {
		first = waitBackup(t, ns, scheduled.Name)
		if first.Status.Phase != dbv1.BackupCompleted || first.Status.Size <= 0 || !strings.HasPrefix(first.Status.Checksum, "sha256:") ||
			!strings.Contains(first.Status.Position, "/") || first.Status.Location != "file:///backups/"+ns+"/bk/"+first.Name ||
			first.Status.Instance != replica {
			t.Fatalf("scheduled backup status %+v", first.Status)
		}
		if tg := first.Status.Target; tg == nil || tg.Volume == nil || tg.Volume.ClaimName != "bk-backups" {
			t.Errorf("recorded target %+v", tg)
		}
		c := waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionTrue, "Completed")
		if !strings.Contains(c.Message, first.Name) {
			t.Errorf("condition %+v", c)
		}
		if v := metricValue(t, "database_operator_backup_last_succeeded", ns, "bk"); v != 1 {
			t.Errorf("last_succeeded metric %v", v)
		}
		waitEvent(t, ns, "bk", "Normal BackupCompleted")
		// The Job's pod wrote onto the claim: the backup is in the claim's
		// directory on the node, under the path the Backup records.
		claim = claimDir(t, ns, "bk-backups")
		if _, err := os.Stat(filepath.Join(claim, ns, "bk", first.Name, "manifest.json")); err != nil {
			t.Errorf("the backup is not on the claim: %v", err)
		}
	}) {
		return
	}

	// Two on-demand backups; after the second, keepLast 2 prunes the first.
	if !t.Run("retention keeps the last 2", func(t *testing.T) {
		newBackup(t, ns, "manual-1", "bk")
		if b := waitBackup(t, ns, "manual-1"); b.Status.Phase != dbv1.BackupCompleted {
			t.Fatalf("manual-1: %+v", b.Status)
		}
		if _, err := primary.Exec(ctx, "INSERT INTO orders (note) VALUES ('last one')"); err != nil {
			t.Fatal(err)
		}
		want = pgRows(t, primary)
		newBackup(t, ns, "manual-2", "bk")
		if b := waitBackup(t, ns, "manual-2"); b.Status.Phase != dbv1.BackupCompleted {
			t.Fatalf("manual-2: %+v", b.Status)
		}
		eventually(t, 30*time.Second, "retention deleting "+first.Name, func() string {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Name}, &dbv1.Backup{})
			if !apierrors.IsNotFound(err) {
				return fmt.Sprintf("Backup %s still there: %v", first.Name, err)
			}
			return ""
		})
		entries, _ := os.ReadDir(filepath.Join(claim, ns, "bk"))
		var left []string
		for _, e := range entries {
			left = append(left, e.Name())
		}
		if !slices.Equal(left, []string{"manual-1", "manual-2"}) {
			t.Errorf("backups left on the volume: %v, want manual-1 and manual-2", left)
		}
	}) {
		return
	}

	if !t.Run("restore", func(t *testing.T) { restoreHeld(t, ns, "manual-2", want) }) {
		return
	}
	if !t.Run("recreated over retained volumes", func(t *testing.T) { restoreOverKeptData(t, ns, "manual-2") }) {
		return
	}

	// A corrupted backup: the restore is refused, nothing is loaded, the
	// backup left as it is.
	t.Run("a corrupted backup is refused", func(t *testing.T) {
		dump := filepath.Join(claim, ns, "bk", "manual-1", "db-0001.dump")
		b, err := os.ReadFile(dump)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(dump, b, 0o644); err != nil {
			t.Fatal(err)
		}
		badDB := newDatabase(t, ns, "bk-bad", dbv1.EnginePostgreSQL, "15", func(d *dbv1.Database) {
			d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "manual-1"}}
		})
		c := waitCondition(t, badDB, dbv1.ConditionRestored, metav1.ConditionFalse, "RestoreFailed")
		if !strings.Contains(c.Message, "BackupCorrupt") || !strings.Contains(c.Message, "nothing was restored") {
			t.Errorf("Restored: %+v", c)
		}
		eventually(t, 30*time.Second, "bk-bad Failed", func() string {
			got := &dbv1.Database{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(badDB), got); err != nil {
				return err.Error()
			}
			if role := podRole(ns, "bk-bad-0"); got.Status.Phase != dbv1.PhaseFailed || role == "primary" {
				return fmt.Sprintf("phase %s, role %q", got.Status.Phase, role)
			}
			return ""
		})
		waitEvent(t, ns, "bk-bad", "Warning RestoreFailed")
		if after, _ := os.ReadFile(dump); string(after) != string(b) {
			t.Error("the failed restore changed the backup")
		}
		// Nothing was loaded: the server (reached at its pod address, as no
		// Service routes to it) has no table of the backup.
		buser, bpassword := credentials(t, badDB)
		bad := pgOpen(t, podIP(t, ns, "bk-bad-0"), buser, bpassword)
		var table *string
		if err := bad.QueryRow(ctx, "SELECT to_regclass('public.orders')::text").Scan(&table); err != nil || table != nil {
			t.Errorf("the refused backup was loaded in part: orders is %v (%v)", ptr.Deref(table, "<none>"), err)
		}
	})
}

// restoreHeld restores a backup into a new Database, bk-copy, whose
// restore Job's pod is held unscheduled (the node cordoned) once the
// primary's pod is bound: meanwhile the primary runs without a read-write
// role (no -rw endpoint), the Database is not Ready, and a backup asked for
// waits. A watcher checks, until the Job has succeeded, that no endpoint
// ever appeared. Then the Database serves the backup's rows.
func restoreHeld(t testing.TB, ns, backupName string, want int) {
	ctx := context.Background()
	copyDB := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bk-copy"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgreSQL, Version: "15", Replicas: 1,
			Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")}, DeletionPolicy: dbv1.DeletionPolicyDelete,
			Bootstrap: &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: backupName}}}}
	watch := watchNoEndpointBeforeRestore(t, copyDB)
	if err := k8s.Create(ctx, copyDB); err != nil {
		t.Fatal(err)
	}
	// The restore Job starts once the primary is ready, seconds after its
	// pod is bound (initdb): cordoned at binding, the node takes no Job pod.
	eventually(t, time.Minute, "bk-copy-0 bound to the node", func() string {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "bk-copy-0", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Spec.NodeName == "" {
			return "not bound"
		}
		return ""
	})
	release := cordon(t)
	defer release()
	waitCondition(t, copyDB, dbv1.ConditionRestored, metav1.ConditionFalse, "Restoring")
	eventually(t, 2*time.Minute, "the restore Job's pod created and held", func() string {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=bk-copy-restore"})
		if err != nil {
			return err.Error()
		}
		if len(pods.Items) != 1 {
			return fmt.Sprintf("%d pods", len(pods.Items))
		}
		if p := pods.Items[0]; p.Spec.NodeName != "" {
			t.Fatalf("the restore pod was bound before the node was cordoned: the hold did not hold (%s)", p.Status.Phase)
		}
		return ""
	})
	eventually(t, 30*time.Second, "Restored saying the restore Job runs", func() string {
		got := &dbv1.Database{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(copyDB), got); err != nil {
			return err.Error()
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored); c == nil || c.Reason != "Restoring" || !strings.Contains(c.Message, "bk-copy-restore") {
			return fmt.Sprintf("%+v", c)
		}
		return ""
	})
	if ready := waitCondition(t, copyDB, dbv1.ConditionReady, metav1.ConditionFalse, "Restoring"); ready == nil {
		t.Error("not Ready=False Restoring")
	}
	if p, err := cs.CoreV1().Pods(ns).Get(ctx, "bk-copy-0", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("the primary is not running while the restore waits (%v)", err)
	}
	if role := podRole(ns, "bk-copy-0"); role != "" {
		t.Errorf("the primary got the role %q before the restore", role)
	}
	if eps := endpointPods(t, ns, "bk-copy-rw"); len(eps) != 0 {
		t.Errorf("bk-copy-rw has endpoints %v before the restore", eps)
	}
	// A backup of the Database being restored waits for the restore.
	newBackup(t, ns, "copy-early", "bk-copy")
	eventually(t, 30*time.Second, "copy-early pending", func() string {
		got := &dbv1.Backup{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-early"}, got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != dbv1.BackupPending || got.Status.Reason != "DatabaseRestoring" {
			return fmt.Sprintf("%s %s", got.Status.Phase, got.Status.Reason)
		}
		return ""
	})
	release()
	c := waitCondition(t, copyDB, dbv1.ConditionRestored, metav1.ConditionTrue, "RestoreSucceeded")
	if !strings.Contains(c.Message, "checksums verified") {
		t.Errorf("Restored: %+v", c)
	}
	if v := watch(); v != "" {
		t.Error(v)
	}
	waitRunning(t, copyDB, 1, 3*time.Minute)
	cuser, cpassword := credentials(t, copyDB)
	if got := pgRows(t, pgRW(t, copyDB, cuser, cpassword)); got != want {
		t.Errorf("restored %d rows, backed up %d", got, want)
	}
	if b := waitBackup(t, ns, "copy-early"); b.Status.Phase != dbv1.BackupCompleted {
		t.Errorf("the backup asked for during the restore: %+v", b.Status)
	}
}

// restoreOverKeptData: a Database deleted with deletionPolicy Retain and
// created again with a bootstrap backup keeps the data its volume holds,
// and serves it: the backup is not loaded over it.
func restoreOverKeptData(t testing.TB, ns, backupName string) {
	ctx := context.Background()
	kept := newDatabase(t, ns, "bk-kept", dbv1.EnginePostgreSQL, "15", func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyRetain })
	waitRunning(t, kept, 1, 5*time.Minute)
	user, password := credentials(t, kept)
	c := pgRW(t, kept, user, password)
	for _, stmt := range []string{"CREATE TABLE orders (id serial PRIMARY KEY, note text)", "INSERT INTO orders (note) VALUES ('newer than any backup')"} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// Disconnected first: the node stops PostgreSQL with SIGTERM (a smart
	// shutdown, which waits for every client), not the image's STOPSIGNAL
	// SIGINT, so a session left open holds the pod for its 60 s grace.
	_ = c.Close(ctx)
	if err := k8s.Delete(ctx, kept); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	eventually(t, 2*time.Minute, "bk-kept and its pod gone", func() string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kept), &dbv1.Database{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("Database: %v", err)
		}
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, "bk-kept-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("pod: %v", err)
		}
		return ""
	})
	t.Logf("bk-kept and its pod gone %s after the delete", time.Since(deleted).Round(time.Second))
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-bk-kept-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("the retained claim: %v", err)
	}
	again := newDatabase(t, ns, "bk-kept", dbv1.EnginePostgreSQL, "15", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: backupName}}
	})
	cond := waitCondition(t, again, dbv1.ConditionRestored, metav1.ConditionFalse, "ExistingDataKept")
	if !strings.Contains(cond.Message, "already holds data") {
		t.Errorf("Restored: %+v", cond)
	}
	waitRunning(t, again, 1, 3*time.Minute)
	if got := pgRows(t, pgRW(t, again, user, password)); got != 1 {
		t.Errorf("the kept server has %d rows, want its own 1", got)
	}
}

// TestMariaDBBackupToS3AndFailures backs MariaDB up to a real S3 server
// (versitygw on the node's bridge, TLS with a private CA, reached by the
// Job's pod as a server outside the cluster would be) and restores it into
// a new Database from the backup's location; and each way a backup fails
// ends in a Failed Backup with its reason, LastBackupSucceeded=False, a
// Warning Event and the metrics: a missing credentials Secret, wrong
// credentials, a deadline (a dump blocked by a table lock), a scheduled run
// while another backup runs (skipped).
func TestMariaDBBackupToS3AndFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// On the node's bridge address: where a backup Job's pod reaches it, as
	// it would reach an object store outside the cluster.
	s3 := testservers.StartS3(t, testservers.S3TLS(), testservers.S3Listen(net.IP(node.IP().AsSlice())))
	db := createDatabase(t, "mb", dbv1.EngineMariaDB, "10.11", 1)
	ns := db.Namespace
	waitRunning(t, db, 1, 5*time.Minute)
	user, password := credentials(t, db)
	src := openMariaDB(t, mariaDBConfig(resolveOne(t, "mb-rw", ns), user, password))
	for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)",
		"INSERT INTO shop.orders (note) VALUES " + strings.TrimSuffix(strings.Repeat("('to s3'),", 30), ",")} {
		if _, err := src.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	for name, secret := range map[string]string{"s3-good": s3.SecretKey, "s3-wrong": "not-the-secret"} {
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			StringData: map[string]string{"accessKeyId": s3.AccessKey, "secretAccessKey": secret}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-ca"},
		StringData: map[string]string{"ca.crt": string(s3.CA)}}); err != nil {
		t.Fatal(err)
	}
	target := func(secret string) *dbv1.BackupTarget {
		return &dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: "cluster-a", ForcePathStyle: true,
			CredentialsSecret: dbv1.S3Credentials{Name: secret}, CASecret: &dbv1.SecretKeyRef{Name: "s3-ca"}}}
	}
	objects := filepath.Join(s3.DataDir, s3.Bucket, "cluster-a", ns, "mb")
	failed0 := max(metricValue(t, "database_operator_backups_total", ns, "mb", "phase", "Failed", "reason", "TargetInvalid"), 0)
	var good *dbv1.Backup // the backup on S3

	// No such Secret: refused before any Job, with what to create.
	if !t.Run("no credentials Secret", func(t *testing.T) {
		newBackup(t, ns, "no-secret", "mb", func(b *dbv1.Backup) { b.Spec.Target = target("missing") })
		b := waitBackup(t, ns, "no-secret")
		if b.Status.Phase != dbv1.BackupFailed || b.Status.Reason != "TargetInvalid" || !strings.Contains(b.Status.Message, "Secret "+ns+"/missing does not exist") {
			t.Errorf("missing Secret: %+v", b.Status)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "no-secret"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Job for the backup without a Secret: %v", err)
		}
		c := waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "TargetInvalid")
		if !strings.Contains(c.Message, "no-secret") {
			t.Errorf("condition %+v", c)
		}
		waitEvent(t, ns, "mb", "Warning BackupFailed")
		if v := metricValue(t, "database_operator_backups_total", ns, "mb", "phase", "Failed", "reason", "TargetInvalid"); v != failed0+1 {
			t.Errorf("backups_total{Failed,TargetInvalid} %v, want %v", v, failed0+1)
		}
		if v := metricValue(t, "database_operator_backup_last_succeeded", ns, "mb"); v != 0 {
			t.Errorf("last_succeeded %v", v)
		}
	}) {
		return
	}

	// Wrong secret key: the Job runs, the object store refuses it.
	if !t.Run("wrong credentials", func(t *testing.T) {
		newBackup(t, ns, "wrong-key", "mb", func(b *dbv1.Backup) { b.Spec.Target = target("s3-wrong") })
		b := waitBackup(t, ns, "wrong-key")
		if b.Status.Phase != dbv1.BackupFailed || b.Status.Reason != "TargetFailed" || !strings.Contains(b.Status.Message, "access denied") {
			t.Errorf("wrong credentials: %+v", b.Status)
		}
		waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "TargetFailed")
		if _, err := os.Stat(filepath.Join(objects, "wrong-key")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused backup wrote to the bucket: %v", err)
		}
	}) {
		return
	}

	// The right key: a backup at s3://, and a new Database restored from its location.
	if !t.Run("a backup to S3", func(t *testing.T) {
		newBackup(t, ns, "good", "mb", func(b *dbv1.Backup) { b.Spec.Target = target("s3-good") })
		good = waitBackup(t, ns, "good")
		if good.Status.Phase != dbv1.BackupCompleted || good.Status.Location != "s3://"+s3.Bucket+"/cluster-a/"+ns+"/mb/good" || len(strings.Split(good.Status.Position, "-")) != 3 {
			t.Fatalf("S3 backup: %+v", good.Status)
		}
		waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionTrue, "Completed")
		if _, err := os.Stat(filepath.Join(objects, "good", "manifest.json")); err != nil {
			t.Errorf("the backup's manifest is not on the S3 server: %v", err)
		}
	}) {
		return
	}
	if !t.Run("restored from the backup's location", func(t *testing.T) {
		copyDB := newDatabase(t, ns, "mb-copy", dbv1.EngineMariaDB, "10.11", func(d *dbv1.Database) {
			d.Spec.Bootstrap = &dbv1.BootstrapSpec{Source: &dbv1.BackupSource{Target: *target("s3-good"), Path: good.Status.Path}}
		})
		waitCondition(t, copyDB, dbv1.ConditionRestored, metav1.ConditionTrue, "RestoreSucceeded")
		waitRunning(t, copyDB, 1, 3*time.Minute)
		cuser, cpassword := credentials(t, copyDB)
		cfg := mariaDBConfig(resolveOne(t, "mb-copy-rw", ns), cuser, cpassword)
		cfg.Timeout = 5 * time.Second
		restored := openMariaDB(t, cfg)
		// Tried for a minute: see pgOpen (an address just reused).
		eventually(t, time.Minute, "30 rows in mb-copy", func() string {
			var n int
			if err := restored.QueryRow("SELECT count(*) FROM shop.orders").Scan(&n); err != nil || n != 30 {
				return fmt.Sprintf("%d rows (%v)", n, err)
			}
			return ""
		})
	}) {
		return
	}

	// A backup that runs long: a session holds a write lock on the table,
	// so the dump's FLUSH TABLES WITH READ LOCK waits behind it.
	lock, err := src.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES shop.orders WRITE"); err != nil {
		t.Fatal(err)
	}
	release := func() { _, _ = lock.ExecContext(ctx, "UNLOCK TABLES") }
	defer release()
	if !t.Run("a scheduled run while a backup runs is skipped", func(t *testing.T) {
		newBackup(t, ns, "slow", "mb", func(b *dbv1.Backup) { b.Spec.DeadlineSeconds = ptr.To[int64](30) })
		eventually(t, 30*time.Second, "slow running", func() string {
			got := &dbv1.Backup{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slow"}, got); err != nil {
				return err.Error()
			}
			if got.Status.Phase != dbv1.BackupRunning {
				return string(got.Status.Phase)
			}
			return ""
		})
		// A scheduled run while a backup is running is skipped, and says so.
		newBackup(t, ns, "mb-202612030300", "mb", func(b *dbv1.Backup) { b.Labels = map[string]string{"database.example.com/scheduled": "true"} })
		skipped := waitBackup(t, ns, "mb-202612030300")
		if skipped.Status.Phase != dbv1.BackupSkipped || !strings.Contains(skipped.Status.Message, "slow") {
			t.Errorf("scheduled run during a backup: %+v", skipped.Status)
		}
		waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "PreviousBackupRunning")
	}) {
		return
	}

	// The blocked backup passes its 30 s deadline: the Job controller stops it.
	t.Run("a backup past its deadline", func(t *testing.T) {
		slow := waitBackup(t, ns, "slow")
		release()
		if slow.Status.Phase != dbv1.BackupFailed || slow.Status.Reason != "DeadlineExceeded" {
			t.Errorf("backup past its deadline: %+v", slow.Status)
		}
		waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "DeadlineExceeded")
		waitEvent(t, ns, "slow", "Warning BackupFailed")
	})
}

// newDatabase creates a one-instance Database in an existing namespace
// (deletionPolicy Delete unless mutate says otherwise).
func newDatabase(t testing.TB, ns, name string, e dbv1.Engine, version string, mutate ...func(*dbv1.Database)) *dbv1.Database {
	t.Helper()
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dbv1.DatabaseSpec{Engine: e, Version: version, Replicas: 1,
			Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")}, DeletionPolicy: dbv1.DeletionPolicyDelete}}
	for _, m := range mutate {
		m(db)
	}
	if err := k8s.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// updateDatabase changes a Database's spec, retrying when the operator's
// own writes moved the resourceVersion in between.
func updateDatabase(t testing.TB, db *dbv1.Database, mutate func(*dbv1.Database)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		got := &dbv1.Database{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err
		}
		mutate(got)
		return k8s.Update(context.Background(), got)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", db.Name, err)
	}
}

// pgRW opens a session on a PostgreSQL Database's read-write endpoint,
// closed when the test ends.
func pgRW(t testing.TB, db *dbv1.Database, user, password string) *pgx.Conn {
	t.Helper()
	return pgOpen(t, resolveOne(t, db.Name+"-rw", db.Namespace), user, password)
}

// pgOpen opens a session on host, trying for a minute: a pod that took
// the address of a pod deleted moments before is unreachable from the host
// until the host's neighbour (ARP) entry for the address, which still
// names the old pod's interface, expires (the process node does not flush
// it), which takes up to about 45 s.
func pgOpen(t testing.TB, host, user, password string) *pgx.Conn {
	t.Helper()
	var c *pgx.Conn
	start, tries := time.Now(), 0
	eventually(t, time.Minute, "a session on "+host, func() string {
		var err error
		tries++
		if c, err = pgConnect(context.Background(), host, 5432, user, password, 5*time.Second); err != nil {
			return err.Error()
		}
		return ""
	})
	if tries > 1 {
		t.Logf("connected to %s after %d tries (%s)", host, tries, time.Since(start).Round(time.Second))
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// pgRows counts the orders.
func pgRows(t testing.TB, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchNoEndpointBeforeRestore watches a bootstrapped Database from before
// its creation until its restore Job has succeeded: its primary's pod must
// have no role label and its -rw Service no endpoint until then. The
// returned function stops the watch and says what it saw wrong, if anything.
func watchNoEndpointBeforeRestore(t testing.TB, db *dbv1.Database) func() string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		seen := false
		for ctx.Err() == nil {
			// The pod and the endpoints first, the Job after: a Job not
			// complete now was not complete when they were read.
			role := ""
			if p, err := cs.CoreV1().Pods(db.Namespace).Get(ctx, db.Name+"-0", metav1.GetOptions{}); err == nil {
				role = p.Labels["database.example.com/role"]
			}
			var eps []string
			if list, err := cs.DiscoveryV1().EndpointSlices(db.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + db.Name + "-rw"}); err == nil {
				for _, s := range list.Items {
					for _, e := range s.Endpoints {
						eps = append(eps, e.Addresses...)
					}
				}
			}
			job, err := cs.BatchV1().Jobs(db.Namespace).Get(ctx, db.Name+"-restore", metav1.GetOptions{})
			if err == nil {
				seen = true
				for _, c := range job.Status.Conditions {
					if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
						done <- ""
						return
					}
				}
			}
			if role != "" || len(eps) > 0 {
				done <- fmt.Sprintf("before the restore Job succeeded (Job seen: %t), %s-0 had the role %q and %s-rw the endpoints %v", seen, db.Name, role, db.Name, eps)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		done <- "the restore Job did not succeed while it was watched"
	}()
	t.Cleanup(cancel)
	return func() string {
		select {
		case v := <-done:
			cancel()
			return v
		case <-time.After(30 * time.Second):
			cancel()
			return <-done
		}
	}
}

// cordon marks the node unschedulable, as `kubectl cordon` does: pods
// created meanwhile stay Pending. The returned function (also run when
// the test ends) makes it schedulable again.
func cordon(t testing.TB) (uncordon func()) {
	t.Helper()
	set := func(v bool) error {
		_, err := cs.CoreV1().Nodes().Patch(context.Background(), nodeName, types.StrategicMergePatchType,
			fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, v), metav1.PatchOptions{})
		return err
	}
	if err := set(true); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	uncordon = func() {
		once.Do(func() {
			if err := set(false); err != nil {
				t.Errorf("uncordoning the node: %v", err)
			}
		})
	}
	t.Cleanup(uncordon)
	return uncordon
}

// waitBackup waits until a Backup has finished and returns it.
func waitBackup(t testing.TB, ns, name string) *dbv1.Backup {
	t.Helper()
	b := &dbv1.Backup{}
	eventually(t, 3*time.Minute, "backup "+name+" finished", func() string {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return err.Error()
		}
		if !b.Status.Phase.Finished() {
			return fmt.Sprintf("phase %q: %s", b.Status.Phase, b.Status.Message)
		}
		return ""
	})
	return b
}

func newBackup(t testing.TB, ns, name, database string, mutate ...func(*dbv1.Backup)) {
	t.Helper()
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: database}}}
	for _, m := range mutate {
		m(b)
	}
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// waitCondition waits for a Database condition with the given status and reason.
func waitCondition(t testing.TB, db *dbv1.Database, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, 3*time.Minute, fmt.Sprintf("%s %s=%s (%s)", db.Name, typ, status, reason), func() string {
		got := &dbv1.Database{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		c = meta.FindStatusCondition(got.Status.Conditions, typ)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Sprintf("%+v", c)
		}
		return ""
	})
	return c
}

// eventsAbout lists the types, reasons and notes of the Events about an object.
func eventsAbout(t testing.TB, ns, name string) []string {
	t.Helper()
	list, err := cs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Type+" "+e.Reason+": "+e.Note)
		}
	}
	return out
}

// waitEvent waits for an Event about the named object whose "type reason"
// starts with prefix.
func waitEvent(t testing.TB, ns, name, prefix string) {
	t.Helper()
	waitEventWithin(t, ns, name, prefix, 10*time.Second)
}

// waitEventWithin is waitEvent with a timeout.
func waitEventWithin(t testing.TB, ns, name, prefix string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, prefix+" Event about "+name, func() string {
		events := eventsAbout(t, ns, name)
		if slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) }) {
			return ""
		}
		return fmt.Sprintf("have %v", events)
	})
}

// metricValue reads one backup series for a Database from the registry of
// the operator, which runs in this process.
func metricValue(t testing.TB, name, ns, database string, extra ...string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] != ns || labels["database"] != database {
				continue
			}
			for i := 0; i+1 < len(extra); i += 2 {
				if labels[extra[i]] != extra[i+1] {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
