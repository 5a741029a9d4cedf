package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
)

// restoreDone reports whether a bootstrap restore has ended, one way or the
// other, or was never asked for.
func restoreDone(db *dbv1.Database) bool {
	if db.Spec.Bootstrap == nil {
		return true
	}
	c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionRestored)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == dbv1.ReasonRestoreFailed || c.Reason == dbv1.ReasonExistingDataKept)
}

// restoreJobName is the Job that loads a Database's bootstrap backup.
func restoreJobName(db *dbv1.Database) string { return db.Name + "-restore" }

// reconcileRestore loads spec.bootstrap's backup into a new Database's
// primary once it runs: a Job verifies every file's checksum, then loads
// them. Until it succeeded the primary has no read-write role (no
// application write can land first) and the Database is not Ready. A
// failed restore is not retried: the condition says why, the backup is
// untouched, and the user recreates the Database (or fixes the backup).
func (r *DatabaseReconciler) reconcileRestore(ctx context.Context, db *dbv1.Database, obs *observed) error {
	// The Recovery phase's (before the pods), or decided there.
	if bootstrapSettled(db) || obs.physicalRestore || obs.restored != nil {
		return nil
	}
	cond := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionRestored)
	obs.restoring = true
	if cond != nil && cond.Reason == dbv1.ReasonRestoreFailed {
		obs.restored = cond
		return nil
	}
	set := func(status metav1.ConditionStatus, reason, msg string) {
		obs.restored = &metav1.Condition{Type: dbv1.ConditionRestored, Status: status, Reason: reason, Message: msg}
	}
	src, err := r.restoreSource(ctx, db)
	path := src.path
	var waiting *waitingForBackup
	var unusable *unusableBackup
	switch {
	case errors.As(err, &waiting):
		set(metav1.ConditionFalse, dbv1.ReasonWaitingForBackup, waiting.Error())
		obs.requeueWithin(10 * time.Second)
		return nil
	case errors.As(err, &unusable):
		set(metav1.ConditionFalse, dbv1.ReasonRestoreFailed, unusable.Error())
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonRestoreFailed, "Restore", "%v", unusable)
		return nil
	case err != nil:
		// An API error is retried: it says nothing of the backup.
		return fmt.Errorf("resolving the backup to restore: %w", err)
	}

	job := &batchv1.Job{}
	err = r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: restoreJobName(db)}, job)
	switch {
	case apierrors.IsNotFound(err):
		return r.startRestore(ctx, db, obs, src, set)
	case err != nil:
		return fmt.Errorf("reading the restore Job: %w", err)
	case !metav1.IsControlledBy(job, db):
		set(metav1.ConditionFalse, dbv1.ReasonRestoreFailed, fmt.Sprintf("a Job named %s exists and does not belong to this Database: delete or rename it", job.Name))
		return nil
	}
	out, err := readJobOutcome(ctx, r.APIReader, job, componentRestore, "restore", r.now())
	switch {
	case err != nil:
		return err
	case out.running:
		set(metav1.ConditionFalse, dbv1.ReasonRestoring, fmt.Sprintf("restore Job %s is verifying and loading %s", job.Name, path))
		return nil
	case out.resultPending:
		set(metav1.ConditionFalse, dbv1.ReasonRestoring, "waiting for the restore Job's result")
		obs.requeueWithin(2 * time.Second)
		return nil
	case out.reported && out.result.Reason == backup.ReasonNotEmpty:
		msg := fmt.Sprintf("the backup %s was not loaded: %s (a Database recreated over its retained volumes keeps its data)", path, out.result.Message)
		set(metav1.ConditionFalse, dbv1.ReasonExistingDataKept, msg)
		obs.restoring = false
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonExistingDataKept, "Restore", "%s", msg)
		return nil
	case out.succeeded():
		result := out.result
		msg := fmt.Sprintf("restored %s (%d bytes, checksums verified: %s), taken at position %s or later", result.Location, result.Size, result.Checksum, result.Position)
		if result.Message != "" {
			msg += "; " + result.Message // the binary log replayed after it
		}
		set(metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded, msg)
		obs.restoring = false
		r.event(db, corev1.EventTypeNormal, dbv1.ReasonRestoreSucceeded, "Restore", "%s", msg)
		return nil
	}
	msg := fmt.Sprintf("restoring %s failed: %s: %s; the backup is untouched: fix the cause and recreate the Database", path, out.reason, out.message)
	set(metav1.ConditionFalse, dbv1.ReasonRestoreFailed, msg)
	r.event(db, corev1.EventTypeWarning, dbv1.ReasonRestoreFailed, "Restore", "%s", msg)
	return nil
}

