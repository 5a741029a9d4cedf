package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/pitr"
	"example.com/database-operator/internal/engine"
)

// A point-in-time recovery (spec.bootstrap from a physical Backup) runs
// before the new Database's pods exist: a Job on the first instance's
// volume unpacks the base backup, replays the WAL archive to the target in
// a server of its own, promotes it, gives the accounts the new Database's
// passwords and shuts it down cleanly (pitr.Recover). Only then is the
// chart applied: the first pod starts on a data directory like any other,
// and the replicas clone it. Nothing before that is a server a client
// could reach, and a failed recovery leaves no data a server would start
// on: the Database stays Failed with the reason, pods never start, and
// the backup and the archive are only read.

// bootstrapKind is how spec.bootstrap is carried out.
type bootstrapKind int

const (
	bootstrapLogical   bootstrapKind = iota // loaded into the running primary (the Restore phase)
	bootstrapPhysical                       // recovered before the pods (the Recovery phase)
	bootstrapUndecided                      // the Backup does not say yet: nothing starts
)

// bootstrapKindOf decides how spec.bootstrap is carried out. Once a
// recovery was started (its Job or its claim exists) it stays physical,
// whatever becomes of the Backup: a Backup deleted by retention must not
// let the pods start on an empty volume. Before that the Backup decides,
// and a Backup not completed yet (its method may still change) decides
// nothing.
func (r *DatabaseReconciler) bootstrapKindOf(ctx context.Context, db *dbv1.Database) (bootstrapKind, error) {
	bs := db.Spec.Bootstrap
	if bs == nil || db.Spec.Engine == dbv1.EngineMySQL || bs.Backup == nil {
		return bootstrapLogical, nil // the API allows a recovery target with a Backup only
	}
	if bs.RecoveryTarget != nil && db.Spec.Engine == dbv1.EnginePostgreSQL {
		// PostgreSQL recovers to a target from a physical backup only;
		// MariaDB from either (a dump loaded, then the binary log).
		return bootstrapPhysical, nil
	}
	started, err := r.recoveryStarted(ctx, db)
	if err != nil || started {
		return bootstrapPhysical, err
	}
	b := &dbv1.Backup{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: bs.Backup.Name}, b); {
	case apierrors.IsNotFound(err):
		return bootstrapUndecided, nil
	case err != nil:
		return bootstrapUndecided, fmt.Errorf("reading Backup %s: %w", bs.Backup.Name, err)
	}
	switch {
	case b.Status.Phase != dbv1.BackupCompleted:
		return bootstrapUndecided, nil
	case b.Status.Method == dbv1.BackupPhysical:
		return bootstrapPhysical, nil
	}
	return bootstrapLogical, nil // Logical, or completed before Backups had a method
}

// recoveryStarted: this Database's recovery Job or claim exists.
func (r *DatabaseReconciler) recoveryStarted(ctx context.Context, db *dbv1.Database) (bool, error) {
	job := &batchv1.Job{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: restoreJobName(db)}, job); {
	case err == nil:
		if c := job.Spec.Template.Spec.Containers; metav1.IsControlledBy(job, db) && len(c) > 0 && len(c[0].Args) > 0 && c[0].Args[0] == "recover" {
			return true, nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading the restore Job: %w", err)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: firstClaimName(db)}, pvc); {
	case err == nil:
		return pvc.Annotations[recoveryClaimAnnotation] == string(db.UID), nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading claim %s: %w", firstClaimName(db), err)
	}
	return false, nil
}

// firstClaimName is the first instance's claim (the StatefulSet is named
// after the Database).
func firstClaimName(db *dbv1.Database) string { return volumeClaimTemplate + "-" + db.Name + "-0" }

