package v1

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// ReasonAuditImageChange is the audit Event of a spec.image change.
const ReasonAuditImageChange = "AuditImageChange"

// ImagePolicy is the rule on spec.image. The image replaces the one the
// engine and version select, and whatever it names runs with the data and
// the superuser's password.
// Every change is recorded with the user who made it; with allowed
// prefixes (the manager's --allowed-image-prefixes) an image outside them
// is refused. An image that did not change is not judged again.
func ImagePolicy(allowed []string) Rule {
	return func(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
		before := ""
		if old != nil {
			before = old.Spec.Image
		}
		if db.Spec.Image == before {
			return nil, nil, nil
		}
		note := fmt.Sprintf("spec.image changed from %q to %q", before, db.Spec.Image)
		if db.Spec.Image != "" && len(allowed) > 0 && !hasAnyPrefix(db.Spec.Image, allowed) {
			return nil, field.ErrorList{field.Forbidden(field.NewPath("spec", "image"),
				fmt.Sprintf("%s is not under an allowed image prefix (%s): use an image from one of them, or leave spec.image empty for the operator's own",
					db.Spec.Image, strings.Join(allowed, ", ")))}, nil
		}
		return nil, nil, []Audit{{Reason: ReasonAuditImageChange, Note: note}}
	}
}

// CheckImagePrefixes refuses an allowed prefix that does not end in "/":
// "registry.example" would also allow "registry.example.evil/...".
func CheckImagePrefixes(prefixes []string) error {
	for _, p := range prefixes {
		if !strings.HasSuffix(p, "/") {
			return fmt.Errorf("allowed image prefix %q must end in '/' (a registry host, or a repository path under it), or it would also allow %q", p, p+".elsewhere/...")
		}
	}
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
