package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
)

// finalize runs when a Database is being deleted. Retain keeps the volumes
// and the credentials Secret (released from the Database so the garbage
// collector leaves it); Delete deletes the volumes. Everything else the
// Database owns goes with it through owner references.
//
// It returns how soon to look again when it must wait (the StatefulSet
// going away before the volumes are deleted).
func (r *DatabaseReconciler) finalize(ctx context.Context, db *dbv1.Database) (time.Duration, error) {
	if !controllerutil.ContainsFinalizer(db, Finalizer) {
		return 0, nil
	}
	r.Positions.forget(db.UID)
	r.Rollouts.release(db.UID)
	r.BackupMetrics.forget(db.Namespace, db.Name)
	r.Metrics.forget(db.Namespace, db.Name)
	policy := db.Spec.DeletionPolicy
	if policy == "" {
		policy = dbv1.DeletionPolicyRetain
	}
	switch policy {
	case dbv1.DeletionPolicyDelete:
		// The StatefulSet goes first: while it exists its controller makes
		// the claim of an instance it has not created yet (ordered start),
		// after the claims were deleted, and that volume would outlive the
		// Database.
		if gone, err := r.statefulSetGone(ctx, db); err != nil || !gone {
			return time.Second, err
		}
		n, err := r.deleteVolumes(ctx, db)
		if err != nil {
			return 0, err
		}
		r.event(db, corev1.EventTypeNormal, "VolumesDeleted", "Delete", "Deleted %d PersistentVolumeClaims (deletionPolicy Delete)", n)
	default:
		if err := r.releaseCredentials(ctx, db); err != nil {
			return 0, err
		}
		r.event(db, corev1.EventTypeNormal, "VolumesRetained", "Retain",
			"Kept the PersistentVolumeClaims and Secret %s (deletionPolicy Retain)", credentialsSecretName(db))
	}
	patch := client.MergeFrom(db.DeepCopy())
	controllerutil.RemoveFinalizer(db, Finalizer)
	if err := r.Patch(ctx, db, patch); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("removing finalizer: %w", err)
	}
	return 0, nil
}

// statefulSetGone deletes db's StatefulSet (its pods go with it, through
// the garbage collector; the claims stay, as its retention policy says)
// and tells whether it is gone, read from the API server.
func (r *DatabaseReconciler) statefulSetGone(ctx context.Context, db *dbv1.Database) (bool, error) {
	sts := &appsv1.StatefulSet{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading StatefulSet %s: %w", db.Name, err)
	case !sts.DeletionTimestamp.IsZero():
		return false, nil
	case !metav1.IsControlledBy(sts, db):
		return true, nil // not ours: its claims are not the Database's either (isVolumeOf)
	}
	if err := r.Delete(ctx, sts, client.Preconditions{UID: &sts.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("deleting StatefulSet %s before its volumes: %w", db.Name, err)
	}
	log.FromContext(ctx).Info("deleted the StatefulSet before the volumes (deletionPolicy Delete)", "statefulset", sts.Name)
	return false, nil
}

// deleteVolumes deletes the Database's PVCs. It lists them from the API
// server, not the cache: the operator does not watch PVCs, and deleting data
// must not act on a stale view.
func (r *DatabaseReconciler) deleteVolumes(ctx context.Context, db *dbv1.Database) (int, error) {
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.APIReader.List(ctx, pvcs, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return 0, fmt.Errorf("listing PersistentVolumeClaims: %w", err)
	}
	n := 0
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		if !isVolumeOf(db, pvc) {
			// The labels are the common app.kubernetes.io ones: another
			// chart's volume may carry them too.
			log.FromContext(ctx).Info("left a PersistentVolumeClaim that carries the Database's labels but is none of its volumes", "pvc", pvc.Name)
			continue
		}
		if err := r.Delete(ctx, pvc); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting PersistentVolumeClaim %s: %w", pvc.Name, err)
		}
		n++
	}
	return n, nil
}

// isVolumeOf tells the Database's own volumes: the StatefulSet's claims
// (named data-<name>-<ordinal>), owned by nothing else.
func isVolumeOf(db *dbv1.Database, pvc *corev1.PersistentVolumeClaim) bool {
	ordinal, ok := strings.CutPrefix(pvc.Name, volumeClaimTemplate+"-"+db.Name+"-")
	if !ok || ordinal == "" || (len(ordinal) > 1 && ordinal[0] == '0') || strings.Trim(ordinal, "0123456789") != "" {
		return false
	}
	for _, ref := range pvc.OwnerReferences {
		// A StatefulSet's claim retention policy makes it the owner; any
		// other owner means someone else's volume.
		if ref.UID != db.UID && (ref.Kind != "StatefulSet" || ref.Name != db.Name) {
			return false
		}
	}
	return true
}

// releaseCredentials drops the Database's owner reference from its
// superuser and replication Secrets, so the retained data stays usable
// (both passwords live in it).
func (r *DatabaseReconciler) releaseCredentials(ctx context.Context, db *dbv1.Database) error {
	if err := r.releaseSecret(ctx, db, credentialsSecretName(db)); err != nil {
		return err
	}
	return r.releaseSecret(ctx, db, replicationSecretName(db))
}

func (r *DatabaseReconciler) releaseSecret(ctx context.Context, db *dbv1.Database, name string) error {
	secret := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(secret, db) {
		return nil
	}
	patch := client.MergeFrom(secret.DeepCopy())
	var refs []metav1.OwnerReference
	for _, ref := range secret.OwnerReferences {
		if ref.UID != db.UID {
			refs = append(refs, ref)
		}
	}
	secret.OwnerReferences = refs
	if err := r.Patch(ctx, secret, patch); err != nil {
		return fmt.Errorf("releasing Secret %s: %w", secret.Name, err)
	}
	return nil
}