// reconcileRecovery carries out a physical bootstrap; until it succeeded
// the phases after it (the chart's objects, the pods) do not run. A
// bootstrap whose Backup does not say yet how it is taken holds them too.
func (r *DatabaseReconciler) reconcileRecovery(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if bootstrapSettled(db) {
		return nil
	}
	cond := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionRestored)
	kind, err := r.bootstrapKindOf(ctx, db)
	if err != nil {
		return err
	}
	set := func(status metav1.ConditionStatus, reason, msg string) {
		obs.restored = &metav1.Condition{Type: dbv1.ConditionRestored, Status: status, Reason: reason, Message: msg}
	}
	failed := func(msg string) {
		set(metav1.ConditionFalse, dbv1.ReasonRestoreFailed, msg)
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonRestoreFailed, "Recover", "%s", msg)
		obs.halt = true
	}
	switch kind {
	case bootstrapLogical:
		return nil
	case bootstrapUndecided:
		return r.waitForBootstrapKind(ctx, db, obs, cond, set, failed)
	}
	obs.physicalRestore, obs.restoring = true, true
	if cond != nil && cond.Reason == dbv1.ReasonRestoreFailed {
		obs.restored, obs.halt = cond, true
		return nil
	}

	// A Job already made decides, whatever became of the Backup since.
	job := &batchv1.Job{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: restoreJobName(db)}, job); {
	case err == nil:
		if !metav1.IsControlledBy(job, db) {
			failed(fmt.Sprintf("a Job named %s exists and does not belong to this Database: delete or rename it", job.Name))
			return nil
		}
		return r.recoveryOutcome(ctx, db, obs, job, set, failed)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the recovery Job: %w", err)
	}

	if why := r.keptVolumesRefusal(db); why != "" {
		// Over data kept from an earlier Database of this name.
		set(metav1.ConditionFalse, dbv1.ReasonExistingDataKept, why)
		obs.physicalRestore, obs.restoring = false, false
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonExistingDataKept, "Recover", "%s", why)
		return nil
	}
	src, err := r.restoreSource(ctx, db)
	var waiting *waitingForBackup
	var unusable *unusableBackup
	switch {
	case errors.As(err, &waiting):
		set(metav1.ConditionFalse, dbv1.ReasonWaitingForBackup, waiting.Error())
		obs.requeueWithin(10 * time.Second)
		obs.halt = true
		return nil
	case errors.As(err, &unusable):
		failed(unusable.Error())
		return nil
	case err != nil:
		return fmt.Errorf("resolving the backup to recover: %w", err)
	}
	if why := recoveryRefusal(db, src.backup, r.now()); why != "" {
		failed(why)
		return nil
	}
	msg, err := r.startRecovery(ctx, db, src)
	var refused *unusableBackup
	switch {
	case errors.As(err, &refused):
		failed(refused.Error())
		return nil
	case err != nil:
		return err
	}
	set(metav1.ConditionFalse, dbv1.ReasonRestoring, msg)
	obs.halt = true
	return nil
}

// waitForBootstrapKind holds the pods while the Backup does not say how
// it is taken, and says why.
func (r *DatabaseReconciler) waitForBootstrapKind(ctx context.Context, db *dbv1.Database, obs *observed, cond *metav1.Condition,
	set func(metav1.ConditionStatus, string, string), failed func(string)) error {
	obs.physicalRestore, obs.restoring, obs.halt = true, true, true
	if cond != nil && cond.Reason == dbv1.ReasonRestoreFailed {
		obs.restored = cond
		return nil
	}
	_, err := r.restoreSource(ctx, db)
	var waiting *waitingForBackup
	var unusable *unusableBackup
	switch {
	case errors.As(err, &unusable):
		failed(unusable.Error())
	case errors.As(err, &waiting):
		set(metav1.ConditionFalse, dbv1.ReasonWaitingForBackup, waiting.Error()+": no pod starts before it did (a physical backup is recovered before them)")
		obs.requeueWithin(10 * time.Second)
	case err != nil:
		return fmt.Errorf("resolving the backup to restore: %w", err)
	default:
		obs.requeueWithin(time.Second) // completed in between
	}
	return nil
}

