// Package controller holds the reconcilers. The Database reconciler renders
// the chart, applies it, labels instance roles and reports status; each
// concern has its own file.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/chart"
)

// DatabaseReconciler reconciles Database objects.
type DatabaseReconciler struct {
	client.Client
	// APIReader reads from the API server, bypassing the cache, where a
	// stale or filtered view would be wrong (deleting volumes, name clashes).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Chart     *chart.Renderer
	Values    ValueOptions
	// Instances reaches database instances for failover; nil disables it.
	Instances *InstanceConnector
	// Positions holds the primaries' last seen positions (spec.failover.maxLag).
	Positions *PrimaryPositions
	// Rollouts bounds how many Databases roll a template change out at
	// once (nil: no bound).
	Rollouts *RolloutSlots
	// RolloutReadyTimeout bounds how long a rollout waits for a restarted
	// instance to become ready before it reports the rollout stuck and
	// gives its slot up (zero: DefaultRolloutReadyTimeout).
	RolloutReadyTimeout time.Duration
	// Now is the clock (tests move it); nil means time.Now.
	Now func() time.Time
	// BackupMetrics get their gauges from each Database's Backups.
	BackupMetrics *BackupMetrics
	// Metrics are the operator's own series (nil: none).
	Metrics *OperatorMetrics
	// LeaseDuration is the primary Leases' duration (default
	// agent.DefaultLeaseDuration): how long a primary cut off from the
	// API server keeps taking writes, and about how long failover waits
	// for a primary that cannot be fenced.
	LeaseDuration time.Duration
	leases        *leaseClock
	// restarts: the primary pods already reported as restarting.
	restarts *restartLog
	// Logs reads a failed container's last log lines for the diagnosis of
	// an instance that does not run; nil leaves the cause Unknown.
	Logs PodLogs
	// diagnoses: what each failed start's log said, and what was reported.
	diagnoses *diagnosisLog
	// Agents reaches the instance agents' peer channel before a promotion;
	// nil skips it (unit tests, whose servers have no agent).
	Agents AskPromoting
	// Archivers reads a MariaDB primary's binary log archiver from its
	// agent's peer channel; nil leaves ContinuousArchiving Unknown.
	Archivers AskArchiver
}

// RBAC: everything the operator does to a Database's objects is
// namespaced (namespace=system: a Role, which the bundle carries as the
// CSV's permissions: OLM grants it in each target namespace of the
// OperatorGroup, and cluster-wide only for AllNamespaces); the ClusterRole
// holds the two cluster-scoped grants (StorageClasses, SubjectAccessReviews).
// Only the verbs used: objects the chart renders are applied (SSA: a
// patch, authorized as create too when it makes the object), read from the
// cache (list, watch; get only where read afresh from the API server);
// "update" only on leases and finalizers.
// tests/rbac reads the API server's audit log for unused grants. config/rbac/all-namespaces is the Role as a ClusterRole, for a
// kustomize install that manages every namespace (generated: make manifests).
// +kubebuilder:rbac:groups=example.com,resources=databases,verbs=get;list;watch;patch,namespace=system
// +kubebuilder:rbac:groups=example.com,resources=databases/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=example.com,resources=databases/finalizers,verbs=update,namespace=system
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups="",resources=services,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch,namespace=system
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;patch;delete,namespace=system
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch,namespace=system
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=list;watch;create;patch;delete,namespace=system

// phase is one ordered step of a reconcile.
type phase struct {
	name string
	run  func(context.Context, *dbv1.Database, *observed) error
	// gate: the phases after it depend on what it did (the objects exist,
	// the rollout is known, the primary is decided), so its failure stops
	// them. Any other phase's failure is reported and the rest still run:
	// a replica that cannot be re-pointed must not keep the new primary
	// from getting its role label (and -rw its endpoint).
	gate bool
}

