package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
)

// waitBackup waits until a Backup has finished and returns it.
func waitBackup(t testing.TB, ns, name string) *dbv1.Backup {
	t.Helper()
	b := &dbv1.Backup{}
	eventually(t, 60*time.Second, "backup "+name+" finished", func() string {
		if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return err.Error()
		}
		if !b.Status.Phase.Finished() {
			return fmt.Sprintf("phase %q: %s", b.Status.Phase, b.Status.Message)
		}
		return ""
	})
	return b
}

func newBackup(t testing.TB, ns, name, database string, mutate ...func(*dbv1.Backup)) *dbv1.Backup {
	t.Helper()
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: database}}}
	for _, m := range mutate {
		m(b)
	}
	if err := testEnv.client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitCondition waits for a Database condition with the given status and reason.
func waitCondition(t testing.TB, db *dbv1.Database, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, 60*time.Second, fmt.Sprintf("%s %s=%s (%s)", db.Name, typ, status, reason), func() string {
		got := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name}}
		if err := get(t, got); err != nil {
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

// events lists the reasons and notes of the Events about an object.
func eventsAbout(t testing.TB, ns, name string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := testEnv.client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
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
	eventually(t, 10*time.Second, prefix+" Event about "+name, func() string {
		events := eventsAbout(t, ns, name)
		if slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) }) {
			return ""
		}
		return fmt.Sprintf("have %v", events)
	})
}

// metricValue reads one backup series for a Database from the operator's registry.
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

