package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
)

// physicalBackup is a completed physical Backup of "orders" that records
// its WAL archive, completed an hour ago.
func physicalBackup(mutate ...func(*dbv1.Backup)) *dbv1.Backup {
	done := metav1.NewTime(time.Now().Add(-time.Hour))
	b := &dbv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "base"},
		Spec:       dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}},
		Status: dbv1.BackupStatus{Phase: dbv1.BackupCompleted, Engine: dbv1.EnginePostgreSQL, Method: dbv1.BackupPhysical,
			Path: "shop/orders/base", ArchivePath: "shop/orders/_wal/uid-1", CompletedAt: &done,
			Target: &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "orders-backups"}}},
	}
	for _, m := range mutate {
		m(b)
	}
	return b
}

func recoveringDB(target *dbv1.RecoveryTarget) *dbv1.Database {
	return newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Name, db.UID = "orders-at-noon", "uid-2"
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "base"}, RecoveryTarget: target}
	})
}

// TestRecoveryBeforeThePods: a Database bootstrapped from a physical
// Backup gets its first instance's claim and a recovery Job (the archive
// replayed to the target through wal-fetch) and no pod until the Job
// succeeded; then the chart is applied and it is Restored. A failed
// recovery keeps the pods from ever starting on an empty data directory.
func TestRecoveryBeforeThePods(t *testing.T) {
	ctx := context.Background()
	at := time.Now().Add(-30 * time.Minute).UTC().Format(time.RFC3339Nano)
	db := recoveringDB(&dbv1.RecoveryTarget{Time: at})
	writes := 0
	r, c := newFakeReconciler(t, &writes, db, physicalBackup())
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	reconcile := func() *dbv1.Database {
		t.Helper()
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		got := &dbv1.Database{}
		if err := c.Get(ctx, req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	noStatefulSet := func() {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: db.Name}, &appsv1.StatefulSet{}); err == nil {
			t.Fatal("the StatefulSet exists before the recovery succeeded")
		}
	}

	got := reconcile()
	noStatefulSet()
	if cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored); cond == nil || cond.Reason != dbv1.ReasonRestoring {
		t.Fatalf("Restored %+v, want Restoring", cond)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "data-orders-at-noon-0"}, pvc); err != nil {
		t.Fatalf("the first instance's claim: %v", err)
	}
	if pvc.Annotations[recoveryClaimAnnotation] != "uid-2" || len(pvc.OwnerReferences) != 0 {
		t.Errorf("claim annotations %v, owners %v: want it marked for this recovery and owned by nobody (deletionPolicy decides)", pvc.Annotations, pvc.OwnerReferences)
	}
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-at-noon-restore"}, job); err != nil {
		t.Fatalf("recovery Job: %v", err)
	}
	args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"recover ", "--path=shop/orders/base", "--archive=shop/orders/_wal/uid-1",
		"--restore-command=" + jobBinary + " wal-fetch --dir=" + jobBackupsDir + " --prefix=shop/orders/_wal/uid-1 %f %p",
		"--target-time=" + at, "--replication-user="} {
		if !strings.Contains(args, want) {
			t.Errorf("recovery Job args %q lack %q", args, want)
		}
	}
	spec := job.Spec.Template.Spec
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "data-orders-at-noon-0"
	}) || !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "orders-backups"
	}) {
		t.Errorf("recovery Job volumes %+v: want the instance's claim and the source's backup claim", spec.Volumes)
	}

	// Running: still no pods.
	reconcile()
	noStatefulSet()

	// Succeeded: the chart is applied in the same reconcile.
	finishJob(t, c, job, backup.Result{Succeeded: true, Reason: "Recovered", Message: "recovered to time X: promoted at 0/3000000 on timeline 2"})
	got = reconcile()
	if cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored); cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "timeline 2") {
		t.Fatalf("Restored %+v, want True with the result", cond)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: db.Name}, &appsv1.StatefulSet{}); err != nil {
		t.Fatalf("the StatefulSet after the recovery: %v", err)
	}
	// No logical restore Job follows it.
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-at-noon-restore"}, job); err != nil || job.Spec.Template.Spec.Containers[0].Args[0] != "recover" {
		t.Errorf("the restore Job was replaced: %v %v", err, job.Spec.Template.Spec.Containers[0].Args)
	}
}

