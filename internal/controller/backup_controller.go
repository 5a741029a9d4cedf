package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
)

// +kubebuilder:rbac:groups=example.com,resources=backups,verbs=list;watch;create;delete,namespace=system
// +kubebuilder:rbac:groups=example.com,resources=backups/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=example.com,resources=backups/finalizers,verbs=update,namespace=system
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete,namespace=system
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=create,namespace=system

// backupDatabaseIndex indexes Backups by the Database they back up.
const backupDatabaseIndex = "spec.database.name"

// BackupReconciler runs each Backup as a Job and reports its outcome in the
// Backup's status, Events on the Backup and its Database, and metrics; the
// Database's status follows from its Backups (database_backup.go).
type BackupReconciler struct {
	client.Client
	APIReader     client.Reader
	Scheme        *runtime.Scheme
	Recorder      events.EventRecorder
	OperatorImage string
	Metrics       *BackupMetrics
	Now           func() time.Time
}

func (r *BackupReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile moves one Backup along Pending -> Running -> Completed|Failed.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &dbv1.Backup{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Phase.Finished() || !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("database", b.Spec.Database.Name))
	st := b.Status.DeepCopy()
	res, err := r.step(ctx, b, st)
	if werr := r.writeStatus(ctx, b, st); werr != nil {
		return ctrl.Result{}, werr
	}
	if b.Status.Phase.Finished() {
		r.announce(ctx, b)
	}
	return res, err
}

// step decides the next status; it returns an error only for what a retry
// may fix (API errors), never for a backup's own failure.
func (r *BackupReconciler) step(ctx context.Context, b *dbv1.Backup, st *dbv1.BackupStatus) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Database.Name}, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.finish(st, dbv1.BackupFailed, dbv1.ReasonDatabaseNotFound, fmt.Sprintf("Database %q does not exist in namespace %s", b.Spec.Database.Name, b.Namespace))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	st.Engine = db.Spec.Engine
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Name}, job)
	switch {
	case apierrors.IsNotFound(err) && st.Phase == dbv1.BackupRunning:
		// The cache may not have seen the Job created a moment ago: ask
		// the API server before calling it gone.
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Name}, job); err == nil {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.finish(st, dbv1.BackupFailed, dbv1.ReasonJobFailed, fmt.Sprintf("the backup Job %s disappeared before it reported a result", b.Name))
		return ctrl.Result{}, nil
	case apierrors.IsNotFound(err):
		return r.start(ctx, b, db, st)
	case err != nil:
		return ctrl.Result{}, err
	}
	if !metav1.IsControlledBy(job, b) {
		r.finish(st, dbv1.BackupFailed, dbv1.ReasonJobFailed, fmt.Sprintf("a Job named %s exists and does not belong to this Backup", b.Name))
		return ctrl.Result{}, nil
	}
	return r.observeJob(ctx, b, db, job, st)
}

// backupArgs are the backup command's own arguments; a physical backup of
// a Database that archives records the archive in st (same target).
func backupArgs(b *dbv1.Backup, db *dbv1.Database, pod string, st *dbv1.BackupStatus) []string {
	args := []string{"--namespace=" + db.Namespace, "--database=" + db.Name, "--database-uid=" + string(db.UID),
		"--database-created=" + db.CreationTimestamp.UTC().Format(time.RFC3339), "--name=" + b.Name, "--instance=" + pod}
	if p := db.Spec.Backup; p != nil && b.Spec.Target == nil {
		// Retention applies to the Database's own target.
		if p.Retention.KeepLast != nil {
			args = append(args, fmt.Sprintf("--keep-last=%d", *p.Retention.KeepLast))
		}
		if p.Retention.MaxAge != "" {
			args = append(args, "--max-age="+p.Retention.MaxAge)
		}
		if p.Archiving() {
			// The archive lives there too: retention keeps what the kept
			// backups' recoveries read of it, and deletes the rest.
			args = append(args, "--archive="+archiveOf(db).path)
		}
	}
	if st.Method == dbv1.BackupPhysical {
		args = append(args, "--method="+backup.MethodPhysical)
	}
	return args
}

