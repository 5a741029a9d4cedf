package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
)

// drillingDB is "orders", created two hours before now, drilled hourly.
func drillingDB(now time.Time) *dbv1.Database {
	return newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Hour))
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true},
			Target: dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "orders-backups"}},
			Verify: &dbv1.VerifyPolicy{Schedule: "0 * * * *"}}
	})
}

// TestRestoreDrill: at the schedule time a Job recovers the latest
// physical Backup with the archive to its end into scratch space (no
// target, no password, no claim of the Database's); its failure turns
// BackupVerified False with the program's reason and a Warning Event, and
// the next drill's success True with lastVerifiedTime, the earlier Job
// deleted.
func TestRestoreDrill(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)
	db := drillingDB(now)
	older := physicalBackup(func(b *dbv1.Backup) { b.Name = "older"; b.Status.Path = "shop/orders/older" })
	older.Status.CompletedAt = &metav1.Time{Time: now.Add(-90 * time.Minute)}
	latest := physicalBackup(func(b *dbv1.Backup) { b.Name = "latest"; b.Status.Path = "shop/orders/latest" })
	latest.Status.CompletedAt = &metav1.Time{Time: now.Add(-20 * time.Minute)}
	logical := physicalBackup(func(b *dbv1.Backup) { b.Name = "logical"; b.Status.Method = dbv1.BackupLogical })
	logical.Status.CompletedAt = &metav1.Time{Time: now.Add(-time.Minute)}
	writes := 0
	r, c := newFakeReconciler(t, &writes, db, older, latest, logical)
	r.Now = func() time.Time { return now }

	got := reconcileDB(t, r, c, db)
	name := drillJobName(db, time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, job); err != nil {
		t.Fatalf("drill Job %s: %v", name, err)
	}
	spec := job.Spec.Template.Spec
	args := strings.Join(spec.Containers[0].Args, " ")
	for _, want := range []string{"recover ", "--drill", "--path=shop/orders/latest", "--archive=shop/orders/_wal/uid-1"} {
		if !strings.Contains(args, want) {
			t.Errorf("drill args %q lack %q", args, want)
		}
	}
	for _, unwanted := range []string{"--target-", "--replication-user"} {
		if strings.Contains(args, unwanted) {
			t.Errorf("drill args %q have %q", args, unwanted)
		}
	}
	for _, e := range spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "orders-backups" {
			t.Errorf("the drill reads Secret %s: it changes no account", e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName != "orders-backups" {
			t.Errorf("the drill mounts claim %s: it writes scratch space only", v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "backups" && !m.ReadOnly {
			t.Error("the drill mounts the backups writable")
		}
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionBackupVerified); cond == nil || cond.Status != metav1.ConditionUnknown {
		t.Errorf("BackupVerified %+v while the first drill runs, want Unknown", cond)
	}
	if got.Status.LastScheduledVerification == nil || !got.Status.LastScheduledVerification.Time.Equal(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("lastScheduledVerification %v", got.Status.LastScheduledVerification)
	}

	// It fails: False with the program's reason, and a Warning Event.
	eventNotes(r) // drop the earlier ones
	finishJob(t, c, job, backup.Result{Reason: "RecoveryFailed", Message: "the replay ended at 0/3000000 on timeline 1, short of the archive's last segment"})
	got = reconcileDB(t, r, c, got)
	cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionBackupVerified)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "RecoveryFailed" || !strings.Contains(cond.Message, "Backup latest") || !strings.Contains(cond.Message, "short of the archive") {
		t.Fatalf("BackupVerified %+v, want False with the program's reason", cond)
	}
	if notes := strings.Join(eventNotes(r), "\n"); !strings.Contains(notes, "Warning BackupVerificationFailed RecoveryFailed") {
		t.Errorf("events %q, want a Warning", notes)
	}
	reconcileDB(t, r, c, got)
	if notes := eventNotes(r); len(notes) != 0 {
		t.Errorf("the failure announced again: %q", notes)
	}

	// An hour later the next drill succeeds; the failed one's Job goes.
	now = now.Add(time.Hour)
	got = reconcileDB(t, r, c, got)
	next := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: drillJobName(db, time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC))}, next); err != nil {
		t.Fatalf("the next drill Job: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}); err == nil {
		t.Error("the earlier drill Job was kept")
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionBackupVerified); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("BackupVerified %+v while the next drill runs, want the last outcome kept", cond)
	}
	finishJob(t, c, next, backup.Result{Succeeded: true, Reason: "Verified", Message: "recovered to the end of the archive: every database opened, 3 tables in 2 databases hold 42 rows"})
	next.Status.CompletionTime = &metav1.Time{Time: now.Add(-time.Minute).Truncate(time.Second)}
	if err := c.Status().Update(ctx, next); err != nil {
		t.Fatal(err)
	}
	got = reconcileDB(t, r, c, got)
	cond = meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionBackupVerified)
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "42 rows") {
		t.Fatalf("BackupVerified %+v, want True with the counts", cond)
	}
	if got.Status.LastVerifiedTime == nil || !got.Status.LastVerifiedTime.Equal(next.Status.CompletionTime) {
		t.Errorf("lastVerifiedTime %v, want the Job's completion %v", got.Status.LastVerifiedTime, next.Status.CompletionTime)
	}
}

// TestRestoreDrillWithoutPhysicalBackup: a schedule time with nothing to
// restore is not silent: BackupVerified False, a Warning, no Job.
func TestRestoreDrillWithoutPhysicalBackup(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)
	db := drillingDB(now)
	writes := 0
	r, c := newFakeReconciler(t, &writes, db, physicalBackup(func(b *dbv1.Backup) { b.Status.Method = dbv1.BackupLogical }))
	r.Now = func() time.Time { return now }
	got := reconcileDB(t, r, c, db)
	cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionBackupVerified)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reasonNoPhysicalBackup {
		t.Fatalf("BackupVerified %+v, want False NoPhysicalBackup", cond)
	}
	jobs := &batchv1.JobList{}
	if err := c.List(context.Background(), jobs, client.MatchingLabels{labelComponent: componentDrill}); err != nil || len(jobs.Items) != 0 {
		t.Errorf("drill Jobs %d (%v), want none", len(jobs.Items), err)
	}
	if notes := strings.Join(eventNotes(r), "\n"); !strings.Contains(notes, "Warning BackupVerificationFailed NoPhysicalBackup") {
		t.Errorf("events %q, want a Warning", notes)
	}
	_ = corev1.EventTypeWarning
}
