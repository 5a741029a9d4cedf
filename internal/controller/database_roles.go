package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// primaryName is the pod that should carry the primary role: the one a
// failover in this reconcile promoted, else the one status records, else
// the one chosen among kept volumes, else instance 0 for a new Database.
func primaryName(db *dbv1.Database, obs *observed) string {
	switch {
	case obs != nil && obs.promoted != "":
		return obs.promoted
	case db.Status.CurrentPrimary != "":
		return db.Status.CurrentPrimary
	case obs != nil && obs.recorded != "":
		return obs.recorded
	}
	return db.Name + "-0"
}

// reconcileRoles puts the role label on every instance pod: primary on the
// primary, replica on the rest. The read-write and read-only Services select
// on it. Only the label is applied (server-side, the operator's field owner),
// and only on pods where it is wrong. Every other pod loses the primary
// label before the primary gets it, and the primary gets it only when they
// all did: -rw never selects two pods, even for a moment.
func (r *DatabaseReconciler) reconcileRoles(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if obs.restoring {
		// No endpoint before the backup is loaded: neither the read-write
		// one nor read-only replicas of partial data.
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	primary := primaryName(db, obs)
	var errs []error
	var primaryPod *corev1.Pod
	for i := range pods {
		pod := &pods[i]
		switch {
		case !pod.DeletionTimestamp.IsZero():
		case pod.Name == primary:
			primaryPod = pod
		default:
			if err := r.setPodRole(ctx, db, pod, roleReplica); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; %s keeps its label until every other pod lost the primary one", errors.Join(errs...), primary)
	}
	if primaryPod != nil {
		return r.setPodRole(ctx, db, primaryPod, rolePrimary)
	}
	return nil
}

// setPodRole labels pod with role unless it has it already.
func (r *DatabaseReconciler) setPodRole(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, role string) error {
	if pod.Labels[labelRole] == role {
		return nil
	}
	if err := r.applyPodRole(ctx, pod, role); err != nil {
		return err
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[labelRole] = role // status, computed next, sees the label it now has
	r.event(db, corev1.EventTypeNormal, "RoleAssigned", "Label", "Pod %s is now %s", pod.Name, role)
	return nil
}

func (r *DatabaseReconciler) applyPodRole(ctx context.Context, pod *corev1.Pod, role string) error {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	u.SetNamespace(pod.Namespace)
	u.SetName(pod.Name)
	u.SetUID(pod.UID) // never label a pod of the same name that replaced this one
	u.SetLabels(map[string]string{labelRole: role})
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("labelling pod %s %s: %w", pod.Name, role, err)
	}
	return nil
}

// instancePods lists the Database's pods once per reconcile (from the
// cache) and keeps them in obs for the phases after and for status.
func (r *DatabaseReconciler) instancePods(ctx context.Context, db *dbv1.Database, obs *observed) ([]corev1.Pod, error) {
	if obs.podsListed {
		return obs.pods, nil
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	obs.pods, obs.podsListed = pods.Items, true
	return obs.pods, nil
}