// TestRecoveryFailureKeepsPodsAway: the recovery Job failed (the archive
// corrupt, say): the Database is Failed with the program's reason, and no
// StatefulSet is ever made (its first pod would initialize an empty
// database where the user expects their data).
func TestRecoveryFailureKeepsPodsAway(t *testing.T) {
	ctx := context.Background()
	db := recoveringDB(nil)
	writes := 0
	r, c := newFakeReconciler(t, &writes, db, physicalBackup())
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	for i := range 3 {
		if i == 1 {
			job := &batchv1.Job{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-at-noon-restore"}, job); err != nil {
				t.Fatal(err)
			}
			finishJob(t, c, job, backup.Result{Reason: "RecoveryFailed", Message: "CORRUPT ARCHIVE 000000010000000000000003"})
		}
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	got := &dbv1.Database{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored)
	if cond == nil || cond.Reason != dbv1.ReasonRestoreFailed || !strings.Contains(cond.Message, "CORRUPT ARCHIVE") || got.Status.Phase != dbv1.PhaseFailed {
		t.Fatalf("phase %s, Restored %+v: want Failed with the program's message", got.Status.Phase, cond)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: db.Name}, &appsv1.StatefulSet{}); err == nil {
		t.Fatal("a StatefulSet was made after the recovery failed")
	}
}

// TestRecoveryRefusedBeforeAnything: a target the Backup cannot reach is
// refused with the reason before any claim or Job is made.
func TestRecoveryRefusedBeforeAnything(t *testing.T) {
	ctx := context.Background()
	early := time.Now().Add(-2 * time.Hour).Format(time.RFC3339Nano)
	later := time.Now().Add(time.Hour).Format(time.RFC3339Nano)
	now := time.Now().Add(-time.Minute).Format(time.RFC3339Nano)
	for _, tt := range []struct {
		name   string
		target *dbv1.RecoveryTarget
		backup *dbv1.Backup
		want   string
	}{
		{"before the backup completed", &dbv1.RecoveryTarget{Time: early}, physicalBackup(), "before Backup base completed"},
		{"in the future", &dbv1.RecoveryTarget{Time: later}, physicalBackup(), "in the future"},
		{"a logical backup", &dbv1.RecoveryTarget{Time: now}, physicalBackup(func(b *dbv1.Backup) { b.Status.Method = dbv1.BackupLogical }), "logical backup"},
		{"no archive", &dbv1.RecoveryTarget{LSN: "0/3000000"}, physicalBackup(func(b *dbv1.Backup) { b.Status.ArchivePath = "" }), "has no WAL archive"},
		{"a time that is none", &dbv1.RecoveryTarget{Time: "yesterday noon"}, physicalBackup(), "is not an RFC 3339 time"},
		{"a failed backup", &dbv1.RecoveryTarget{Name: "before-migration"}, physicalBackup(func(b *dbv1.Backup) { b.Status.Phase = dbv1.BackupFailed }), "cannot be restored"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := recoveringDB(tt.target)
			writes := 0
			r, c := newFakeReconciler(t, &writes, db, tt.backup)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}); err != nil {
				t.Fatal(err)
			}
			got := &dbv1.Database{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored)
			if cond == nil || cond.Reason != dbv1.ReasonRestoreFailed || !strings.Contains(cond.Message, tt.want) {
				t.Fatalf("Restored %+v, want RestoreFailed saying %q", cond, tt.want)
			}
			for _, o := range []client.Object{&corev1.PersistentVolumeClaim{}, &batchv1.Job{}, &appsv1.StatefulSet{}} {
				name := map[bool]string{true: "data-orders-at-noon-0", false: "orders-at-noon-restore"}[isClaim(o)]
				if _, sts := o.(*appsv1.StatefulSet); sts {
					name = db.Name
				}
				if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, o); err == nil {
					t.Errorf("%T %s was made for a refused recovery", o, name)
				}
			}
		})
	}
}

