package v1

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// BackupTargetSecrets refuses a backup target (spec.backup.target, or the
// target of spec.bootstrap.source) that would let the requesting user read
// through the operator what they may not read themselves (see
// targetAccess), or whose S3 credentials or CA Secret
// does not exist in the Database's namespace or lacks a key: the first
// backup (or the restore) would fail. It needs the API server's state, so
// it is a webhook rule, not CEL. r reads the Secrets; c asks the API server
// about the user's access. A target that did not change is not checked
// again (a Secret rotated away later is the backup's failure to report, not
// a reason to refuse unrelated updates).
func BackupTargetSecrets(r client.Reader, c client.Client) Rule {
	return func(ctx context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
		var errs field.ErrorList
		check := func(path *field.Path, target, before *dbv1.BackupTarget) {
			if target == nil || (before != nil && equality.Semantic.DeepEqual(*target, *before)) {
				return
			}
			if denied := targetAccess(ctx, c, db.Namespace, db.Name, path, *target); len(denied) > 0 {
				errs = append(errs, denied...)
				return // whether a Secret exists is not told to whom may not read it
			}
			for _, s := range target.Secrets() {
				if msg := missingKeys(ctx, r, db.Namespace, s.Name, s.Keys); msg != "" {
					errs = append(errs, field.Invalid(path.Child("s3"), s.Name, msg))
				}
			}
		}
		var oldBackup, oldSource *dbv1.BackupTarget
		if old != nil && old.Spec.Backup != nil {
			oldBackup = &old.Spec.Backup.Target
		}
		if old != nil && old.Spec.Bootstrap != nil && old.Spec.Bootstrap.Source != nil {
			oldSource = &old.Spec.Bootstrap.Source.Target
		}
		if db.Spec.Backup != nil {
			check(field.NewPath("spec", "backup", "target"), &db.Spec.Backup.Target, oldBackup)
		}
		if bs := db.Spec.Bootstrap; bs != nil && bs.Source != nil {
			check(field.NewPath("spec", "bootstrap", "source", "target"), &bs.Source.Target, oldSource)
		}
		return nil, errs, nil
	}
}

// missingKeys says what is wrong with a Secret, or "" when it has the keys.
func missingKeys(ctx context.Context, r client.Reader, namespace, name string, keys []string) string {
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Secret %s does not exist in namespace %s: create it (keys %s) before referring to it", name, namespace, strings.Join(keys, ", "))
		}
		return fmt.Sprintf("Secret %s could not be read: %v", name, err)
	}
	var missing []string
	for _, k := range keys {
		if len(s.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("Secret %s has no key(s) %s: add them, or name the keys it has in credentialsSecret", name, strings.Join(missing, ", "))
	}
	return ""
}