// Reconcile moves one Database towards its spec and reports where it stands.
func (r *DatabaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("engine", db.Spec.Engine))

	if !db.DeletionTimestamp.IsZero() {
		again, err := r.finalize(ctx, db)
		if err != nil {
			r.event(db, corev1.EventTypeWarning, "CleanupFailed", "Delete", "%v", err)
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: again}, nil
	}
	if err := r.ensureFinalizer(ctx, db); err != nil {
		return ctrl.Result{}, err
	}

	obs := &observed{}
	if r.Instances != nil {
		obs.instances = newInstanceSet(r.Instances, db)
		obs.instances.fenced = func() { r.Metrics.fenced(db) }
		defer obs.instances.close()
	}
	for _, p := range []phase{
		{"Credentials", r.reconcileCredentials, true},
		// Not a gate: a certificate that cannot be renewed now must not hold
		// up a failover. A new Database's pods wait for the Secret to exist.
		{"Certificates", r.reconcileCertificates, false},
		// Before Apply: a new Database over kept volumes names no primary
		// before its pods start.
		{"KeptVolumes", r.reconcileKeptVolumes, true},
		// Before Apply: pods that archive to the default volume mount its claim.
		{"ArchiveTarget", r.reconcileArchiveTarget, false},
		// Before Apply: a point-in-time recovery makes the first instance's
		// data before any pod starts.
		{"Recovery", r.reconcileRecovery, true},
		{"Apply", r.reconcileObjects, true},
		// Before Failover: a rollout restarting the primary is not a failure.
		{"Observe", r.observeStatefulSet, true},
		// Until it chose the primary among kept volumes, nothing after runs.
		{"Adopt", r.reconcileAdopt, true},
		// Before anything acts on status.currentPrimary.
		{"PrimaryRecord", r.reconcilePrimaryRecord, true},
		{"Lease", r.reconcileLease, true},
		{"Failover", r.reconcileFailover, true},
		// Before Switchover: it may ask for one, to restart the primary.
		{"Rollout", r.reconcileRollout, false},
		// Before the StatefulSet shrinks past the primary: moves it.
		{"ScaleDown", r.reconcileScaleDown, false},
		{"Switchover", r.reconcileSwitchover, true},
		{"Rejoin", r.reconcileRejoin, false},
		{"Topology", r.reconcileTopology, false},
		{"Restore", r.reconcileRestore, false},
		{"Roles", r.reconcileRoles, false},
		{"Accounts", r.reconcileAccounts, false},
		{"Parameters", r.reconcileParameters, false},
		{"Archive", r.observeArchive, false},
		// Last: it reports what the phases before left.
		{"Instances", r.observeInstances, false},
	} {
		start := time.Now()
		err := p.run(ctx, db, obs)
		r.Metrics.phaseDone(p.name, time.Since(start))
		if err != nil {
			obs.fail(p.name, err)
			r.event(db, corev1.EventTypeWarning, p.name+reasonPhaseFailedPostfix, p.name, "%v", err)
			if p.gate {
				break
			}
		}
		if obs.halt {
			break
		}
	}
	if obs.statefulSet == nil && obs.failedPhase != "" {
		// A phase before Observe failed: status still reports the rollout.
		if err := r.observeStatefulSet(ctx, db, obs); err != nil {
			obs.fail("Observe", err)
		}
	}
	// Scheduled backups go on whatever failed above: a degraded Database
	// needs its backups most.
	if err := r.reconcileBackupSchedule(ctx, db, obs); err != nil {
		r.event(db, corev1.EventTypeWarning, "Backup"+reasonPhaseFailedPostfix, "Backup", "%v", err)
		obs.fail("Backup", err)
	}
	if err := r.observeBackups(ctx, db, obs); err != nil {
		obs.fail("Observe", err)
	} else if err := r.reconcileDrill(ctx, db, obs); err != nil {
		r.event(db, corev1.EventTypeWarning, "Verify"+reasonPhaseFailedPostfix, "Verify", "%v", err)
		obs.fail("Verify", err)
	}
	r.BackupMetrics.observeDatabase(db, obs.lastBackup, obs.lastSuccessfulBackup)
	r.verifyPrimary(ctx, db, obs)

	st := computeStatus(db, obs)
	r.reportPhase(db, st.Phase)
	r.reportReplication(db, &st)
	r.Metrics.observe(db, &st)
	if err := r.writeStatus(ctx, db, st); err != nil {
		if !apierrors.IsConflict(err) {
			return ctrl.Result{}, errors.Join(obs.err, fmt.Errorf("writing status: %w", err))
		}
		// Someone else wrote the Database since it was read: compute the
		// status again from a fresh read, soon.
		obs.requeueWithin(time.Second)
	}
	return ctrl.Result{RequeueAfter: obs.requeue}, obs.err
}