// bootstrapSettled: no bootstrap, or it ended with the data in place
// (restored, or kept from an earlier Database).
func bootstrapSettled(db *dbv1.Database) bool {
	if db.Spec.Bootstrap == nil {
		return true
	}
	cond := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionRestored)
	return cond != nil && (cond.Status == metav1.ConditionTrue || cond.Reason == dbv1.ReasonExistingDataKept)
}

// waitingForBackup: the Backup to restore has not completed yet (or does
// not exist yet); the restore waits for it.
type waitingForBackup struct{ why string }

func (w *waitingForBackup) Error() string { return w.why }

// unusableBackup: the Backup to restore can never be restored; the restore
// fails for good.
type unusableBackup struct{ why string }

func (u *unusableBackup) Error() string { return u.why }

// restoreFrom is what spec.bootstrap restores: a backup's target and
// path, and its Backup object (nil for bootstrap.source).
type restoreFrom struct {
	target dbv1.BackupTarget
	path   string
	backup *dbv1.Backup
}

// restoreSource resolves spec.bootstrap to a target and a path. It fails
// with a *waitingForBackup while the Backup has not completed, with an
// *unusableBackup when it cannot be restored, and with any other error
// when the API could not be read (retried).
func (r *DatabaseReconciler) restoreSource(ctx context.Context, db *dbv1.Database) (restoreFrom, error) {
	bs := db.Spec.Bootstrap
	if bs.Source != nil {
		return restoreFrom{target: bs.Source.Target, path: bs.Source.Path}, nil
	}
	b := &dbv1.Backup{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: bs.Backup.Name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return restoreFrom{}, &waitingForBackup{fmt.Sprintf("waiting for Backup %q, which does not exist in namespace %s", bs.Backup.Name, db.Namespace)}
		}
		return restoreFrom{}, fmt.Errorf("reading Backup %s: %w", bs.Backup.Name, err)
	}
	switch b.Status.Phase {
	case dbv1.BackupCompleted:
	case dbv1.BackupFailed, dbv1.BackupSkipped:
		return restoreFrom{}, &unusableBackup{fmt.Sprintf("Backup %s cannot be restored: it is %s (%s)", b.Name, b.Status.Phase, b.Status.Message)}
	default:
		return restoreFrom{}, &waitingForBackup{fmt.Sprintf("waiting for Backup %s to complete (it is %s)", b.Name, b.Status.Phase)}
	}
	if b.Status.Engine != "" && b.Status.Engine != db.Spec.Engine {
		return restoreFrom{}, &unusableBackup{fmt.Sprintf("Backup %s is a %s backup and cannot be restored into a %s Database", b.Name, b.Status.Engine, db.Spec.Engine)}
	}
	// The target the backup went to, as recorded; for Backups recorded
	// without it, the Backup's own or its source Database's.
	target := dbv1.BackupTarget{}
	switch {
	case b.Status.Target != nil:
		target = *b.Status.Target
	case b.Spec.Target != nil:
		target = *b.Spec.Target
	default:
		src := &dbv1.Database{}
		err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: b.Spec.Database.Name}, src)
		switch {
		case err == nil:
			target = backupTarget(b, src)
		case apierrors.IsNotFound(err):
			// The source is gone: its default volume claim (kept) holds the backup.
			target = dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: b.Spec.Database.Name + defaultBackupClaimSuffix}}
		default:
			return restoreFrom{}, fmt.Errorf("reading Database %s, the Backup's source: %w", b.Spec.Database.Name, err)
		}
	}
	if target.S3 == nil && (target.Volume == nil || target.Volume.ClaimName == "") {
		// The backed-up Database's default claim, not the new one's.
		target = dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: b.Spec.Database.Name + defaultBackupClaimSuffix}}
	}
	return restoreFrom{target: target, path: b.Status.Path, backup: b}, nil
}