// recordMethod sets how b is taken, once, and for a physical backup of a
// Database that archives to the same target, its archive: a recovery
// replays it from this backup on.
func recordMethod(st *dbv1.BackupStatus, b *dbv1.Backup, db *dbv1.Database) {
	if st.Method != "" {
		return
	}
	st.Method = backupMethod(b, db)
	// PostgreSQL replays its WAL archive from a base backup, MariaDB its
	// binary log archive from a dump or a base backup (each records its
	// GTID position).
	if a := archiveOf(db); b.Spec.Target == nil && archives(db) && a.extends(st.Method) {
		st.ArchivePath = a.path
	}
}

// backupMethod is how b is taken: its spec.method, else Physical for a
// PostgreSQL or MariaDB Database that archives (a copy of the data files
// the archive extends to any later moment: restored without loading a
// dump), else Logical. MySQL has no physical backup here.
func backupMethod(b *dbv1.Backup, db *dbv1.Database) dbv1.BackupMethod {
	switch {
	case b.Spec.Method != "":
		return b.Spec.Method
	case db.Spec.Engine != dbv1.EngineMySQL && db.Spec.Backup.Archiving():
		return dbv1.BackupPhysical
	}
	return dbv1.BackupLogical
}

// deadline is how long a backup of db may run.
func deadline(b *dbv1.Backup, db *dbv1.Database) int64 {
	switch {
	case b.Spec.DeadlineSeconds != nil:
		return *b.Spec.DeadlineSeconds
	case db.Spec.Backup != nil && db.Spec.Backup.DeadlineSeconds != nil:
		return *db.Spec.Backup.DeadlineSeconds
	}
	return defaultDeadline
}