// TestPostgresScheduledBackupRetentionRestore: a schedule whose run was
// missed (the operator was down) creates its Backup, whose Job has the
// expected spec and backs up a replica to the default volume; on-demand
// backups follow and retention (keepLast 2) deletes the oldest, data and
// object; a new Database bootstrapped from the last backup has no
// read-write endpoint until the backup is verified and loaded, then holds
// the same rows; a corrupted backup is refused and the restore reported
// failed.
func TestPostgresScheduledBackupRetentionRestore(t *testing.T) {
	ctx := context.Background()
	ns, db, primary, _ := postgresDatabase(t, "bk")
	for i := range 200 {
		if err := pgExec(t, primary, fmt.Sprintf("INSERT INTO orders (note) VALUES ('order %d')", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A daily run two minutes ago: the next one is a day away, so no
	// scheduled run comes (and is skipped, or counts for retention) while
	// the test runs, whenever it runs. The operator reads the schedule in
	// this machine's time zone, as this does.
	run := time.Now().Add(-2 * time.Minute)
	updateSpec(t, db, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Schedule: fmt.Sprintf("%d %d * * *", run.Minute(), run.Hour()),
			Retention: dbv1.BackupRetention{KeepLast: ptr.To[int32](2)}}
	})
	// The schedule's last run was ten minutes ago: the run two minutes ago
	// was missed, and is taken now.
	scheduled := &dbv1.Backup{}
	eventually(t, 30*time.Second, "the missed scheduled run's Backup", func() string {
		list := &dbv1.BackupList{}
		if err := testEnv.client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"database.example.com/scheduled": "true"}); err != nil {
			return err.Error()
		}
		if len(list.Items) == 1 {
			*scheduled = list.Items[0]
			return ""
		}
		cur := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name}}
		if err := get(t, cur); err != nil {
			return err.Error()
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Status.LastScheduledBackup = &metav1.Time{Time: time.Now().Add(-10 * time.Minute)}
		if err := testEnv.client.Status().Patch(ctx, cur, patch); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d scheduled Backups", len(list.Items))
	})
	// (The location is file:///backups/... in a pod; here the test's kubelet
	// mounts the claim elsewhere.)
	if !strings.HasPrefix(scheduled.Name, "bk-") || len(scheduled.Name) != len("bk-")+12 {
		t.Errorf("scheduled Backup name %q", scheduled.Name)
	}

	// The Job: owned by the Backup, one attempt, a deadline, the instance's
	// image, a replica as the source, the default claim, secrets by reference.
	job := &batchv1.Job{}
	eventually(t, 30*time.Second, "the backup Job", func() string {
		if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: scheduled.Name}, job); err != nil {
			return err.Error()
		}
		return ""
	})
	pods := podsOf(t, db)
	ctr := job.Spec.Template.Spec.Containers[0]
	args := strings.Join(ctr.Args, " ")
	switch {
	case !metav1.IsControlledBy(job, scheduled):
		t.Errorf("Job owners %v", job.OwnerReferences)
	case ptr.Deref(job.Spec.BackoffLimit, -1) != 0 || ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) != 3600:
		t.Errorf("backoffLimit %v deadline %v", job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds)
	case ctr.Image != pods[0].Spec.Containers[0].Image:
		t.Errorf("image %s, the instances run %s", ctr.Image, pods[0].Spec.Containers[0].Image)
	case !strings.HasPrefix(args, "backup --engine=postgresql --host=bk-1.bk-headless."+ns+".svc") && !strings.HasPrefix(args, "backup --engine=postgresql --host=bk-2.bk-headless."+ns+".svc"):
		t.Errorf("not backing up a replica: %s", args)
	case !strings.Contains(args, "--dir=/backups") || !strings.Contains(args, "--keep-last=2"):
		t.Errorf("args %s", args)
	case job.Spec.Template.Spec.Volumes[2].PersistentVolumeClaim == nil || job.Spec.Template.Spec.Volumes[2].PersistentVolumeClaim.ClaimName != "bk-backups":
		t.Errorf("volumes %+v", job.Spec.Template.Spec.Volumes)
	case ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.SecretKeyRef.Name != "bk-credentials" || ctr.Env[0].Value != "":
		t.Errorf("password env %+v", ctr.Env[0])
	case job.Spec.Template.Spec.InitContainers[0].Image != "example.com/database-operator/manager:test":
		t.Errorf("init container %+v", job.Spec.Template.Spec.InitContainers[0])
	}
	if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bk-backups"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("default backup claim: %v", err)
	}

	first := waitBackup(t, ns, scheduled.Name)
	if first.Status.Phase != dbv1.BackupCompleted || first.Status.Size <= 0 || !strings.HasPrefix(first.Status.Checksum, "sha256:") ||
		!strings.Contains(first.Status.Position, "/") || !strings.HasPrefix(first.Status.Location, "file:///") || !strings.HasSuffix(first.Status.Location, "/"+ns+"/bk/"+first.Name) ||
		(first.Status.Instance != "bk-1" && first.Status.Instance != "bk-2") {
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

	// Two on-demand backups; after the second, keepLast 2 prunes the first.
	newBackup(t, ns, "manual-1", "bk")
	waitBackup(t, ns, "manual-1")
	if err := pgExec(t, primary, "INSERT INTO orders (note) VALUES ('last one')"); err != nil {
		t.Fatal(err)
	}
	want := pgCount(t, primary)
	newBackup(t, ns, "manual-2", "bk")
	if b := waitBackup(t, ns, "manual-2"); b.Status.Phase != dbv1.BackupCompleted {
		t.Fatalf("manual-2: %+v", b.Status)
	}
	eventually(t, 30*time.Second, "retention deleting "+first.Name, func() string {
		err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Name}, &dbv1.Backup{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("Backup %s still there: %v", first.Name, err)
		}
		return ""
	})
	claim := testEnv.jobs.claimDir(ns, "bk-backups")
	if entries, _ := os.ReadDir(filepath.Join(claim, ns, "bk")); len(entries) != 2 {
		t.Errorf("backups left on the volume: %v", entries)
	}

	// Restore into a new Database, held at first: no read-write role, not Ready.
	fresh := testservers.StartPostgresCluster(t, "bk-copy", 1)
	testEnv.servers.set(ns, fresh[0].Pod, fresh[0].Port)
	createCredentials(t, ns, "bk-copy", "postgres", fresh[0].Password)
	release := testEnv.jobs.holdJob("bk-copy-restore")
	copyDB := database(ns, "bk-copy", dbv1.EnginePostgreSQL, 1, func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "manual-2"}}
	})
	if err := testEnv.client.Create(ctx, copyDB); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, copyDB, dbv1.ConditionRestored, metav1.ConditionFalse, "Restoring")
	time.Sleep(time.Second)
	if role := podRole(t, ns, "bk-copy-0"); role == "primary" {
		t.Error("the primary got its read-write role before the restore")
	}
	if ready := waitCondition(t, copyDB, dbv1.ConditionReady, metav1.ConditionFalse, "Restoring"); ready == nil {
		t.Error("not Ready=False Restoring")
	}
	// A backup of the Database being restored waits for the restore.
	newBackup(t, ns, "copy-early", "bk-copy")
	eventually(t, 30*time.Second, "copy-early pending", func() string {
		got := &dbv1.Backup{}
		if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-early"}, got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != dbv1.BackupPending || got.Status.Reason != "DatabaseRestoring" {
			return fmt.Sprintf("%s %s", got.Status.Phase, got.Status.Reason)
		}
		return ""
	})
	release()
	c = waitCondition(t, copyDB, dbv1.ConditionRestored, metav1.ConditionTrue, "RestoreSucceeded")
	if !strings.Contains(c.Message, "checksums verified") {
		t.Errorf("Restored: %+v", c)
	}
	waitRunning(t, copyDB, 1)
	if got := pgCount(t, fresh[0]); got != want {
		t.Errorf("restored %d rows, backed up %d", got, want)
	}
	if b := waitBackup(t, ns, "copy-early"); b.Status.Phase != dbv1.BackupCompleted {
		t.Errorf("the backup asked for during the restore: %+v", b.Status)
	}

	// Recreated over volumes that hold data (a Database deleted with
	// deletionPolicy Retain and applied again): the data is kept and
	// served, the backup not loaded over it.
	kept := testservers.StartPostgresCluster(t, "bk-kept", 1)
	testEnv.servers.set(ns, kept[0].Pod, kept[0].Port)
	createCredentials(t, ns, "bk-kept", "postgres", kept[0].Password)
	if err := pgExec(t, kept[0], "CREATE TABLE orders (id serial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	if err := pgExec(t, kept[0], "INSERT INTO orders (note) VALUES ('newer than any backup')"); err != nil {
		t.Fatal(err)
	}
	keptDB := database(ns, "bk-kept", dbv1.EnginePostgreSQL, 1, func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "manual-2"}}
	})
	if err := testEnv.client.Create(ctx, keptDB); err != nil {
		t.Fatal(err)
	}
	c = waitCondition(t, keptDB, dbv1.ConditionRestored, metav1.ConditionFalse, "ExistingDataKept")
	if !strings.Contains(c.Message, "already holds data") {
		t.Errorf("Restored: %+v", c)
	}
	waitRunning(t, keptDB, 1)
	if got := pgCount(t, kept[0]); got != 1 {
		t.Errorf("the kept server has %d rows, want its own 1", got)
	}

	// A corrupted backup: the restore is refused, the backup left as it is.
	dump := filepath.Join(claim, ns, "bk", "manual-1", "db-0001.dump")
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(dump, b, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := testservers.StartPostgresCluster(t, "bk-bad", 1)
	testEnv.servers.set(ns, bad[0].Pod, bad[0].Port)
	createCredentials(t, ns, "bk-bad", "postgres", bad[0].Password)
	badDB := database(ns, "bk-bad", dbv1.EnginePostgreSQL, 1, func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "manual-1"}}
	})
	if err := testEnv.client.Create(ctx, badDB); err != nil {
		t.Fatal(err)
	}
	c = waitCondition(t, badDB, dbv1.ConditionRestored, metav1.ConditionFalse, "RestoreFailed")
	if !strings.Contains(c.Message, "BackupCorrupt") || !strings.Contains(c.Message, "nothing was restored") {
		t.Errorf("Restored: %+v", c)
	}
	eventually(t, 30*time.Second, "bk-bad Failed", func() string {
		got := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: badDB.Name}}
		if err := get(t, got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != dbv1.PhaseFailed || podRole(t, ns, "bk-bad-0") == "primary" {
			return fmt.Sprintf("phase %s, role %q", got.Status.Phase, podRole(t, ns, "bk-bad-0"))
		}
		return ""
	})
	waitEvent(t, ns, "bk-bad", "Warning RestoreFailed")
	if after, _ := os.ReadFile(dump); string(after) != string(b) {
		t.Error("the failed restore changed the backup")
	}
}