// keptVolumesRefusal says why no recovery runs over the volumes kept from
// an earlier Database of this name: it runs over the first instance's
// claim alone (a recovery that never succeeded left only that one, and
// the recovery Job refuses one that holds data), never beside the claims
// of instances that served (their data stands, as a logical restore
// would leave it).
func (r *DatabaseReconciler) keptVolumesRefusal(db *dbv1.Database) string {
	kept := db.Annotations[keptVolumesAnnotation]
	if kept == "" || kept == firstClaimName(db) {
		return ""
	}
	return fmt.Sprintf("the backup was not recovered: volumes kept from an earlier Database of this name (%s) hold its data, which is kept", kept)
}

// recoveryOutcome reads the recovery Job's end into the Restored
// condition: until it succeeded, the phases after Recovery do not run.
func (r *DatabaseReconciler) recoveryOutcome(ctx context.Context, db *dbv1.Database, obs *observed, job *batchv1.Job,
	set func(metav1.ConditionStatus, string, string), failed func(string)) error {
	path := jobArg(job, "--path=")
	out, err := readJobOutcome(ctx, r.APIReader, job, componentRestore, "recovery", r.now())
	switch {
	case err != nil:
		return err
	case out.running:
		set(metav1.ConditionFalse, dbv1.ReasonRestoring, fmt.Sprintf("recovery Job %s is unpacking %s and replaying the %s to %s", job.Name, path, archiveNoun(db), targetOf(db)))
		obs.halt = true
		return nil
	case out.resultPending:
		set(metav1.ConditionFalse, dbv1.ReasonRestoring, "waiting for the recovery Job's result")
		obs.requeueWithin(2 * time.Second)
		obs.halt = true
		return nil
	case out.reported && out.result.Reason == backup.ReasonNotEmpty:
		msg := fmt.Sprintf("the backup %s was not recovered: %s", path, out.result.Message)
		set(metav1.ConditionFalse, dbv1.ReasonExistingDataKept, msg)
		obs.physicalRestore, obs.restoring = false, false
		r.event(db, corev1.EventTypeWarning, dbv1.ReasonExistingDataKept, "Recover", "%s", msg)
		return nil
	case out.succeeded():
		// The chart is applied in this same reconcile: the pods start on
		// the recovered data.
		msg := fmt.Sprintf("%s (base backup %s, checksums verified)", out.result.Message, out.result.Location)
		set(metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded, msg)
		obs.restoring = false
		r.event(db, corev1.EventTypeNormal, dbv1.ReasonRestoreSucceeded, "Recover", "%s", msg)
		log.FromContext(ctx).Info("recovered", "backup", path, "result", out.result.Message)
		return nil
	}
	failed(fmt.Sprintf("recovering %s to %s failed: %s: %s; the backup and the archive are untouched and no pod was started: fix the cause and recreate the Database",
		path, targetOf(db), out.reason, out.message))
	return nil
}

// jobArg is the value of a Job's argument with prefix (--path=...).
func jobArg(job *batchv1.Job, prefix string) string {
	for _, c := range job.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, prefix); ok {
				return v
			}
		}
	}
	return ""
}

// targetOf says where db's recovery stops.
func targetOf(db *dbv1.Database) string {
	t := db.Spec.Bootstrap.RecoveryTarget
	if t == nil {
		return pitr.Target{}.String()
	}
	at, _ := t.ParsedTime() // refused before any Job when it does not parse
	if t.GTID != "" {
		return "GTID " + t.GTID
	}
	return pitr.Target{Time: at, LSN: t.LSN, Name: t.Name}.String()
}

// mariadbRelease is the release ("10.11") of a MariaDB server version
// ("10.11.19-MariaDB-0+deb12u1"); "" when it does not say.
func mariadbRelease(version string) string {
	parts := strings.FieldsFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "." + parts[1]
}

// archiveNoun names db's archive: the WAL archive or the binary log archive.
func archiveNoun(db *dbv1.Database) string {
	if db.Spec.Engine == dbv1.EnginePostgreSQL {
		return "WAL archive"
	}
	return "binary log archive"
}