func (r *DatabaseReconciler) startRestore(ctx context.Context, db *dbv1.Database, obs *observed, src restoreFrom,
	set func(metav1.ConditionStatus, string, string)) error {
	target, path := src.target, src.path
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	var primary *corev1.Pod
	for i := range pods {
		if pods[i].Name == primaryName(db, obs) && pods[i].DeletionTimestamp.IsZero() && podReady(&pods[i]) && !obs.restarting(pods[i].Name) {
			primary = &pods[i]
		}
	}
	if primary == nil {
		set(metav1.ConditionFalse, dbv1.ReasonRestoring, "waiting for the primary to start before loading "+path)
		return nil
	}
	if err := checkTarget(ctx, r.APIReader, db.Namespace, target); err != nil {
		set(metav1.ConditionFalse, dbv1.ReasonRestoreFailed, err.Error())
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonRestoreFailed, "Restore", "%v", err)
		return nil
	}
	args := []string{"--path=" + path}
	replay, refusal := binlogReplayArgs(db, src.backup, r.now())
	if refusal != "" {
		msg := "the recovery target cannot be reached, nothing was restored: " + refusal
		set(metav1.ConditionFalse, dbv1.ReasonRestoreFailed, msg)
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonRestoreFailed, "Restore", "%s", msg)
		return nil
	}
	job, err := buildJob(jobRequest{name: restoreJobName(db), component: componentRestore, db: db, instance: primary, target: target,
		args: append(args, replay...), deadline: 6 * defaultDeadline}, r.Values.OperatorImage)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(db, job, r.Scheme); err != nil {
		return err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the restore Job: %w", err)
	}
	set(metav1.ConditionFalse, dbv1.ReasonRestoring, fmt.Sprintf("restore Job %s started: verifying and loading %s into %s", job.Name, path, primary.Name))
	r.event(db, corev1.EventTypeNormal, "RestoreStarted", "Restore", "Loading %s into %s", path, primary.Name)
	return nil
}

// binlogReplayArgs are the restore Job's arguments that replay a MariaDB
// Backup's binary log archive after its dump: to spec.bootstrap's
// recovery target, else to the archive's end (as a PostgreSQL physical
// backup replays its WAL archive). The refusal says why the target cannot
// be reached, known before anything is made; the Job checks the archive's
// end before it loads anything.
func binlogReplayArgs(db *dbv1.Database, b *dbv1.Backup, now time.Time) (args []string, refusal string) {
	t := db.Spec.Bootstrap.RecoveryTarget
	if db.Spec.Engine != dbv1.EngineMariaDB {
		return nil, ""
	}
	if t == nil && (b == nil || b.Status.ArchivePath == "") {
		return nil, "" // the dump as it was taken
	}
	at, err := t.ParsedTime()
	switch {
	case err != nil:
		return nil, err.Error()
	case b == nil:
		return nil, "a recovery target needs bootstrap.backup: a Backup records the binary log archive to replay"
	case b.Status.ArchivePath == "":
		return nil, fmt.Sprintf("Backup %s has no binary log archive (its Database did not archive, or it went to another target): it restores only as it was taken; remove recoveryTarget for that", b.Name)
	case !at.IsZero() && b.Status.CompletedAt != nil && at.Before(b.Status.CompletedAt.Time):
		// The dump's snapshot is at some moment while it ran: it may
		// hold transactions after a target before its end.
		return nil, fmt.Sprintf("recovery target %s is before Backup %s completed (%s): pick a later moment or an earlier Backup",
			t.Time, b.Name, b.Status.CompletedAt.UTC().Format(time.RFC3339))
	case at.After(now):
		return nil, fmt.Sprintf("recovery target %s is in the future", t.Time)
	}
	args = []string{"--binlog-archive=" + b.Status.ArchivePath}
	switch {
	case !at.IsZero():
		args = append(args, "--target-time="+at.UTC().Format(time.RFC3339Nano))
	case t != nil && t.GTID != "":
		args = append(args, "--target-gtid="+t.GTID)
	}
	return args, ""
}