func isClaim(o client.Object) bool { _, ok := o.(*corev1.PersistentVolumeClaim); return ok }

// TestBackupMethodDefault: Physical for a PostgreSQL Database that
// archives, Logical otherwise, spec.method first.
func TestBackupMethodDefault(t *testing.T) {
	archiving := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	plain := newDB(dbv1.EnginePostgreSQL)
	mariaArchiving := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	mysqlArchiving := newDB(dbv1.EngineMySQL, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	for _, tt := range []struct {
		name string
		b    *dbv1.Backup
		db   *dbv1.Database
		want dbv1.BackupMethod
	}{
		{"archiving", &dbv1.Backup{}, archiving, dbv1.BackupPhysical},
		{"not archiving", &dbv1.Backup{}, plain, dbv1.BackupLogical},
		{"MariaDB archiving", &dbv1.Backup{}, mariaArchiving, dbv1.BackupPhysical},
		{"MySQL archiving", &dbv1.Backup{}, mysqlArchiving, dbv1.BackupLogical},
		{"asked logical", &dbv1.Backup{Spec: dbv1.BackupSpec{Method: dbv1.BackupLogical}}, archiving, dbv1.BackupLogical},
		{"asked physical", &dbv1.Backup{Spec: dbv1.BackupSpec{Method: dbv1.BackupPhysical}}, plain, dbv1.BackupPhysical},
	} {
		if got := backupMethod(tt.b, tt.db); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// finishJob marks job finished with its pod's termination message.
func finishJob(t *testing.T, c client.Client, job *batchv1.Job, result backup.Result) {
	t.Helper()
	ctx := context.Background()
	typ := batchv1.JobComplete
	if !result.Succeeded {
		typ = batchv1.JobFailed
	}
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))})
	if err := c.Status().Update(ctx, job); err != nil {
		if err := c.Update(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x", Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: job.Spec.Template.Spec.Containers[0].Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(result.Encode())}}}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// TestLongEventNotesBounded: an Event's note stays within the API's 1 kB
// (a longer one is refused, and the recorder drops it: a recovery's
// failure with the server's log in it went unsaid).
func TestLongEventNotesBounded(t *testing.T) {
	writes := 0
	r, _ := newFakeReconciler(t, &writes)
	r.event(newDB(dbv1.EnginePostgreSQL), corev1.EventTypeWarning, dbv1.ReasonRestoreFailed, "Recover", "%s", strings.Repeat("CORRUPT ARCHIVE ", 300))
	notes := eventNotes(r)
	if len(notes) != 1 || len(notes[0]) > 1024+len("Warning RestoreFailed ") {
		t.Errorf("events %q, want one within 1 kB", notes)
	}
}

// reconcileDB reconciles db once and returns it as stored.
func reconcileDB(t *testing.T, r *DatabaseReconciler, c client.Client, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}); err != nil {
		t.Fatal(err)
	}
	got := &dbv1.Database{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func hasStatefulSet(t *testing.T, c client.Client, db *dbv1.Database) bool {
	t.Helper()
	return c.Get(context.Background(), client.ObjectKeyFromObject(db), &appsv1.StatefulSet{}) == nil
}

// TestBootstrapWaitsForTheBackupToSay: while the Backup to restore is
// missing or not completed (its method may still be decided), no pod
// starts: a physical one is recovered before them, and pods started early
// would initialize an empty database on the volume it needs. A completed
// logical Backup lets them start (it is loaded into the running primary).
func TestBootstrapWaitsForTheBackupToSay(t *testing.T) {
	for _, tt := range []struct {
		name    string
		backup  *dbv1.Backup
		wantSTS bool
	}{
		{"missing", nil, false},
		{"running, method not recorded yet", physicalBackup(func(b *dbv1.Backup) { b.Status.Phase, b.Status.Method = dbv1.BackupRunning, "" }), false},
		{"pending", physicalBackup(func(b *dbv1.Backup) { b.Status.Phase = dbv1.BackupPending }), false},
		{"completed logical", physicalBackup(func(b *dbv1.Backup) { b.Status.Method, b.Status.ArchivePath = dbv1.BackupLogical, "" }), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := recoveringDB(nil)
			objs := []client.Object{db}
			if tt.backup != nil {
				objs = append(objs, tt.backup)
			}
			writes := 0
			r, c := newFakeReconciler(t, &writes, objs...)
			got := reconcileDB(t, r, c, db)
			if hasStatefulSet(t, c, db) != tt.wantSTS {
				t.Fatalf("StatefulSet made: %t, want %t", !tt.wantSTS, tt.wantSTS)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored)
			if !tt.wantSTS && (cond == nil || cond.Reason != dbv1.ReasonWaitingForBackup) {
				t.Errorf("Restored %+v, want WaitingForBackup", cond)
			}
		})
	}
}

// TestRecoveryOutlivesItsBackup: the Backup deleted (by the source's
// retention, say) once the recovery started: the recovery goes on, its
// result is read, and the pods start only once it succeeded; after a
// failure they never start.
func TestRecoveryOutlivesItsBackup(t *testing.T) {
	ctx := context.Background()
	for _, succeed := range []bool{true, false} {
		db := recoveringDB(nil)
		b := physicalBackup()
		writes := 0
		r, c := newFakeReconciler(t, &writes, db, b)
		reconcileDB(t, r, c, db)
		if err := c.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		reconcileDB(t, r, c, db)
		if hasStatefulSet(t, c, db) {
			t.Fatal("the Backup deleted during the recovery let the pods start")
		}
		job := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: restoreJobName(db)}, job); err != nil {
			t.Fatal(err)
		}
		result := backup.Result{Succeeded: succeed, Reason: "Recovered", Message: "recovered to the end of the archive"}
		if !succeed {
			result = backup.Result{Reason: "RecoveryFailed", Message: "recovery ended before configured recovery target was reached"}
		}
		finishJob(t, c, job, result)
		got := reconcileDB(t, r, c, db)
		reconcileDB(t, r, c, db)
		cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored)
		if succeed != hasStatefulSet(t, c, db) || cond == nil || (cond.Status == metav1.ConditionTrue) != succeed {
			t.Errorf("succeeded %t: StatefulSet %t, Restored %+v", succeed, hasStatefulSet(t, c, db), cond)
		}
	}
}