// ensureFinalizer adds the finalizer that lets the operator clean up
// (and keep what deletionPolicy keeps) before the Database goes.
func (r *DatabaseReconciler) ensureFinalizer(ctx context.Context, db *dbv1.Database) error {
	if controllerutil.ContainsFinalizer(db, Finalizer) {
		return nil
	}
	patch := client.MergeFrom(db.DeepCopy())
	controllerutil.AddFinalizer(db, Finalizer)
	if err := r.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	return nil
}

// reportPhase emits an Event when the Database's phase changes: a Warning
// into Degraded or Failed.
func (r *DatabaseReconciler) reportPhase(db *dbv1.Database, phase dbv1.Phase) {
	if db.Status.Phase == phase {
		return
	}
	typ := corev1.EventTypeNormal
	if phase == dbv1.PhaseDegraded || phase == dbv1.PhaseFailed {
		typ = corev1.EventTypeWarning
	}
	r.event(db, typ, "Phase"+string(phase), "Status", "Database is %s", phase)
}

// reconcileObjects renders the chart, applies what changed and prunes what
// the render no longer produces.
func (r *DatabaseReconciler) reconcileObjects(ctx context.Context, db *dbv1.Database, obs *observed) error {
	desired, err := desiredObjects(r.Chart, db, r.Values)
	if err != nil {
		return err
	}
	replacing, err := r.reconcileStorage(ctx, db)
	if err != nil {
		return err
	}
	if replacing {
		// The orphaned StatefulSet is still going away; its deletion event
		// brings the next reconcile, which creates the new one.
		obs.wait(dbv1.ReasonResizing, "replacing the StatefulSet to grow the volumes")
		return nil
	}
	applied, err := r.applyObjects(ctx, desired)
	if len(applied) > 0 {
		r.event(db, corev1.EventTypeNormal, "Applied", "Apply", "Applied %v", applied)
		log.FromContext(ctx).Info("applied", "objects", applied)
	}
	if err != nil {
		return err
	}
	pruned, err := r.pruneObjects(ctx, db, desired)
	if len(pruned) > 0 {
		r.event(db, corev1.EventTypeNormal, "Pruned", "Delete", "Deleted %v, no longer rendered", pruned)
		log.FromContext(ctx).Info("pruned", "objects", pruned)
	}
	return err
}

func (r *DatabaseReconciler) observeStatefulSet(ctx context.Context, db *dbv1.Database, obs *observed) error {
	sts := &appsv1.StatefulSet{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading StatefulSet: %w", err)
	}
	obs.statefulSet = sts
	return nil
}

func (r *DatabaseReconciler) event(db *dbv1.Database, typ, reason, action, note string, args ...any) {
	r.Metrics.onEvent(db, reason, r.now())
	if r.Recorder != nil {
		// The API refuses an Event whose note passes 1 kB, and the
		// recorder drops it silently: a long failure would go unsaid.
		r.Recorder.Eventf(db, nil, typ, reason, action, "%s", bounded(fmt.Sprintf(note, args...)))
	}
}

// SetupWithManager registers the reconciler and what it watches: the
// Databases, every kind the chart renders, the credentials Secret, and the
// instance pods (owned by the StatefulSet, so mapped by label).
func (r *DatabaseReconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	b := ctrl.NewControllerManagedBy(mgr).For(&dbv1.Database{}).Named("database").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers})
	for _, k := range ownedKinds() {
		b = b.Owns(k.obj)
	}
	return b.Owns(&corev1.Secret{}).
		Owns(&batchv1.Job{}). // the restore Job
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToDatabase)).
		Watches(&dbv1.Backup{}, handler.EnqueueRequestsFromMapFunc(backupToDatabase)).
		// Every renewal of a primary Lease starts the operator's clock for
		// it as soon as it happens (see leaseClock); none needs a reconcile.
		Watches(&coordinationv1.Lease{}, r.leases.sightings()).
		Complete(r)
}

// podToDatabase maps an instance pod to its Database by the instance label.
func podToDatabase(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[labelName] != chartName || l[labelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: l[labelInstance]}}}
}

// backupToDatabase maps a Backup to the Database it backs up (its status
// shows the latest backup's outcome).
func backupToDatabase(_ context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*dbv1.Backup)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Database.Name}}}
}