// start creates the backup Job once nothing stands in its way.
func (r *BackupReconciler) start(ctx context.Context, b *dbv1.Backup, db *dbv1.Database, st *dbv1.BackupStatus) (ctrl.Result, error) {
	// Known before the Job, and never changed after: a recovery from this
	// Backup decides from it how it runs.
	recordMethod(st, b, db)
	if st.Method == dbv1.BackupPhysical && db.Spec.Engine == dbv1.EngineMySQL {
		r.finish(st, dbv1.BackupFailed, dbv1.ReasonMethodUnsupported, "a physical backup of MySQL needs xtrabackup or the clone plugin, which this operator does not run yet: use method Logical")
		return ctrl.Result{}, nil
	}
	if !restoreDone(db) {
		// Partial data is no backup, and its retention could delete the
		// backup being restored.
		st.Phase, st.Reason, st.Message = dbv1.BackupPending, dbv1.ReasonDatabaseRestoring, db.Name+" is being restored from a backup: the backup starts once the restore has ended"
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if running, err := r.otherRunning(ctx, b); err != nil {
		return ctrl.Result{}, err
	} else if running != "" {
		if b.Labels[labelScheduled] == "true" {
			r.finish(st, dbv1.BackupSkipped, dbv1.ReasonPreviousRunning, fmt.Sprintf("skipped: backup %s of the same Database was still running at the scheduled time", running))
			return ctrl.Result{}, nil
		}
		st.Phase, st.Reason, st.Message = dbv1.BackupPending, dbv1.ReasonWaitingForPrevious, fmt.Sprintf("waiting for backup %s of the same Database to finish", running)
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	target := backupTarget(b, db)
	if err := checkTarget(ctx, r.APIReader, b.Namespace, target); err != nil {
		r.finish(st, dbv1.BackupFailed, dbv1.ReasonTargetInvalid, err.Error())
		return ctrl.Result{}, nil
	}
	if err := ensureBackupClaim(ctx, r.Client, db, target); err != nil {
		return ctrl.Result{}, err
	}
	pod, err := r.backupSource(ctx, db)
	if err != nil {
		return ctrl.Result{}, err
	}
	if pod == nil {
		age := r.now().Sub(b.CreationTimestamp.Time)
		if age > time.Duration(deadline(b, db))*time.Second {
			r.finish(st, dbv1.BackupFailed, dbv1.ReasonDeadlineExceeded, fmt.Sprintf("no instance of %s was ready within the deadline (%ds)", db.Name, deadline(b, db)))
			return ctrl.Result{}, nil
		}
		st.Phase, st.Reason, st.Message = dbv1.BackupPending, dbv1.ReasonNoInstanceReady, "waiting for a ready instance of "+db.Name
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	args := backupArgs(b, db, pod.Name, st)
	req := jobRequest{name: b.Name, component: componentBackup, db: db, instance: pod, target: target,
		args: args, deadline: deadline(b, db), labels: map[string]string{labelBackup: b.Name}}
	if st.Method == dbv1.BackupPhysical && db.Spec.Engine == dbv1.EngineMariaDB {
		// The instance's agent copies its data files (mariadb-backup):
		// the Job presents the peer channel's token, derived from the
		// replication password.
		req.env = []corev1.EnvVar{secretEnv(backup.EnvReplicationPassword, replicationSecretName(db), corev1.BasicAuthPasswordKey)}
	}
	job, err := buildJob(req, r.OperatorImage)
	if err != nil {
		r.finish(st, dbv1.BackupFailed, dbv1.ReasonJobFailed, err.Error())
		return ctrl.Result{}, nil
	}
	if err := controllerutil.SetControllerReference(b, job, r.Scheme); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		// Retried with backoff; meanwhile the Backup says why it waits.
		st.Phase, st.Reason, st.Message = dbv1.BackupPending, dbv1.ReasonJobCreateFailed, fmt.Sprintf("creating the backup Job: %v", err)
		r.event(b, db, corev1.EventTypeWarning, dbv1.ReasonJobCreateFailed, "Backup %s: creating its Job failed: %v", b.Name, err)
		return ctrl.Result{}, fmt.Errorf("creating the backup Job: %w", err)
	}
	now := metav1.NewTime(r.now())
	st.Phase, st.Reason, st.Message = dbv1.BackupRunning, "JobCreated", fmt.Sprintf("backing up %s from %s", db.Name, pod.Name)
	st.StartedAt, st.Instance, st.Job, st.Target = &now, pod.Name, job.Name, resolvedTarget(target, db)
	r.event(b, db, corev1.EventTypeNormal, "BackupStarted", "Backup %s of %s started from %s", b.Name, db.Name, pod.Name)
	return ctrl.Result{}, nil
}

// observeJob turns a finished Job into the Backup's outcome.
func (r *BackupReconciler) observeJob(ctx context.Context, b *dbv1.Backup, db *dbv1.Database, job *batchv1.Job, st *dbv1.BackupStatus) (ctrl.Result, error) {
	if st.Phase != dbv1.BackupRunning {
		// The status write after the Job's creation was lost: it runs.
		st.Phase, st.Reason, st.Job = dbv1.BackupRunning, "JobCreated", job.Name
		recordMethod(st, b, db)
		if st.StartedAt == nil {
			st.StartedAt = &job.CreationTimestamp
		}
	}
	out, err := readJobOutcome(ctx, r.APIReader, job, componentBackup, "backup", r.now())
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case out.running:
		return ctrl.Result{}, nil
	case out.resultPending:
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	case out.succeeded():
		result := out.result
		st.Location, st.Path, st.Version, st.Position = result.Location, result.Path, result.Version, result.Position
		st.Size, st.Checksum = result.Size, result.Checksum
		msg := fmt.Sprintf("%d bytes at %s, taken at position %s or later", result.Size, result.Location, result.Position)
		if result.Message != "" {
			msg += "; " + result.Message
		}
		r.finish(st, dbv1.BackupCompleted, dbv1.ReasonBackupCompleted, msg)
		switch {
		case result.PrunedWAL > 0 && db.Spec.Engine == dbv1.EnginePostgreSQL:
			r.event(b, db, corev1.EventTypeNormal, dbv1.ReasonArchivePruned,
				"retention deleted %d archived WAL files before %s, where the oldest base backup kept starts", result.PrunedWAL, result.WALKeptFrom)
		case result.PrunedWAL > 0:
			r.event(b, db, corev1.EventTypeNormal, dbv1.ReasonArchivePruned,
				"retention deleted %d archived binary log files that no kept backup replays (the oldest kept replays from %s)", result.PrunedWAL, result.WALKeptFrom)
		}
		return ctrl.Result{}, r.prune(ctx, b, st.Target, result.Pruned)
	case out.reason == dbv1.ReasonDeadlineExceeded:
		r.finish(st, dbv1.BackupFailed, out.reason, fmt.Sprintf("%s (%ds)", out.message, deadline(b, db)))
	default:
		r.finish(st, dbv1.BackupFailed, out.reason, out.message)
	}
	return ctrl.Result{}, nil
}

// jobOutcome is how a backup or restore Job stands, from its conditions
// and its program's Result (its pod's termination message).
type jobOutcome struct {
	running       bool // not finished
	resultPending bool // finished so recently that its Result may not be written yet: look again soon
	result        backup.Result
	reported      bool // the program wrote result
	// Why it did not succeed (empty when it did).
	reason, message string
}

func (o jobOutcome) succeeded() bool { return !o.running && !o.resultPending && o.reason == "" }

// readJobOutcome reads a backup or restore ("what") Job's outcome. The
// pods are read through c, straight from the API server: the cache may lag
// behind the Job's condition, and a missing result must not fail a good
// run.
func readJobOutcome(ctx context.Context, c client.Reader, job *batchv1.Job, container, what string, now time.Time) (jobOutcome, error) {
	done, failedReason, failedMsg := jobFinished(job)
	if !done {
		return jobOutcome{running: true}, nil
	}
	result, found, err := jobResult(ctx, c, job, container)
	if err != nil {
		return jobOutcome{}, err
	}
	o := jobOutcome{result: result, reported: found}
	switch {
	case !found && failedReason == "" && resultMayLag(job, now):
		o.resultPending = true
	case failedReason == "" && found && result.Succeeded:
	case found && !result.Succeeded:
		o.reason, o.message = result.Reason, result.Message
		if o.reason == "" {
			o.reason = dbv1.ReasonJobFailed
		}
	case failedReason == batchv1.JobReasonDeadlineExceeded:
		o.reason, o.message = dbv1.ReasonDeadlineExceeded, fmt.Sprintf("the %s ran longer than its deadline and was stopped", what)
	case failedReason != "":
		o.reason, o.message = dbv1.ReasonJobFailed, fmt.Sprintf("the %s Job failed (%s): %s", what, failedReason, failedMsg)
	default:
		o.reason, o.message = dbv1.ReasonNoResult, fmt.Sprintf("the %s Job completed without reporting a result", what)
	}
	return o, nil
}

// jobFinished reports whether a Job is done and, when it failed, why.
func jobFinished(job *batchv1.Job) (done bool, failedReason, message string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, "", ""
		case batchv1.JobFailed:
			reason := c.Reason
			if reason == "" {
				reason = "Failed"
			}
			return true, reason, c.Message
		}
	}
	return false, "", ""
}

