package v1

import (
	"context"
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// MutatePath is where the defaulting webhook is served (the path the
// builder would choose, and config/webhook names).
const MutatePath = "/mutate-example-com-v1-database"

// sparseDefaulter serves a Defaulter so that its patch touches only the
// fields it defaulted. controller-runtime's typed defaulting webhook
// re-encodes the whole object: for an incomplete or malformed request (no
// engine, no storage, a size that is no quantity) it would patch in zero
// values or deny with a decoding error, and the user would get that instead
// of the schema's message saying what is missing. Here a request the typed
// object cannot hold is let through unchanged for the schema to refuse.
type sparseDefaulter struct {
	defaulter admission.Defaulter[*dbv1.Database]
}

func (h *sparseDefaulter) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var obj map[string]any
	db := &dbv1.Database{}
	if json.Unmarshal(req.Object.Raw, &obj) != nil || json.Unmarshal(req.Object.Raw, db) != nil {
		return admission.Allowed("the schema decides")
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return admission.Allowed("the schema decides")
	}
	defaulted := db.DeepCopy()
	if err := h.defaulter.Default(admission.NewContextWithRequest(ctx, req), defaulted); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	was, now := db.Spec, defaulted.Spec
	if now.Version != was.Version {
		spec["version"] = now.Version
	}
	if !equality.Semantic.DeepEqual(now.Resources, was.Resources) {
		r, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&now.Resources)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		spec["resources"] = r
	}
	if !equality.Semantic.DeepEqual(now.Failover, was.Failover) {
		failover, _ := spec["failover"].(map[string]any)
		if failover == nil {
			failover = map[string]any{}
		}
		if now.Failover.Enabled != nil && was.Failover.Enabled == nil {
			failover["enabled"] = *now.Failover.Enabled
		}
		if now.Failover.DelaySeconds != nil && was.Failover.DelaySeconds == nil {
			failover["delaySeconds"] = int64(*now.Failover.DelaySeconds)
		}
		spec["failover"] = failover
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, out)
}
