package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
)

// Restore drills (spec.backup.verify): at each schedule time a Job
// recovers the Database's latest completed physical Backup, with the WAL
// archive to its end, into scratch space (pitr.Recover as a drill): the
// replay must reach the archive's end, every database open and every table
// be read; then the copy is deleted. The outcome is the BackupVerified
// condition, status.lastVerifiedTime, an Event and a metric. A drill only
// reads the backup and the archive: the Database's servers never see it.

// componentDrill labels drill Jobs; it is also their container's name.
const componentDrill = "drill"

// Reasons of the BackupVerified condition besides the recover program's.
const (
	reasonVerified         = "Verified"
	reasonDrillRunning     = "DrillRunning"
	reasonNoPhysicalBackup = "NoPhysicalBackup"
)

// drillJobName names the drill of a schedule time (at most 57 characters).
func drillJobName(db *dbv1.Database, at time.Time) string {
	return scheduledBackupName(db, at) + "-drill"
}

// drillState is what the reconcile saw of the latest drill.
type drillState struct {
	job, backup string
	outcome     jobOutcome
	finished    *metav1.Time // when the Job ended, once it did
	// noBackup: the schedule came with no physical backup to restore.
	noBackup bool
}

// reconcileDrill observes the latest drill and starts the drill of a
// schedule time that came.
func (r *DatabaseReconciler) reconcileDrill(ctx context.Context, db *dbv1.Database, obs *observed) error {
	p := db.Spec.Backup
	if p == nil || p.Verify == nil || db.Spec.Engine != dbv1.EnginePostgreSQL {
		return nil
	}
	if last := db.Status.LastScheduledVerification; last != nil {
		if err := r.observeDrill(ctx, db, obs, drillJobName(db, last.Time)); err != nil {
			return err
		}
	}
	if p.Suspend || !restoreDone(db) || (obs.drill != nil && obs.drill.outcome.running) {
		return nil // a drill still running takes the schedule time that comes meanwhile once it ends
	}
	sched, err := cronSchedule(p.Verify.Schedule)
	if err != nil {
		return fmt.Errorf("spec.backup.verify.schedule %q: %w", p.Verify.Schedule, err)
	}
	due := r.dueSince(sched, db, db.Status.LastScheduledVerification, obs)
	if due.IsZero() {
		return nil
	}
	b := latestPhysical(obs.backups, p.Archiving())
	at := metav1.NewTime(due)
	if b == nil {
		obs.lastScheduledVerification = &at
		obs.drill = &drillState{noBackup: true}
		_, reason, msg := drillCondition(obs.drill)
		r.event(db, corev1.EventTypeWarning, "BackupVerificationFailed", "Verify", "%s: %s", reason, msg)
		return nil
	}
	if err := r.startDrill(ctx, db, b, drillJobName(db, due)); err != nil {
		return err
	}
	obs.lastScheduledVerification = &at
	obs.drill = &drillState{job: drillJobName(db, due), backup: b.Name, outcome: jobOutcome{running: true}}
	return nil
}

// latestPhysical is the latest completed physical Backup among backups:
// of those that record the archive, when the Database archives (a drill
// then proves the archive too).
func latestPhysical(backups []dbv1.Backup, archiving bool) *dbv1.Backup {
	var latest, latestArchived *dbv1.Backup
	for i := range backups {
		b := &backups[i]
		if b.Status.Phase != dbv1.BackupCompleted || b.Status.Method != dbv1.BackupPhysical || b.Status.Path == "" || b.Status.CompletedAt == nil {
			continue
		}
		if latest == nil || b.Status.CompletedAt.After(latest.Status.CompletedAt.Time) {
			latest = b
		}
		if b.Status.ArchivePath != "" && (latestArchived == nil || b.Status.CompletedAt.After(latestArchived.Status.CompletedAt.Time)) {
			latestArchived = b
		}
	}
	if archiving && latestArchived != nil {
		return latestArchived
	}
	return latest
}