// TestMariaDBBackupToS3AndFailures backs MariaDB up to a real S3 server
// (versitygw on loopback, TLS with a private CA) and restores it into a new
// Database from the backup's location; and each way a backup fails ends in
// a Failed Backup with its reason, LastBackupSucceeded=False, a Warning
// Event and the metrics: a missing credentials Secret, wrong credentials, a
// deadline, a scheduled run while another backup runs (skipped).
func TestMariaDBBackupToS3AndFailures(t *testing.T) {
	ctx := context.Background()
	ns, db, servers := mariaDBWithServers(t, "mb")
	mariaWrite(t, servers[0], 30, "to s3")
	s3 := testservers.StartS3(t, testservers.S3TLS())
	for name, secret := range map[string]string{"s3-good": s3.SecretKey, "s3-wrong": "not-the-secret"} {
		if err := testEnv.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			StringData: map[string]string{"accessKeyId": s3.AccessKey, "secretAccessKey": secret}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := testEnv.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-ca"},
		StringData: map[string]string{"ca.crt": string(s3.CA)}}); err != nil {
		t.Fatal(err)
	}
	target := func(secret string) *dbv1.BackupTarget {
		return &dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: "cluster-a", ForcePathStyle: true,
			CredentialsSecret: dbv1.S3Credentials{Name: secret}, CASecret: &dbv1.SecretKeyRef{Name: "s3-ca"}}}
	}
	failed0 := max(metricValue(t, "database_operator_backups_total", ns, "mb", "phase", "Failed", "reason", "TargetInvalid"), 0)

	// No such Secret: refused before any Job, with what to create.
	newBackup(t, ns, "no-secret", "mb", func(b *dbv1.Backup) { b.Spec.Target = target("missing") })
	b := waitBackup(t, ns, "no-secret")
	if b.Status.Phase != dbv1.BackupFailed || b.Status.Reason != "TargetInvalid" || !strings.Contains(b.Status.Message, "Secret "+ns+"/missing does not exist") {
		t.Errorf("missing Secret: %+v", b.Status)
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

	// Wrong secret key: the Job runs, the object store refuses it.
	newBackup(t, ns, "wrong-key", "mb", func(b *dbv1.Backup) { b.Spec.Target = target("s3-wrong") })
	b = waitBackup(t, ns, "wrong-key")
	if b.Status.Phase != dbv1.BackupFailed || b.Status.Reason != "TargetFailed" || !strings.Contains(b.Status.Message, "access denied") {
		t.Errorf("wrong credentials: %+v", b.Status)
	}
	waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "TargetFailed")

	// The right key: a backup at s3://, and a new Database restored from its location.
	newBackup(t, ns, "good", "mb", func(b *dbv1.Backup) { b.Spec.Target = target("s3-good") })
	good := waitBackup(t, ns, "good")
	if good.Status.Phase != dbv1.BackupCompleted || good.Status.Location != "s3://"+s3.Bucket+"/cluster-a/"+ns+"/mb/good" || len(strings.Split(good.Status.Position, "-")) != 3 {
		t.Fatalf("S3 backup: %+v", good.Status)
	}
	waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionTrue, "Completed")

	fresh := testservers.StartMariaDBCluster(t, "mb-copy", 1)
	testEnv.servers.set(ns, fresh[0].Pod, fresh[0].Port)
	createCredentials(t, ns, "mb-copy", "root", testservers.MariaDBRootPassword)
	copyDB := database(ns, "mb-copy", dbv1.EngineMariaDB, 1, func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Source: &dbv1.BackupSource{Target: *target("s3-good"), Path: good.Status.Path}}
	})
	if err := testEnv.client.Create(ctx, copyDB); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, copyDB, dbv1.ConditionRestored, metav1.ConditionTrue, "RestoreSucceeded")
	waitRunning(t, copyDB, 1)
	if got := mariaCount(t, fresh[0]); got != 30 {
		t.Errorf("restored %d rows, want 30", got)
	}

	// A scheduled run while a backup is running is skipped, and says so.
	release := testEnv.jobs.holdJob("slow")
	newBackup(t, ns, "slow", "mb", func(b *dbv1.Backup) { b.Spec.DeadlineSeconds = ptr.To[int64](30) })
	eventually(t, 30*time.Second, "slow running", func() string {
		got := &dbv1.Backup{}
		if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slow"}, got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != dbv1.BackupRunning {
			return string(got.Status.Phase)
		}
		return ""
	})
	newBackup(t, ns, "mb-202612030300", "mb", func(b *dbv1.Backup) { b.Labels = map[string]string{"database.example.com/scheduled": "true"} })
	skipped := waitBackup(t, ns, "mb-202612030300")
	if skipped.Status.Phase != dbv1.BackupSkipped || !strings.Contains(skipped.Status.Message, "slow") {
		t.Errorf("scheduled run during a backup: %+v", skipped.Status)
	}
	waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "PreviousBackupRunning")

	// The held backup passes its 30 s deadline: the Job controller stops it.
	slow := waitBackup(t, ns, "slow")
	release()
	if slow.Status.Phase != dbv1.BackupFailed || slow.Status.Reason != "DeadlineExceeded" {
		t.Errorf("backup past its deadline: %+v", slow.Status)
	}
	waitCondition(t, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "DeadlineExceeded")
	waitEvent(t, ns, "slow", "Warning BackupFailed")
}

