package v1

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// Defaults the webhook writes into spec (the controller applies the same
// when they are missing).
const (
	DefaultCPURequest          = "100m"
	DefaultMemoryRequest       = "256Mi"
	DefaultFailoverDelaySecond = int32(10)
)

// DatabaseDefaulter fills in what a user left out of a Database's spec.
type DatabaseDefaulter struct{}

var _ admission.Defaulter[*dbv1.Database] = &DatabaseDefaulter{}

// Default sets spec.version, spec.resources and spec.failover when empty.
func (d *DatabaseDefaulter) Default(ctx context.Context, db *dbv1.Database) error {
	if db.Spec.Version == "" {
		v, err := versionFor(ctx, db)
		if err != nil {
			return err
		}
		db.Spec.Version = v
	}
	if equality.Semantic.DeepEqual(db.Spec.Resources, corev1.ResourceRequirements{}) {
		db.Spec.Resources = DefaultResources()
	}
	if db.Spec.Failover.Enabled == nil {
		enabled := true
		db.Spec.Failover.Enabled = &enabled
	}
	if db.Spec.Failover.DelaySeconds == nil {
		delay := DefaultFailoverDelaySecond
		db.Spec.Failover.DelaySeconds = &delay
	}
	return nil
}

// DefaultResources are the requests of a Database that sets no resources.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(DefaultCPURequest),
		corev1.ResourceMemory: resource.MustParse(DefaultMemoryRequest),
	}}
}

// versionFor is the version an empty spec.version becomes. On create: the
// engine's default. On update (an object written while the webhook was
// down, whose version the controller chose and recorded in status): the
// version it already runs, so that a newer operator's newer default never
// upgrades a running database behind its owner's back (for PostgreSQL that
// would be an in-place major change the data directory cannot take). An
// update without the version that was set (a manifest re-applied by GitOps
// or kubectl replace that never named one) keeps it: omitted means
// unchanged, never "move to the default".
func versionFor(ctx context.Context, db *dbv1.Database) (string, error) {
	if req, err := admission.RequestFromContext(ctx); err == nil && req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old := &dbv1.Database{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return "", fmt.Errorf("decoding the stored Database: %w", err)
		}
		if old.Spec.Version != "" {
			return old.Spec.Version, nil
		}
		if v := old.Status.Version; v != "" && dbv1.IsSupportedVersion(db.Spec.Engine, v) {
			return v, nil
		}
	}
	return dbv1.DefaultVersion(db.Spec.Engine), nil
}
