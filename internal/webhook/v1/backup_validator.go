package v1

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// ReasonAuditBackupRequested is the audit Event of an admitted Backup.
const ReasonAuditBackupRequested = "AuditBackupRequested"

// BackupValidator admits Backups. A Backup with a target of its own needs
// what targetAccess asks: the Job the operator creates for it sends the
// target's Secrets and the Database's data to the target's endpoint. (The endpoint's scheme is the CRD's rule: plain http:// only
// with allowInsecureHTTP.) Each admitted Backup is recorded with an Event
// naming who asked for it.
type BackupValidator struct {
	// Client asks the API server for SubjectAccessReviews.
	Client client.Client
	// Recorder records the audit Events (nil: none).
	Recorder events.EventRecorder

	recorded recentSet
}

var _ admission.Validator[*dbv1.Backup] = &BackupValidator{}

// ValidateCreate checks a new Backup.
func (v *BackupValidator) ValidateCreate(ctx context.Context, b *dbv1.Backup) (admission.Warnings, error) {
	return v.validate(ctx, nil, b)
}

// ValidateUpdate checks a Backup whose spec changed; metadata-only updates
// pass, as for Databases.
func (v *BackupValidator) ValidateUpdate(ctx context.Context, old, b *dbv1.Backup) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(old.Spec, b.Spec) {
		return nil, nil
	}
	return v.validate(ctx, old, b)
}

// ValidateDelete admits every deletion.
func (v *BackupValidator) ValidateDelete(context.Context, *dbv1.Backup) (admission.Warnings, error) {
	return nil, nil
}

func (v *BackupValidator) validate(ctx context.Context, old, b *dbv1.Backup) (admission.Warnings, error) {
	target := "the Database's own target"
	if t := b.Spec.Target; t != nil {
		target = describeTarget(*t)
		if old == nil || old.Spec.Target == nil || !equality.Semantic.DeepEqual(*t, *old.Spec.Target) {
			if errs := targetAccess(ctx, v.Client, b.Namespace, b.Spec.Database.Name, field.NewPath("spec", "target"), *t); len(errs) > 0 {
				return nil, apierrors.NewInvalid(dbv1.GroupVersion.WithKind("Backup").GroupKind(), b.Name, errs)
			}
		}
	}
	if old == nil {
		recordAudits(ctx, v.Recorder, &v.recorded, b, []Audit{{Reason: ReasonAuditBackupRequested,
			Note: fmt.Sprintf("Backup %s of Database %s to %s requested", b.Name, b.Spec.Database.Name, target)}})
	}
	return nil, nil
}

// describeTarget names where a target sends the backups.
func describeTarget(t dbv1.BackupTarget) string {
	switch {
	case t.S3 != nil:
		return fmt.Sprintf("bucket %s at %s", t.S3.Bucket, t.S3.Endpoint)
	case t.Volume != nil && t.Volume.ClaimName != "":
		return "volume " + t.Volume.ClaimName
	default:
		return "the Database's backup volume"
	}
}
