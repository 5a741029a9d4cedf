package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/wal"
)

// Scheduled backups: the operator creates a Backup object at each schedule
// time rather than owning a CronJob. Every run is then a Backup with a
// status from the moment it is due (a skipped run too), retention works on
// one kind of record, and the Backup reconciler is the one path from Job to
// status for scheduled and on-demand backups alike.

// missedWindow bounds how far back a schedule looks for a missed run (the
// operator was down): only the latest missed run is taken, as CronJobs do.
const missedWindow = 24 * time.Hour

// cronSchedule parses spec.backup.schedule the way the API's rule checks it.
func cronSchedule(s string) (cron.Schedule, error) {
	return cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(s)
}

// dueRun is the latest schedule time in (last, now], zero when none, and
// the first schedule time after now.
func dueRun(s cron.Schedule, last, now time.Time) (due, next time.Time) {
	if floor := now.Add(-missedWindow); last.Before(floor) {
		last = floor
	}
	for t := s.Next(last); !t.After(now); t = s.Next(t) {
		due = t
	}
	return due, s.Next(now)
}

// dueSince is the latest time of sched that came since last (the
// Database's creation before the first run), zero when none came; the
// next reconcile comes at the next one.
func (r *DatabaseReconciler) dueSince(sched cron.Schedule, db *dbv1.Database, last *metav1.Time, obs *observed) time.Time {
	now := r.now()
	from := db.CreationTimestamp.Time
	if last != nil {
		from = last.Time
	}
	due, next := dueRun(sched, from, now)
	obs.requeueWithin(next.Sub(now))
	return due
}

// scheduledBackupName names the Backup of a schedule time: the same name
// for the same run, so a retried reconcile never takes two backups.
func scheduledBackupName(db *dbv1.Database, at time.Time) string {
	prefix := db.Name
	if len(prefix) > 38 {
		// Shortened to fit a Job name; a hash of the whole name keeps two
		// long names with one prefix apart.
		h := fnv.New32a()
		h.Write([]byte(db.Name))
		prefix = fmt.Sprintf("%s-%08x", prefix[:29], h.Sum32())
	}
	return prefix + "-" + at.UTC().Format("200601021504")
}

// reconcileBackupSchedule creates the Backup of a schedule time that came.
func (r *DatabaseReconciler) reconcileBackupSchedule(ctx context.Context, db *dbv1.Database, obs *observed) error {
	p := db.Spec.Backup
	if p == nil || p.Schedule == "" || p.Suspend || !restoreDone(db) {
		return nil
	}
	sched, err := cronSchedule(p.Schedule)
	if err != nil {
		return fmt.Errorf("spec.backup.schedule %q: %w", p.Schedule, err)
	}
	due := r.dueSince(sched, db, db.Status.LastScheduledBackup, obs)
	if due.IsZero() {
		return nil
	}
	b := &dbv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: scheduledBackupName(db, due), Namespace: db.Namespace,
			Labels: map[string]string{labelDatabase: db.Name, labelScheduled: "true", labelManagedBy: managedBy}},
		Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: db.Name}},
	}
	// No owner reference: a Backup outlives its Database (it is how the
	// Database is restored after deletion).
	err = r.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		// A retried reconcile, or a name taken by something else.
		existing := &dbv1.Backup{}
		if gerr := r.Get(ctx, client.ObjectKeyFromObject(b), existing); gerr != nil {
			return fmt.Errorf("reading Backup %s: %w", b.Name, gerr)
		}
		if existing.Spec.Database.Name != db.Name {
			return fmt.Errorf("the scheduled Backup's name %s is taken by a Backup of %s", b.Name, existing.Spec.Database.Name)
		}
	} else if err != nil {
		return fmt.Errorf("creating scheduled Backup %s: %w", b.Name, err)
	}
	t := metav1.NewTime(due)
	obs.lastScheduledBackup = &t
	r.event(db, corev1.EventTypeNormal, "BackupScheduled", "Backup", "Created Backup %s for the schedule time %s", b.Name, due.UTC().Format(time.RFC3339))
	return nil
}

// observeBackups finds the Database's latest finished Backup and its latest
// completed one, for the LastBackupSucceeded condition.
func (r *DatabaseReconciler) observeBackups(ctx context.Context, db *dbv1.Database, obs *observed) error {
	list := &dbv1.BackupList{}
	if err := r.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingFields{backupDatabaseIndex: db.Name}); err != nil {
		return fmt.Errorf("listing Backups: %w", err)
	}
	obs.backups = list.Items
	obs.lastBackup, obs.lastSuccessfulBackup = latestFinished(list.Items)
	obs.firstRecoverable = firstRecoverable(list.Items, archiveOf(db))
	obs.backupsObserved = true
	return nil
}