// recoveryRefusal is why db's recovery target cannot be reached from b,
// known before anything is made; "" when it may be (the recovery Job
// checks the archive's end).
func recoveryRefusal(db *dbv1.Database, b *dbv1.Backup, now time.Time) string {
	if db.Spec.Engine == dbv1.EngineMariaDB && b != nil && b.Status.Method == dbv1.BackupPhysical {
		// mariadb-backup prepares a copy of its own release only, and a
		// server reads data files of its own release (or an older one
		// through mariadb-upgrade, never a newer one).
		if rel := mariadbRelease(b.Status.Version); rel != "" && rel != db.Spec.Version {
			return fmt.Sprintf("Backup %s is a physical copy of MariaDB %s: it is recovered by the same release; set spec.version %q", b.Name, rel, rel)
		}
	}
	t := db.Spec.Bootstrap.RecoveryTarget
	if t == nil {
		return ""
	}
	at, err := t.ParsedTime()
	if err != nil {
		return err.Error()
	}
	switch {
	case b == nil:
		return "a recovery target needs bootstrap.backup: a Backup records the WAL archive to replay"
	case b.Status.Method != dbv1.BackupPhysical:
		return fmt.Sprintf("Backup %s is a logical backup (dumps): a recovery target needs a physical one (method Physical)", b.Name)
	case b.Status.ArchivePath == "":
		return fmt.Sprintf("Backup %s has no %s (its Database did not archive, or it went to another target): it restores only to its own end; remove recoveryTarget for that", b.Name, archiveNoun(db))
	case !at.IsZero() && b.Status.CompletedAt != nil && at.Before(b.Status.CompletedAt.Time):
		return fmt.Sprintf("recovery target %s is before Backup %s completed (%s): pick a later moment or an earlier Backup",
			t.Time, b.Name, b.Status.CompletedAt.UTC().Format(time.RFC3339))
	case at.After(now):
		return fmt.Sprintf("recovery target %s is in the future", t.Time)
	}
	return ""
}

// startRecovery makes the first instance's volume and the Job that
// recovers onto it; it returns the condition's message. An
// *unusableBackup says why it cannot.
func (r *DatabaseReconciler) startRecovery(ctx context.Context, db *dbv1.Database, src restoreFrom) (string, error) {
	if err := checkTarget(ctx, r.APIReader, db.Namespace, src.target); err != nil {
		return "", &unusableBackup{err.Error()}
	}
	sts, err := r.renderedStatefulSet(db)
	if err != nil {
		return "", err
	}
	claim, err := r.ensureRecoveryClaim(ctx, db, sts)
	if err != nil {
		return "", err
	}
	job, err := recoveryJob(db, sts, src, r.Values.OperatorImage, recoveryRun{name: restoreJobName(db), component: componentRestore, claim: claim})
	if err != nil {
		return "", &unusableBackup{err.Error()}
	}
	if err := controllerutil.SetControllerReference(db, job, r.Scheme); err != nil {
		return "", err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating the recovery Job: %w", err)
	}
	r.event(db, corev1.EventTypeNormal, "RecoveryStarted", "Recover", "Recovering %s to %s onto %s", src.path, targetOf(db), claim)
	return fmt.Sprintf("recovery Job %s started: unpacking %s onto %s and replaying the %s to %s", job.Name, src.path, claim, archiveNoun(db), targetOf(db)), nil
}

// renderedStatefulSet is the StatefulSet the chart renders for db: the
// recovery's volume and pod are the first instance's.
func (r *DatabaseReconciler) renderedStatefulSet(db *dbv1.Database) (*appsv1.StatefulSet, error) {
	objs, err := desiredObjects(r.Chart, db, r.Values)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetKind() != "StatefulSet" {
			continue
		}
		sts := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
			return nil, fmt.Errorf("reading the rendered StatefulSet: %w", err)
		}
		return sts, nil
	}
	return nil, fmt.Errorf("the chart rendered no StatefulSet")
}