// jobResult reads the program's Result from the termination message of
// the Job's pod.
func jobResult(ctx context.Context, c client.Reader, job *batchv1.Job, container string) (backup.Result, bool, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return backup.Result{}, false, fmt.Errorf("listing the pods of Job %s: %w", job.Name, err)
	}
	// The newest pod first: with backoffLimit 0 there is one.
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != container || cs.State.Terminated == nil || strings.TrimSpace(cs.State.Terminated.Message) == "" {
				continue
			}
			res, err := backup.DecodeResult([]byte(cs.State.Terminated.Message))
			if err != nil {
				return backup.Result{Reason: dbv1.ReasonNoResult, Message: "the Job's result is unreadable: " + cs.State.Terminated.Message}, true, nil
			}
			return res, true, nil
		}
	}
	return backup.Result{}, false, nil
}

// finish records a final phase. Its Events and metrics follow once the
// status is written (announce), so a failed write never counts twice.
func (r *BackupReconciler) finish(st *dbv1.BackupStatus, phase dbv1.BackupPhase, reason, msg string) {
	if reason == "" {
		reason = string(phase)
	}
	now := metav1.NewTime(r.now())
	st.Phase, st.Reason, st.Message, st.CompletedAt = phase, reason, msg, &now
}

// announce tells of a finished Backup: Events on it and its Database, metrics.
func (r *BackupReconciler) announce(ctx context.Context, b *dbv1.Backup) {
	st := &b.Status
	typ, event := corev1.EventTypeWarning, "Backup"+string(st.Phase)
	if st.Phase == dbv1.BackupCompleted {
		typ = corev1.EventTypeNormal
	}
	db := &dbv1.Database{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Database.Name}, db); err != nil {
		db = nil
	}
	r.event(b, db, typ, event, "Backup %s %s: %s", b.Name, strings.ToLower(string(st.Phase)), st.Message)
	if r.Metrics != nil {
		r.Metrics.observe(b, st)
	}
}

