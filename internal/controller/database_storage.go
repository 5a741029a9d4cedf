package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// A StatefulSet's volumeClaimTemplates are immutable, so growing storage
// takes three steps: expand every existing PVC, delete the StatefulSet while
// orphaning its pods (they keep running and serving), and let the next apply
// recreate it with the larger template; it adopts the running pods again.

// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;patch;delete,namespace=system

// volumeClaimTemplate is the chart's volume claim template: the StatefulSet
// names each instance's volume <template>-<name>-<ordinal>.
const volumeClaimTemplate = "data"

// reconcileStorage grows the volumes when spec.storage.size exceeds the
// size in the live StatefulSet's template. It returns true when it orphaned
// the StatefulSet (the apply that follows recreates it).
func (r *DatabaseReconciler) reconcileStorage(ctx context.Context, db *dbv1.Database) (bool, error) {
	live := &appsv1.StatefulSet{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(live, db) {
		return false, nil
	}
	if !live.DeletionTimestamp.IsZero() {
		return true, nil // an earlier replacement is still in progress
	}
	current, ok := templateStorage(live)
	if !ok {
		return false, nil
	}
	want := db.Spec.Storage.Size
	switch want.Cmp(current) {
	case 0:
		return false, nil
	case -1:
		// CEL refuses shrinking a spec; this guards against an older object.
		return false, fmt.Errorf("storage size %s is smaller than the volumes' %s: volumes never shrink", want.String(), current.String())
	}
	if err := r.checkExpansion(ctx, live); err != nil {
		return false, err
	}

	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.APIReader.List(ctx, pvcs, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return false, fmt.Errorf("listing PersistentVolumeClaims: %w", err)
	}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Spec.Resources.Requests.Storage().Cmp(want) >= 0 {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Spec.Resources.Requests == nil {
			pvc.Spec.Resources.Requests = corev1.ResourceList{}
		}
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		if err := r.Patch(ctx, pvc, patch); err != nil {
			return false, fmt.Errorf("expanding PersistentVolumeClaim %s to %s: %w", pvc.Name, want.String(), err)
		}
	}
	r.event(db, corev1.EventTypeNormal, "VolumesExpanding", "Resize", "Expanding %d volumes from %s to %s", len(pvcs.Items), current.String(), want.String())

	orphan := metav1.DeletePropagationOrphan
	if err := r.Delete(ctx, live, &client.DeleteOptions{
		PropagationPolicy: &orphan,
		Preconditions:     &metav1.Preconditions{UID: &live.UID},
	}); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("replacing StatefulSet %s for the new volume size: %w", live.Name, err)
	}
	return true, nil
}

// checkExpansion fails clearly when the storage class cannot grow volumes,
// before anything is changed.
func (r *DatabaseReconciler) checkExpansion(ctx context.Context, sts *appsv1.StatefulSet) error {
	var class string
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == volumeClaimTemplate && t.Spec.StorageClassName != nil {
			class = *t.Spec.StorageClassName
		}
	}
	if class == "" {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sts.Namespace, Name: "data-" + sts.Name + "-0"}, pvc)
		if err != nil || pvc.Spec.StorageClassName == nil {
			return fmt.Errorf("cannot tell the storage class of the volumes to expand them: %w", err)
		}
		class = *pvc.Spec.StorageClassName
	}
	sc := &storagev1.StorageClass{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: class}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("storage class %s not found: cannot expand volumes", class)
		}
		return fmt.Errorf("reading storage class %s: %w", class, err)
	}
	if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
		return fmt.Errorf("storage class %s does not allow volume expansion: the volumes stay at their size; set allowVolumeExpansion on the class or restore into a new Database", class)
	}
	return nil
}

func templateStorage(sts *appsv1.StatefulSet) (q resource.Quantity, ok bool) {
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == volumeClaimTemplate {
			s, found := t.Spec.Resources.Requests[corev1.ResourceStorage]
			return s, found
		}
	}
	return q, false
}