// startDrill creates the drill Job for b, after deleting the finished
// drills before it (the latest one's log, with each table's rows, is kept
// until the next).
func (r *DatabaseReconciler) startDrill(ctx context.Context, db *dbv1.Database, b *dbv1.Backup, name string) error {
	old := &batchv1.JobList{}
	if err := r.List(ctx, old, client.InNamespace(db.Namespace), client.MatchingLabels{labelComponent: componentDrill, labelDatabase: db.Name}); err != nil {
		return fmt.Errorf("listing drill Jobs: %w", err)
	}
	for i := range old.Items {
		j := &old.Items[i]
		if done, _, _ := jobFinished(j); !done || j.Name == name || !metav1.IsControlledBy(j, db) {
			continue
		}
		if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the earlier drill Job %s: %w", j.Name, err)
		}
	}
	target := backupTarget(b, db)
	if b.Status.Target != nil {
		target = *b.Status.Target
	}
	if err := checkTarget(ctx, r.APIReader, db.Namespace, target); err != nil {
		return fmt.Errorf("the drill of Backup %s cannot read its target: %w", b.Name, err)
	}
	sts, err := r.renderedStatefulSet(db)
	if err != nil {
		return err
	}
	job, err := recoveryJob(db, sts, restoreFrom{target: target, path: b.Status.Path, backup: b}, r.Values.OperatorImage,
		recoveryRun{name: name, component: componentDrill, drill: true})
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(db, job, r.Scheme); err != nil {
		return err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the drill Job: %w", err)
	}
	r.event(db, corev1.EventTypeNormal, "DrillStarted", "Verify", "Restore drill %s started: recovering Backup %s (%s) with the WAL archive to its end", name, b.Name, b.Status.Path)
	log.FromContext(ctx).Info("restore drill started", "job", name, "backup", b.Name)
	return nil
}

// observeDrill reads the outcome of the drill Job name, and announces a
// finished one once (its Event, when the condition does not say it yet).
func (r *DatabaseReconciler) observeDrill(ctx context.Context, db *dbv1.Database, obs *observed, name string) error {
	job := &batchv1.Job{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, job); {
	case apierrors.IsNotFound(err):
		return nil // none was started for that time (no backup), or it was deleted
	case err != nil:
		return fmt.Errorf("reading drill Job %s: %w", name, err)
	}
	if !metav1.IsControlledBy(job, db) {
		return nil
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionBackupVerified); c != nil &&
		c.Status != metav1.ConditionUnknown && strings.HasPrefix(c.Message, "restore drill "+name+" ") {
		return nil // its outcome is recorded: its pod is not read again at every reconcile
	}
	out, err := readJobOutcome(ctx, r.APIReader, job, componentDrill, "restore drill", r.now())
	if err != nil {
		return err
	}
	d := &drillState{job: name, backup: job.Annotations[jobBackupAnnotation], outcome: out}
	if out.resultPending {
		obs.requeueWithin(2 * time.Second)
	}
	if !out.running && !out.resultPending {
		d.finished = job.Status.CompletionTime
		if d.finished == nil {
			for _, c := range job.Status.Conditions {
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					d.finished = &c.LastTransitionTime
				}
			}
		}
		status, reason, msg := drillCondition(d)
		if c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionBackupVerified); c == nil || c.Status != status || c.Message != msg {
			if status == metav1.ConditionTrue {
				r.event(db, corev1.EventTypeNormal, dbv1.ConditionBackupVerified, "Verify", "%s", msg)
			} else {
				r.event(db, corev1.EventTypeWarning, "BackupVerificationFailed", "Verify", "%s: %s", reason, msg)
			}
		}
	}
	obs.drill = d
	return nil
}

// drillCondition is the BackupVerified condition a drill's state says.
func drillCondition(d *drillState) (metav1.ConditionStatus, string, string) {
	switch {
	case d.noBackup:
		return metav1.ConditionFalse, reasonNoPhysicalBackup, "the restore drill found no completed physical Backup of this Database to restore: take one (Backup spec.method Physical, the default with spec.backup.archive)"
	case d.outcome.running || d.outcome.resultPending:
		return metav1.ConditionUnknown, reasonDrillRunning, fmt.Sprintf("restore drill %s is recovering Backup %s", d.job, d.backup)
	case d.outcome.succeeded():
		return metav1.ConditionTrue, reasonVerified, fmt.Sprintf("restore drill %s recovered Backup %s: %s", d.job, d.backup, d.outcome.result.Message)
	}
	return metav1.ConditionFalse, d.outcome.reason, fmt.Sprintf("restore drill %s could not restore Backup %s: %s (the Job's log has the server's)", d.job, d.backup, d.outcome.message)
}

// drillStatus sets BackupVerified, lastScheduledVerification and
// lastVerifiedTime. A running drill leaves the last outcome in place.
func drillStatus(st *dbv1.DatabaseStatus, db *dbv1.Database, obs *observed) {
	if p := db.Spec.Backup; p == nil || p.Verify == nil {
		meta.RemoveStatusCondition(&st.Conditions, dbv1.ConditionBackupVerified)
		return
	}
	if obs.lastScheduledVerification != nil {
		st.LastScheduledVerification = obs.lastScheduledVerification
	}
	d := obs.drill
	if d == nil {
		return
	}
	status, reason, msg := drillCondition(d)
	if status == metav1.ConditionUnknown && meta.FindStatusCondition(st.Conditions, dbv1.ConditionBackupVerified) != nil {
		return
	}
	setCondition(st, db, dbv1.ConditionBackupVerified, status, reason, msg)
	if status == metav1.ConditionTrue && d.finished != nil {
		st.LastVerifiedTime = d.finished
	}
}