// ensureRecoveryClaim makes the first instance's claim as the
// StatefulSet would (which then takes it as its own), marked as made for
// this Database's recovery: never taken for a volume kept from an earlier
// Database. A claim of that name made by anything else is refused.
func (r *DatabaseReconciler) ensureRecoveryClaim(ctx context.Context, db *dbv1.Database, sts *appsv1.StatefulSet) (string, error) {
	var tmpl *corev1.PersistentVolumeClaim
	for i := range sts.Spec.VolumeClaimTemplates {
		if sts.Spec.VolumeClaimTemplates[i].Name == volumeClaimTemplate {
			tmpl = &sts.Spec.VolumeClaimTemplates[i]
		}
	}
	if tmpl == nil {
		return "", fmt.Errorf("the rendered StatefulSet has no %q volume claim template", volumeClaimTemplate)
	}
	name := fmt.Sprintf("%s-%s-0", volumeClaimTemplate, sts.Name)
	pvc := &corev1.PersistentVolumeClaim{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pvc); {
	case err == nil:
		// Kept from an earlier Database of this name (keptVolumesRefusal
		// let it through: the first instance's alone), the Job recovers
		// onto it only when it holds no data.
		kept := db.Annotations[keptVolumesAnnotation] == name
		if pvc.Annotations[recoveryClaimAnnotation] != string(db.UID) && !kept {
			return "", &unusableBackup{fmt.Sprintf("a claim named %s exists that this recovery did not make: nothing is recovered over it (delete it, or recreate the Database without bootstrap to keep its data)", name)}
		}
		return name, nil
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading claim %s: %w", name, err)
	}
	labels := map[string]string{}
	for k, v := range tmpl.Labels {
		labels[k] = v
	}
	for k, v := range sts.Spec.Selector.MatchLabels {
		labels[k] = v
	}
	pvc = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels,
			Annotations: map[string]string{recoveryClaimAnnotation: string(db.UID)}},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if err := r.Create(ctx, pvc); err != nil {
		// One that appeared in between is looked at again next time.
		return "", fmt.Errorf("creating claim %s for the recovery: %w", name, err)
	}
	return name, nil
}

// recoveryRun is what a recovery Job is for: a Database's bootstrap onto
// its first instance's claim, or a restore drill (drill: into scratch
// space, thrown away, no account changed).
type recoveryRun struct {
	name, component string
	claim           string // the bootstrap's; none for a drill
	drill           bool
}

// replayArgs are the recover command's archive and target: the WAL
// archive through wal-fetch (PostgreSQL) or the binary log archive
// (MariaDB), replayed to the bootstrap's target (a drill's: the end).
func replayArgs(db *dbv1.Database, src restoreFrom, tp targetPod, run recoveryRun) []string {
	var args []string
	switch archive := src.backup.Status.ArchivePath; {
	case archive == "":
	case db.Spec.Engine == dbv1.EngineMariaDB:
		args = append(args, "--binlog-archive="+archive)
	default:
		fetch := append(append([]string{jobBinary, "wal-fetch"}, tp.args...), "--prefix="+archive)
		args = append(args, "--archive="+archive, "--restore-command="+shellJoin(fetch)+" %f %p")
	}
	bs := db.Spec.Bootstrap
	if bs == nil || bs.RecoveryTarget == nil || run.drill {
		return args
	}
	switch t := bs.RecoveryTarget; {
	case t.Time != "":
		args = append(args, "--target-time="+t.Time)
	case t.LSN != "":
		args = append(args, "--target-lsn="+t.LSN)
	case t.Name != "":
		args = append(args, "--target-name="+t.Name)
	case t.GTID != "":
		args = append(args, "--target-gtid="+t.GTID)
	}
	return args
}

