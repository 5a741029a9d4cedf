package v1

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// targetAccess refuses a backup target that would let the requesting user
// do, through the operator, what they may not do themselves (the operator
// as a confused deputy). The backup Job the operator creates
//   - reads the target's Secrets and sends them, with every dump, to the
//     target's endpoint: the user must be allowed to get each of them;
//   - sends the whole of the Database's data there: the user must be
//     allowed to get the Database's credentials Secret, which gives the
//     same access;
//   - mounts the target's volume claim: the user must be allowed to create
//     pods, which can mount any claim of the namespace.
//
// The API server answers a SubjectAccessReview for the request's user.
func targetAccess(ctx context.Context, c client.Client, namespace, database string, path *field.Path, target dbv1.BackupTarget) field.ErrorList {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return field.ErrorList{field.InternalError(path, fmt.Errorf("no admission request to take the requesting user from: %w", err))}
	}
	type need struct {
		attrs authorizationv1.ResourceAttributes
		why   string
	}
	needs := []need{{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Name: dbv1.CredentialsSecretName(database)},
		"and a backup target receives all of Database " + database + "'s data"}}
	for _, s := range target.Secrets() {
		needs = append(needs, need{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Name: s.Name},
			"and a backup target sends the Secrets it names to its endpoint"})
	}
	if v := target.Volume; v != nil && v.ClaimName != "" {
		needs = append(needs, need{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods"},
			"and a backup target mounts the claim " + v.ClaimName + " as a pod of theirs could"})
	}
	user := req.UserInfo
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	var errs field.ErrorList
	for _, n := range needs {
		attrs := n.attrs
		attrs.Namespace = namespace
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra, ResourceAttributes: &attrs}}
		if err := c.Create(ctx, review); err != nil {
			errs = append(errs, field.InternalError(path, fmt.Errorf("asking whether %s may %s %s: %w", user.Username, attrs.Verb, what(attrs), err)))
			continue
		}
		if !review.Status.Allowed {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("%s may not %s %s in namespace %s, %s: ask someone who may to set this target",
				user.Username, attrs.Verb, what(attrs), namespace, n.why)))
		}
	}
	return errs
}

func what(a authorizationv1.ResourceAttributes) string {
	if a.Name == "" {
		return a.Resource
	}
	return a.Resource + "/" + a.Name
}
