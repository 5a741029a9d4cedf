package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/parameters"
)

// chartName is the chart's name: the selector labels' app.kubernetes.io/name.
const chartName = "database"

// defaultResources apply when a Database sets no resources at all.
func defaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("256Mi"),
	}}
}

// effectiveVersion is the version a Database runs: spec.version, else the
// version already recorded in status (so clearing spec.version never moves a
// running database to another version), else the engine's default.
func effectiveVersion(db *dbv1.Database) string {
	if db.Spec.Version != "" {
		return db.Spec.Version
	}
	if v := db.Status.Version; v != "" && dbv1.IsSupportedVersion(db.Spec.Engine, v) {
		return v
	}
	return dbv1.DefaultVersion(db.Spec.Engine)
}

// credentialsSecretName is the Secret holding a Database's superuser credentials.
func credentialsSecretName(db *dbv1.Database) string { return dbv1.CredentialsSecretName(db.Name) }

// replicationSecretName is the Secret of a Database's replication account.
func replicationSecretName(db *dbv1.Database) string { return db.Name + "-replication" }

// selectorLabels select a Database's pods, PVCs and owned objects.
func selectorLabels(db *dbv1.Database) map[string]string {
	return map[string]string{labelName: chartName, labelInstance: db.Name}
}

// ValueOptions are the operator-wide settings that go into every render.
type ValueOptions struct {
	// OperatorNamespace is allowed through the NetworkPolicy; empty allows
	// only the Database's own namespace.
	OperatorNamespace string
	// NoNetworkPolicy leaves out the NetworkPolicy, for clusters whose
	// network plugin does not enforce them (or that manage them centrally).
	NoNetworkPolicy bool
	// Images maps "<engine>:<version>" to the image that runs it, from the
	// RELATED_IMAGE_* environment (see ImagesFromEnv); a Database's own
	// spec.image still wins. Unlisted versions use the chart's images.
	Images map[string]string
	// OperatorImage is the operator's own image (RELATED_IMAGE_MANAGER):
	// the instance agent in every database pod and the backup and restore
	// Jobs are its manager binary.
	OperatorImage string
	// LeaseDuration is the primary Leases' duration the agents start
	// with (zero: agent.DefaultLeaseDuration).
	LeaseDuration time.Duration
}

// terminationGracePeriod is the database pods' grace period: a stopping
// primary hands its role over in the first half (see agent/handover.go),
// its server stops in the rest.
const terminationGracePeriod = 60 * time.Second

// relatedImagePrefix marks the environment variables OLM lists as the
// CSV's relatedImages and mirroring tools rewrite.
const relatedImagePrefix = "RELATED_IMAGE_"

// ImagesFromEnv reads RELATED_IMAGE_<ENGINE>_<VERSION> variables (version
// dots written as underscores: RELATED_IMAGE_MYSQL_8_4) into
// ValueOptions.Images. Other RELATED_IMAGE_ variables (the manager's own)
// are not operands and are skipped.
func ImagesFromEnv(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || value == "" || !strings.HasPrefix(name, relatedImagePrefix) {
			continue
		}
		engine, version, ok := strings.Cut(strings.ToLower(strings.TrimPrefix(name, relatedImagePrefix)), "_")
		if !ok || !slices.Contains(dbv1.Engines(), dbv1.Engine(engine)) {
			continue
		}
		out[engine+":"+strings.ReplaceAll(version, "_", ".")] = value
	}
	return out
}

