package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/parameters"
)

// reconcileParameters applies the spec.parameters a running server takes
// (parameters.Reload) to every started instance whose pod does not record
// them as applied; those the server reads only at start are in its
// configuration file, whose change rolls the pods (the Rollout phase).
// A setting the server refuses is an error naming it, and the pod keeps
// its record, so it is tried again.
func (r *DatabaseReconciler) reconcileParameters(ctx context.Context, db *dbv1.Database, obs *observed) error {
	want, errs := reloadParameters(db)
	if r.Instances == nil || obs.restoring {
		return errors.Join(errs...)
	}
	applied := parametersHash(want)
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	var took []string
	// One Event for all pods: the recorder folds like Events into one.
	defer func() {
		if len(took) > 0 {
			r.event(db, corev1.EventTypeNormal, "ParametersApplied", "Reload", "%s, without a restart", strings.Join(took, "; "))
		}
	}()
	for i := range pods {
		pod := &pods[i]
		if !pod.DeletionTimestamp.IsZero() || !podStarted(pod) || pod.Annotations[appliedParametersAnnotation] == applied {
			continue
		}
		inst, err := obs.instances.get(ctx, pod)
		if err != nil {
			// Not reachable now (status says so): tried again soon.
			log.FromContext(ctx).V(1).Info("parameters not applied yet", "pod", pod.Name, "why", err.Error())
			obs.requeueWithin(appAccountRetry)
			continue
		}
		changed, err := inst.ApplyParameters(ctx, want)
		if len(changed) > 0 {
			log.FromContext(ctx).Info("parameters applied without a restart", "pod", pod.Name, "changed", changed)
			took = append(took, fmt.Sprintf("%s took %v", pod.Name, changed))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("applying spec.parameters on %s: %w", pod.Name, err))
			continue
		}
		if err := r.recordParameters(ctx, pod, applied); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reloadParameters are the spec.parameters a running server takes, by
// the names it knows them by, and an error for each the webhook would
// have refused (a Database written while it was not running).
func reloadParameters(db *dbv1.Database) (map[string]string, []error) {
	engine := string(db.Spec.Engine)
	want := map[string]string{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(db.Spec.Parameters)) {
		class, err := parameters.Classify(engine, name, db.Spec.Parameters[name])
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("spec.parameters[%s]: %w", name, err))
		case class == parameters.Reload:
			want[parameters.Normalize(engine, name)] = db.Spec.Parameters[name]
		}
	}
	return want, errs
}

// parametersHash names a set of applied settings; "none" for the empty
// set, so a new pod (no record) is still checked once: its volume may
// hold settings a removed parameter left.
func parametersHash(want map[string]string) string {
	if len(want) == 0 {
		return "none"
	}
	b, _ := json.Marshal(want) // sorted keys
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// recordParameters notes on the pod which settings its server took. A
// merge patch, not an apply: the role label's apply must keep owning the
// pod's labels alone. The UID guards a pod of the same name that replaced
// this one.
func (r *DatabaseReconciler) recordParameters(ctx context.Context, pod *corev1.Pod, applied string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{appliedParametersAnnotation: applied},
	}})
	if err := r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("recording the applied parameters on pod %s: %w", pod.Name, err)
	}
	return nil
}