// TestBackupTargetSecretsAreChecked: the validating webhook refuses an S3
// target whose credentials Secret is missing or lacks a key, saying which,
// on create and on update; a complete Secret is accepted.
func TestBackupTargetSecretsAreChecked(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s3 := func(d *dbv1.Database) {
		d.Spec.Backup = &dbv1.BackupPolicy{Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "s3.example.com", Bucket: "backups",
			CredentialsSecret: dbv1.S3Credentials{Name: "s3-creds"}}}}
	}
	err := testEnv.client.Create(ctx, database(ns, "nosecret", dbv1.EnginePostgreSQL, 1, s3))
	wantInvalid(t, err, "spec.backup.target.s3", "Secret s3-creds does not exist in namespace "+ns+": create it (keys accessKeyId, secretAccessKey)")

	if err := testEnv.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-creds"},
		StringData: map[string]string{"accessKeyId": "AK"}}); err != nil {
		t.Fatal(err)
	}
	err = testEnv.client.Create(ctx, database(ns, "nosecret", dbv1.EnginePostgreSQL, 1, s3))
	wantInvalid(t, err, "spec.backup.target.s3", "Secret s3-creds has no key(s) secretAccessKey")

	// Added by an update to an existing Database: refused the same way.
	plain := database(ns, "plain", dbv1.EnginePostgreSQL, 1)
	if err := testEnv.client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	err = update(ctx, testEnv.client, plain, s3)
	wantInvalid(t, err, "spec.backup.target.s3", "has no key(s) secretAccessKey")

	secret := &corev1.Secret{}
	if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-creds"}, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data["secretAccessKey"] = []byte("SK")
	if err := testEnv.client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := testEnv.client.Create(ctx, database(ns, "withsecret", dbv1.EnginePostgreSQL, 1, s3)); err != nil {
		t.Errorf("a complete Secret: %v", err)
	}
}