// event records on the Backup and, when known, on its Database.
func (r *BackupReconciler) event(b *dbv1.Backup, db *dbv1.Database, typ, reason, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	msg := bounded(fmt.Sprintf(note, args...)) // within the API's 1 kB
	r.Recorder.Eventf(b, nil, typ, reason, "Backup", "%s", msg)
	if db != nil {
		r.Recorder.Eventf(db, b, typ, reason, "Backup", "%s", msg)
	}
}

// otherRunning names another Backup of the same Database that has a Job
// running, if any.
func (r *BackupReconciler) otherRunning(ctx context.Context, b *dbv1.Backup) (string, error) {
	// From the API server: a backup that started a moment ago may not be
	// Running in the cache yet, and two backups must not run at once.
	list := &dbv1.BackupList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(b.Namespace)); err != nil {
		return "", fmt.Errorf("listing Backups: %w", err)
	}
	for _, o := range list.Items {
		if o.Name != b.Name && o.Spec.Database.Name == b.Spec.Database.Name && o.Status.Phase == dbv1.BackupRunning {
			return o.Name, nil
		}
	}
	return "", nil
}

// backupSource picks the instance to back up: a ready replica when there is
// one (the primary keeps its I/O for the application), else the ready
// primary; nil when none is ready.
func (r *BackupReconciler) backupSource(ctx context.Context, db *dbv1.Database) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var primary *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !p.DeletionTimestamp.IsZero() || !podReady(p) {
			continue
		}
		switch p.Labels[labelRole] {
		case roleReplica:
			return p, nil
		case rolePrimary:
			primary = p
		}
	}
	return primary, nil
}

// ensureBackupClaim creates the default backup claim of a volume target
// (for a backup Job, or for the database pods that archive their WAL
// there). The operator never deletes it: backups outlive the Database
// unless the user deletes them.
func ensureBackupClaim(ctx context.Context, c client.Client, db *dbv1.Database, t dbv1.BackupTarget) error {
	if t.S3 != nil || (t.Volume != nil && t.Volume.ClaimName != "") {
		return nil
	}
	size := db.Spec.Storage.Size
	var class *string
	if t.Volume != nil {
		if t.Volume.Size != nil {
			size = *t.Volume.Size
		}
		class = t.Volume.StorageClassName
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName(t, db), Namespace: db.Namespace,
			Labels: map[string]string{labelManagedBy: managedBy, labelDatabase: db.Name, labelComponent: componentBackup}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if err := c.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating backup claim %s: %w", pvc.Name, err)
	}
	return nil
}