// recoveryJob runs the manager's recover command in the database image,
// as the database container runs: a bootstrap on the first instance's
// claim mounted where that container mounts it, a drill into scratch
// space.
func recoveryJob(db *dbv1.Database, sts *appsv1.StatefulSet, src restoreFrom, operatorImage string, run recoveryRun) (*batchv1.Job, error) {
	if operatorImage == "" {
		return nil, fmt.Errorf("the operator's image is unknown (set RELATED_IMAGE_MANAGER on the operator): the recovery Job runs its binary")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sts.Name + "-0"}, Spec: *sts.Spec.Template.Spec.DeepCopy()}
	container := databaseContainer(pod)
	if container == nil {
		return nil, fmt.Errorf("the rendered StatefulSet has no %s container", databaseContainerName)
	}
	var pgdata, mountPath string
	dataEnv := "PGDATA"
	if db.Spec.Engine != dbv1.EnginePostgreSQL {
		dataEnv = "DATADIR"
	}
	for _, e := range container.Env {
		if e.Name == dataEnv {
			pgdata = e.Value
		}
	}
	for _, m := range container.VolumeMounts {
		if m.Name == volumeClaimTemplate {
			mountPath = m.MountPath
		}
	}
	if pgdata == "" || mountPath == "" {
		return nil, fmt.Errorf("the rendered database container has no %s or no %s mount", dataEnv, volumeClaimTemplate)
	}
	tp := targetForPod(src.target, db)
	for i := range tp.mounts {
		tp.mounts[i].ReadOnly = true // the source's backups and archive are only read
	}
	args := append([]string{"recover", "--engine=" + string(db.Spec.Engine)}, tp.args...)
	dataVolume := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: run.claim}}
	env := tp.env
	if run.drill {
		// The copy lives in scratch space and is deleted; no account is
		// changed, so no password is needed.
		pgdata, dataVolume = mountPath+"/"+filepath.Base(pgdata), corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		args = append(args, "--drill")
	} else {
		args = append(args, "--replication-user="+engine.ReplicationUser)
		env = append([]corev1.EnvVar{
			secretEnv(pitr.EnvSuperuserPassword, credentialsSecretName(db), corev1.BasicAuthPasswordKey),
			secretEnv(pitr.EnvReplicationPassword, replicationSecretName(db), corev1.BasicAuthPasswordKey),
		}, env...)
	}
	args = append(args, "--path="+src.path, "--datadir="+pgdata, "--scratch="+jobScratchDir,
		"--user="+engine.ProfileOf(db.Spec.Engine).Superuser, "--result-file="+jobResultFile)
	args = append(args, replayArgs(db, src, tp, run)...)
	mounts := append([]corev1.VolumeMount{
		{Name: "bin", MountPath: jobBinDir, ReadOnly: true}, {Name: "tmp", MountPath: "/tmp"},
		{Name: "scratch", MountPath: jobScratchDir}, {Name: volumeClaimTemplate, MountPath: mountPath},
	}, tp.mounts...)
	volumes := append([]corev1.Volume{
		{Name: "bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volumeClaimTemplate, VolumeSource: dataVolume},
	}, tp.volumes...)
	labels := map[string]string{
		labelName: JobAppName, labelInstance: db.Name, labelManagedBy: managedBy,
		labelComponent: run.component, labelDatabase: db.Name,
	}
	var annotations map[string]string
	if src.backup != nil {
		annotations = map[string]string{jobBackupAnnotation: src.backup.Name}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: run.name, Namespace: db.Namespace, Labels: labels, Annotations: annotations},
		Spec: batchv1.JobSpec{
			// One attempt: a failed recovery is reported; the user decides
			// (another target, another backup) and recreates the Database.
			BackoffLimit:          ptr.To(int32(0)),
			ActiveDeadlineSeconds: ptr.To(6 * defaultDeadline),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext:              pod.Spec.SecurityContext,
					ImagePullSecrets:             pod.Spec.ImagePullSecrets,
					// Where the first instance may run: the claim binds there.
					NodeSelector:      pod.Spec.NodeSelector,
					Affinity:          pod.Spec.Affinity,
					Tolerations:       pod.Spec.Tolerations,
					PriorityClassName: pod.Spec.PriorityClassName,
					InitContainers: []corev1.Container{{
						Name: "operator-binary", Image: operatorImage, Command: []string{"/manager", "copy-binary", jobBinary},
						VolumeMounts:    []corev1.VolumeMount{{Name: "bin", MountPath: jobBinDir}},
						SecurityContext: jobSecurityContext(), Resources: jobResources(),
					}},
					Containers: []corev1.Container{{
						Name: run.component, Image: container.Image, Command: []string{jobBinary}, Args: args,
						Env: env, VolumeMounts: mounts, SecurityContext: jobSecurityContext(), Resources: container.Resources,
						TerminationMessagePath: jobResultFile, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
					Volumes: volumes,
				},
			},
		},
	}, nil
}