// archiveOf is where db's archive lives in its target, and the Backups a
// recovery replays it from: PostgreSQL's WAL archive after a physical
// backup, MariaDB's binary log archive after a dump or a physical backup
// (both record the GTID position they hold up to).
func archiveOf(db *dbv1.Database) recordedArchive {
	if db.Spec.Engine == dbv1.EngineMariaDB {
		return recordedArchive{path: binlog.Prefix(db.Namespace, db.Name, string(db.UID)), afterLogical: true}
	}
	return recordedArchive{path: wal.Prefix(db.Namespace, db.Name, string(db.UID))}
}

type recordedArchive struct {
	path string
	// afterLogical: a dump records where a replay of the archive starts
	// (MariaDB's GTID position), as a physical backup does.
	afterLogical bool
}

// extends says whether a recovery replays the archive after a Backup
// taken by method m.
func (a recordedArchive) extends(m dbv1.BackupMethod) bool {
	return m == dbv1.BackupPhysical || (a.afterLogical && m == dbv1.BackupLogical)
}

// firstRecoverable is the earliest moment a recovery reaches: the next
// whole second after the oldest completed Backup that records this
// Database's archive (not an earlier namesake's) completed (its
// completion time has whole seconds, the backup's own end fractions).
// Nil without one.
func firstRecoverable(backups []dbv1.Backup, archive recordedArchive) *metav1.Time {
	var first *metav1.Time
	for i := range backups {
		s := &backups[i].Status
		if s.Phase == dbv1.BackupCompleted && archive.extends(s.Method) && s.ArchivePath == archive.path && s.CompletedAt != nil &&
			(first == nil || s.CompletedAt.Before(first)) {
			first = s.CompletedAt
		}
	}
	if first == nil {
		return nil
	}
	at := metav1.NewTime(first.Truncate(time.Second).Add(time.Second))
	return &at
}

// latestFinished is the backup that finished last, whatever the order of
// backups, and when the last successful one completed.
func latestFinished(backups []dbv1.Backup) (last *dbv1.Backup, lastSuccess *metav1.Time) {
	for i := range backups {
		b := &backups[i]
		if !b.Status.Phase.Finished() || b.Status.CompletedAt == nil {
			continue
		}
		if last == nil || finishedLater(b, last) {
			last = b
		}
		if b.Status.Phase == dbv1.BackupCompleted && (lastSuccess == nil || b.Status.CompletedAt.After(lastSuccess.Time)) {
			lastSuccess = b.Status.CompletedAt
		}
	}
	return last, lastSuccess
}

// finishedLater tells whether backup a finished after b. Completion times
// have one-second precision; in a tie a skipped run counts as the earlier:
// a run is skipped because another backup is running at that moment, and
// that backup ends after the skip was decided, often in the same second.
// Without the tie-break the condition would depend on list order.
func finishedLater(a, b *dbv1.Backup) bool {
	ta, tb := a.Status.CompletedAt.Time, b.Status.CompletedAt.Time
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	return b.Status.Phase == dbv1.BackupSkipped && a.Status.Phase != dbv1.BackupSkipped
}

// backupStatus sets LastBackupSucceeded and lastSuccessfulBackup from what
// observeBackups found; before the first finished backup there is no
// condition.
func backupStatus(st *dbv1.DatabaseStatus, db *dbv1.Database, obs *observed) {
	if obs.lastScheduledBackup != nil {
		st.LastScheduledBackup = obs.lastScheduledBackup
	}
	if obs.lastSuccessfulBackup != nil {
		st.LastSuccessfulBackup = obs.lastSuccessfulBackup
	}
	b := obs.lastBackup
	if b == nil {
		return
	}
	when := b.Status.CompletedAt.UTC().Format(time.RFC3339)
	if b.Status.Phase == dbv1.BackupCompleted {
		setCondition(st, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionTrue, dbv1.ReasonBackupCompleted,
			fmt.Sprintf("backup %s completed at %s: %d bytes at %s", b.Name, when, b.Status.Size, b.Status.Location))
		return
	}
	reason := b.Status.Reason
	if reason == "" {
		reason = string(b.Status.Phase)
	}
	setCondition(st, db, dbv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, reason,
		fmt.Sprintf("backup %s %s at %s: %s", b.Name, map[dbv1.BackupPhase]string{dbv1.BackupFailed: "failed", dbv1.BackupSkipped: "was skipped"}[b.Status.Phase], when, b.Status.Message))
}
