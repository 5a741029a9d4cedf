package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	"github.com/operator-framework/operator-lib/conditions"

	dbv1 "example.com/database-operator/api/v1"
	dbv1alpha1 "example.com/database-operator/api/v1alpha1"
	helmcharts "example.com/database-operator/helm-charts"
	"example.com/database-operator/internal/chart"
)

// NewScheme returns a scheme with the built-in kinds and this operator's API.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := dbv1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := dbv1alpha1.AddToScheme(s); err != nil { // served older version, converted by the webhook
		return nil, err
	}
	if err := apiv2.AddToScheme(s); err != nil { // OperatorCondition, for OLM
		return nil, err
	}
	return s, nil
}

// CacheOptions limit what the operator caches: only the namespaces it
// manages (all when empty) and, of the kinds it owns, only objects labelled
// as managed by it. That keeps memory flat in a big cluster and keeps other
// workloads' Secrets out of the operator's memory.
func CacheOptions(namespaces []string) cache.Options {
	ours := labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy})
	byObject := map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: ours},
		&corev1.Pod{}:    {Label: ours},
	}
	for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.ConfigMap{}, &policyv1.PodDisruptionBudget{}, &networkingv1.NetworkPolicy{}, &batchv1.Job{},
		&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &coordinationv1.Lease{}} {
		byObject[o] = cache.ByObject{Label: ours}
	}
	opts := cache.Options{ByObject: byObject}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// Options configure the reconcilers.
type Options struct {
	Values ValueOptions
	// Resolve maps instance pods to server addresses (default: pod IP).
	Resolve Resolver
	// Upgradeable, when set, reports to OLM through the operator's
	// OperatorCondition whether it may be upgraded now; nil when OLM does
	// not manage the operator.
	Upgradeable conditions.Factory
	// DatabaseWorkers is how many Databases are reconciled at once
	// (default DefaultDatabaseWorkers).
	DatabaseWorkers int
	// PrimaryLeaseDuration is the primary Leases' duration (default
	// agent.DefaultLeaseDuration).
	PrimaryLeaseDuration time.Duration
	// ConcurrentRollouts is how many Databases roll a pod template change
	// out at once (default DefaultConcurrentRollouts).
	ConcurrentRollouts int
	// RolloutReadyTimeout bounds the wait for a restarted instance to
	// become ready (default DefaultRolloutReadyTimeout).
	RolloutReadyTimeout time.Duration
	// NoMonitoringObjects: the operator does not apply the Prometheus
	// operator's objects (MonitoringObjects) in its namespace;
	// OperatorDeployment owns them when it does (empty: nothing does).
	NoMonitoringObjects bool
	OperatorDeployment  string
}

// DefaultDatabaseWorkers is above one, so that one Database whose server
// hangs (each call bounded, but a reconcile may make several) does not
// delay another Database's failover.
const DefaultDatabaseWorkers = 4

// Setup adds the operator's reconcilers to a manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Resolve == nil {
		opts.Resolve = PodIPResolver
	}
	if err := indexBackups(context.Background(), mgr); err != nil {
		return fmt.Errorf("indexing Backups: %w", err)
	}
	backupMetrics, err := NewBackupMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	operatorMetrics, err := NewOperatorMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the clientset that reads pod logs: %w", err)
	}
	opts.Values.LeaseDuration = opts.PrimaryLeaseDuration
	renderer, err := chart.Load(helmcharts.Database, "database")
	if err != nil {
		return err
	}
	r := &DatabaseReconciler{
		Client:    client.WithFieldOwner(mgr.GetClient(), FieldOwner), // one field owner for every write
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder("database-operator"),
		Chart:     renderer,
		Values:    opts.Values,
		Instances: &InstanceConnector{Client: mgr.GetClient(), Resolve: opts.Resolve},
		Positions: &PrimaryPositions{},
		Rollouts:  &RolloutSlots{Max: opts.ConcurrentRollouts},

		RolloutReadyTimeout: opts.RolloutReadyTimeout,

		LeaseDuration: opts.PrimaryLeaseDuration,
		leases:        &leaseClock{},
		restarts:      &restartLog{},
		Agents:        AgentPromoting,
		Archivers:     AgentArchiver,
		Logs:          ClientsetPodLogs(clientset),
		diagnoses:     &diagnosisLog{},

		BackupMetrics: backupMetrics,
		Metrics:       operatorMetrics,
	}
	if opts.DatabaseWorkers < 1 {
		opts.DatabaseWorkers = DefaultDatabaseWorkers
	}
	if err := r.SetupWithManager(mgr, opts.DatabaseWorkers); err != nil {
		return fmt.Errorf("setting up the Database controller: %w", err)
	}
	br := &BackupReconciler{
		Client:        client.WithFieldOwner(mgr.GetClient(), FieldOwner),
		APIReader:     mgr.GetAPIReader(),
		Scheme:        mgr.GetScheme(),
		Recorder:      mgr.GetEventRecorder("database-operator"),
		OperatorImage: opts.Values.OperatorImage,
		Metrics:       backupMetrics,
	}
	if err := br.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Backup controller: %w", err)
	}
	if !opts.NoMonitoringObjects && opts.Values.OperatorNamespace != "" {
		dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("creating the discovery client: %w", err)
		}
		if err := mgr.Add(&MonitoringObjects{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Discovery: dc,
			Namespace: opts.Values.OperatorNamespace, Owner: opts.OperatorDeployment,
			Interval: MonitoringObjectsInterval, Log: mgr.GetLogger().WithName("monitoring-objects")}); err != nil {
			return err
		}
	}
	if opts.Upgradeable != nil {
		u := &UpgradeableReporter{Reader: mgr.GetClient(), Conditions: opts.Upgradeable}
		if err := u.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the Upgradeable reporter: %w", err)
		}
	}
	return nil
}