// TestRecreatedAfterAFailedRecovery: a Database re-created under the name
// of one whose recovery failed finds the first instance's claim kept
// (deletionPolicy Retain), with no data: the recovery runs onto it (the
// Job refuses it if it holds data) instead of taking it as data to keep,
// which let the pods initialize an empty database. Claims of several
// instances are data that served: kept, no recovery.
func TestRecreatedAfterAFailedRecovery(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		kept    []string
		wantJob bool
	}{
		{"the first instance's claim alone", []string{"data-orders-at-noon-0"}, true},
		{"claims of instances that served", []string{"data-orders-at-noon-0", "data-orders-at-noon-1"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := recoveringDB(nil)
			objs := []client.Object{db, physicalBackup()}
			for _, name := range tt.kept {
				objs = append(objs, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name,
					Labels:      selectorLabels(db),
					Annotations: map[string]string{recoveryClaimAnnotation: "uid-of-the-deleted-one"}}})
			}
			writes := 0
			r, c := newFakeReconciler(t, &writes, objs...)
			got := reconcileDB(t, r, c, db)
			if got.Annotations[keptVolumesAnnotation] == "" {
				t.Fatalf("the claims %v were not taken as kept", tt.kept)
			}
			got = reconcileDB(t, r, c, got)
			job := &batchv1.Job{}
			hasJob := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: restoreJobName(db)}, job) == nil
			cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionRestored)
			if hasJob != tt.wantJob {
				t.Fatalf("recovery Job made: %t, want %t (Restored %+v)", hasJob, tt.wantJob, cond)
			}
			if tt.wantJob {
				if hasStatefulSet(t, c, db) || !slices.ContainsFunc(job.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
					return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "data-orders-at-noon-0"
				}) {
					t.Errorf("the recovery does not run onto the kept claim before the pods")
				}
				return
			}
			if cond == nil || cond.Reason != dbv1.ReasonExistingDataKept {
				t.Errorf("Restored %+v, want ExistingDataKept", cond)
			}
		})
	}
}

