package v1

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// ScalePath is where scale-subresource changes are validated.
const ScalePath = "/validate-example-com-v1-database-scale"

// +kubebuilder:webhook:path=/validate-example-com-v1-database-scale,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=example.com,resources=databases/scale,verbs=update,versions=v1,name=vdatabasescale-v1.example.com,admissionReviewVersions=v1,timeoutSeconds=10

// scaleValidator applies the Database's rules to `kubectl scale` (the
// scale subresource, an autoscaling/v1 Scale that a webhook on databases
// never sees): the same refusal during a failover, the same warning and
// audit Event on a scale-down.
type scaleValidator struct {
	// reader reads the Database as stored (not from a cache: the rules
	// depend on its latest status).
	reader    client.Reader
	validator *DatabaseValidator
}

func (h *scaleValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var scale, oldScale autoscalingv1.Scale
	if err := json.Unmarshal(req.Object.Raw, &scale); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Scale: %w", err))
	}
	if err := json.Unmarshal(req.OldObject.Raw, &oldScale); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the old Scale: %w", err))
	}
	old := &dbv1.Database{}
	if err := h.reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, old); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading Database %s/%s: %w", req.Namespace, req.Name, err))
	}
	old.Spec.Replicas = oldScale.Spec.Replicas
	db := old.DeepCopy()
	db.Spec.Replicas = scale.Spec.Replicas
	warnings, err := h.validator.validate(admission.NewContextWithRequest(ctx, req), old, db)
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			s := status.Status()
			return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &s, Warnings: warnings}}
		}
		return admission.Denied(err.Error()).WithWarnings(warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}