// chartValues derives the chart's values from a Database. It is the one
// place that maps the API onto the chart; it reads nothing but its inputs.
func chartValues(db *dbv1.Database, opts ValueOptions) map[string]any {
	// The claims of instances a scale-down removes follow deletionPolicy.
	whenScaled := "Retain"
	if db.Spec.DeletionPolicy == dbv1.DeletionPolicyDelete {
		whenScaled = "Delete"
	}
	storage := map[string]any{"size": db.Spec.Storage.Size.String(), "whenScaled": whenScaled}
	if sc := db.Spec.Storage.StorageClassName; sc != nil {
		storage["storageClassName"] = *sc
	}
	replicas := instancesToRun(db)
	all, restart := serverParameters(db)
	image := db.Spec.Image
	if image == "" {
		image = opts.Images[string(db.Spec.Engine)+":"+effectiveVersion(db)]
	}
	profile := engine.ProfileOf(db.Spec.Engine)
	return map[string]any{
		"engine":                        string(db.Spec.Engine),
		"port":                          int64(profile.Port),
		"portName":                      profile.PortName,
		"version":                       effectiveVersion(db),
		"image":                         image,
		"replicas":                      int64(replicas),
		"storage":                       storage,
		"resources":                     resourceValues(db.Spec.Resources),
		"credentialsSecret":             credentialsSecretName(db),
		"replicationSecret":             replicationSecretName(db),
		"tls":                           map[string]any{"secretName": tlsSecretName(db), "mountPath": tlsMountPath},
		"operatorNamespace":             opts.OperatorNamespace,
		"networkPolicy":                 networkPolicyValues(db, opts),
		"agentImage":                    opts.OperatorImage,
		"agent":                         map[string]any{"leaseDuration": fmt.Sprintf("%ds", int64(cmp.Or(opts.LeaseDuration, agent.DefaultLeaseDuration)/time.Second))},
		"terminationGracePeriodSeconds": int64(terminationGracePeriod / time.Second),
		"podManagementPolicy":           podManagementPolicy(db),
		"replication": map[string]any{
			"synchronousReplicas":  int64(db.Spec.SynchronousReplicas()),
			"maxSlotWALKeepSizeMB": slotWALBoundMB(db.Spec.Storage.Size),
		},
		"parameters":        all,
		"restartParameters": restart,
		"archive":           archiveValues(db),
	}
}

// podManagementPolicy is OrderedReady (replicas clone from instance 0),
// or Parallel for a Database made over kept volumes, whose instances each
// start on their own data before a primary is chosen (see
// database_adopt.go). The StatefulSet cannot change it later; the
// annotation that decides it stays.
func podManagementPolicy(db *dbv1.Database) string {
	if db.Annotations[keptVolumesAnnotation] != "" {
		return string(appsv1.ParallelPodManagement)
	}
	return string(appsv1.OrderedReadyPodManagement)
}

// serverParameters are spec.parameters by the names the server knows
// them by, all of them (for the configuration file, which a starting
// server reads) and those that take a restart (whose change rolls the
// pods). One the webhook would refuse is left out: the Parameters phase
// reports it.
func serverParameters(db *dbv1.Database) (all, restart map[string]any) {
	all, restart = map[string]any{}, map[string]any{}
	engine := string(db.Spec.Engine)
	for name, v := range db.Spec.Parameters {
		class, err := parameters.Classify(engine, name, v)
		if err != nil {
			continue
		}
		n := parameters.Normalize(engine, name)
		all[n] = v
		if class == parameters.Restart {
			restart[n] = v
		}
	}
	return all, restart
}

// slotWALBoundMB bounds the WAL a PostgreSQL primary keeps for a replica
// that does not take it (down, or far behind): a quarter of the volume,
// at least 64 MB. Past it the replica's slot is lost and it is rebuilt,
// rather than the primary's disk filling up.
func slotWALBoundMB(size resource.Quantity) int64 {
	return max(size.Value()/4/(1<<20), 64)
}

// resourceValues turns resource requirements into chart values. A user who
// sets only limits gets requests equal to them, as Kubernetes itself would
// default, rather than the chart's default requests (which could exceed the
// limits and be refused).
func resourceValues(r corev1.ResourceRequirements) map[string]any {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		r = defaultResources()
	}
	requests := r.Requests
	if len(requests) == 0 {
		requests = r.Limits
	}
	out := map[string]any{"requests": quantities(requests)}
	if len(r.Limits) > 0 {
		out["limits"] = quantities(r.Limits)
	}
	return out
}

func quantities(l corev1.ResourceList) map[string]any {
	m := make(map[string]any, len(l))
	for name, q := range l {
		m[string(name)] = q.String()
	}
	return m
}

// networkPolicyValues are the chart's networkPolicy values: whether to
// render it, the clients spec.network names (as the chart writes them
// into the policy) and the backup and restore Jobs' labels (they reach
// the database port whatever the clients).
func networkPolicyValues(db *dbv1.Database, opts ValueOptions) map[string]any {
	out := map[string]any{"enabled": !opts.NoNetworkPolicy,
		"jobLabels": map[string]any{labelName: JobAppName, labelDatabase: db.Name}}
	if db.Spec.Network == nil || len(db.Spec.Network.Clients) == 0 {
		return out
	}
	out["clients"] = toValues(db.Spec.Network.Clients)
	return out
}