// TestMariaDBRecoveryFromAPhysicalBackup: a MariaDB Database bootstrapped
// from a physical Backup is recovered before its pods, as PostgreSQL's:
// the recovery Job unpacks the copy into the data directory the chart's
// container uses and replays the binary log archive to the target. From
// a logical Backup it is loaded into the running primary as before.
func TestMariaDBRecoveryFromAPhysicalBackup(t *testing.T) {
	ctx := context.Background()
	maria := func(b *dbv1.Backup) {
		b.Status.Engine, b.Status.ArchivePath = dbv1.EngineMariaDB, "shop/orders/_binlog/uid-1"
	}
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Name, db.UID = "orders-at-noon", "uid-2"
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "base"}, RecoveryTarget: &dbv1.RecoveryTarget{GTID: "0-1000-42"}}
	})
	writes := 0
	r, c := newFakeReconciler(t, &writes, db, physicalBackup(maria))
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: db.Name}, &appsv1.StatefulSet{}); err == nil {
		t.Fatal("the StatefulSet exists before the recovery succeeded")
	}
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-at-noon-restore"}, job); err != nil {
		t.Fatalf("recovery Job: %v", err)
	}
	args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"recover --engine=mariadb ", "--path=shop/orders/base", "--binlog-archive=shop/orders/_binlog/uid-1",
		"--target-gtid=0-1000-42", "--datadir=/var/lib/mysql/data", "--user=root", "--replication-user="} {
		if !strings.Contains(args, want) {
			t.Errorf("recovery Job args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--restore-command") || strings.Contains(args, "--archive=") {
		t.Errorf("recovery Job args %q: a WAL archive's flags on a MariaDB recovery", args)
	}

	// A logical Backup: no recovery Job, the dump is loaded into the
	// running primary.
	logical := db.DeepCopy()
	logical.Name, logical.UID, logical.ResourceVersion = "orders-dumped", "uid-3", ""
	r, _ = newFakeReconciler(t, &writes, logical, physicalBackup(maria, func(b *dbv1.Backup) { b.Status.Method = dbv1.BackupLogical }))
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(logical)}); err != nil {
		t.Fatal(err)
	}
	if kind, err := r.bootstrapKindOf(ctx, logical); err != nil || kind != bootstrapLogical {
		t.Errorf("bootstrap from a logical MariaDB Backup: %v (%v), want logical", kind, err)
	}
}

// TestMariaDBPhysicalBackupOfAnotherRelease: a physical copy is recovered
// by its own release only (mariadb-backup prepares its own; a server never
// reads a newer one's files): refused before anything is made.
func TestMariaDBPhysicalBackupOfAnotherRelease(t *testing.T) {
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Spec.Version = "10.11"
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "base"}}
	})
	for version, refused := range map[string]bool{"11.4.5-MariaDB": true, "10.6.21-MariaDB-log": true, "10.11.19-MariaDB-0+deb12u1": false, "": false} {
		b := physicalBackup(func(b *dbv1.Backup) { b.Status.Engine, b.Status.Version = dbv1.EngineMariaDB, version })
		why := recoveryRefusal(db, b, time.Now())
		if refused != strings.Contains(why, "same release") {
			t.Errorf("a copy of %q: refusal %q, want refused %t", version, why, refused)
		}
	}
}