// checkTarget verifies the Secrets a target names exist with their keys
// before a Job is made, so a typo fails the backup at once with a message
// that says what to fix. (The validating webhook refuses such a target on
// the Database already; a Secret deleted later is caught here.)
func checkTarget(ctx context.Context, c client.Reader, namespace string, t dbv1.BackupTarget) error {
	for _, s := range t.Secrets() {
		if err := secretHasKeys(ctx, c, namespace, s.Name, s.Keys...); err != nil {
			return fmt.Errorf("S3 target: %w", err)
		}
	}
	return nil
}

func secretHasKeys(ctx context.Context, c client.Reader, namespace, name string, keys ...string) error {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("Secret %s/%s does not exist: create it with keys %s", namespace, name, strings.Join(keys, ", "))
		}
		return fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	for _, k := range keys {
		if len(s.Data[k]) == 0 {
			return fmt.Errorf("Secret %s/%s has no key %q (it has %s)", namespace, name, k, strings.Join(sortedKeys(s.Data), ", "))
		}
	}
	return nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// prune deletes the Backup objects whose data retention removed.
func (r *BackupReconciler) prune(ctx context.Context, b *dbv1.Backup, target *dbv1.BackupTarget, names []string) error {
	for _, n := range names {
		o := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: n}}
		if err := r.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		// Only the records of the backups retention deleted: this
		// Database's, at its own target as it is now (a record of a backup
		// at a target it used before still points at data; one from before
		// records kept the target is taken as at this one), at the path
		// that was deleted.
		sameTarget := o.Status.Target == nil || target == nil || equality.Semantic.DeepEqual(*o.Status.Target, *target)
		if o.Spec.Database.Name != b.Spec.Database.Name || o.Spec.Target != nil || !sameTarget ||
			o.Status.Path != backup.Path(b.Namespace, b.Spec.Database.Name, n) {
			continue
		}
		if err := r.Delete(ctx, o, client.Preconditions{UID: &o.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Backup %s (retention): %w", n, err)
		}
		log.FromContext(ctx).Info("retention deleted a backup", "backup", n)
	}
	return nil
}

func (r *BackupReconciler) writeStatus(ctx context.Context, b *dbv1.Backup, st *dbv1.BackupStatus) error {
	if equality.Semantic.DeepEqual(b.Status, *st) {
		return nil
	}
	orig := b.DeepCopy()
	b.Status = *st
	if err := r.Status().Patch(ctx, b, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("writing Backup status: %w", err)
	}
	return nil
}

// indexBackups lets both reconcilers list a Database's Backups.
func indexBackups(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &dbv1.Backup{}, backupDatabaseIndex, backupDatabase)
}

func backupDatabase(o client.Object) []string { return []string{o.(*dbv1.Backup).Spec.Database.Name} }

// SetupWithManager registers the reconciler: Backups, their Jobs, and the
// Jobs' pods (whose termination message carries the result).
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&dbv1.Backup{}).Named("backup").
		Owns(&batchv1.Job{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if name := o.GetLabels()[labelBackup]; name != "" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
			}
			return nil
		})).
		Complete(r)
}

// resultMayLag reports whether a Job finished so recently that its pod's
// termination message may not have been written yet: the Job's condition
// and the pod's status are separate writes.
func resultMayLag(job *batchv1.Job, now time.Time) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return now.Sub(c.LastTransitionTime.Time) < 30*time.Second
		}
	}
	return false
}

// resolvedTarget is a target as recorded in a Backup's status: a volume
// target names its claim, so that a restore into another Database finds it.
func resolvedTarget(t dbv1.BackupTarget, db *dbv1.Database) *dbv1.BackupTarget {
	out := t.DeepCopy()
	if out.S3 == nil {
		if out.Volume == nil {
			out.Volume = &dbv1.VolumeTarget{}
		}
		out.Volume.ClaimName = claimName(t, db)
	}
	return out
}
