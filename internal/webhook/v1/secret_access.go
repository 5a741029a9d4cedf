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

// secretAccess refuses a backup target that names a Secret the requesting
// user may not read. The backup Job, which the operator creates, reads the
// Secret and sends it with every dump to the target's endpoint: without
// this check anyone who may write a Backup or a Database could have any
// Secret of the namespace sent anywhere (a confused deputy). The API
// server answers a SubjectAccessReview for the user of the request.
func secretAccess(ctx context.Context, c client.Client, namespace string, path *field.Path, target dbv1.BackupTarget) field.ErrorList {
	secrets := target.Secrets()
	if len(secrets) == 0 {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return field.ErrorList{field.InternalError(path, fmt.Errorf("no admission request to take the requesting user from: %w", err))}
	}
	user := req.UserInfo
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	var errs field.ErrorList
	for _, s := range secrets {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets", Name: s.Name},
		}}
		if err := c.Create(ctx, review); err != nil {
			errs = append(errs, field.InternalError(path, fmt.Errorf("asking whether %s may read Secret %s: %w", user.Username, s.Name, err)))
			continue
		}
		if !review.Status.Allowed {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf(
				"%s may not get Secret %s in namespace %s, and a backup target sends the Secrets it names to its endpoint: name a Secret you may read, or ask someone who may to set the target",
				user.Username, s.Name, namespace)))
		}
	}
	return errs
}
