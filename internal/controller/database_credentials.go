package controller

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// newPassword returns 32 random characters from crypto/rand, from an
// alphabet that needs no quoting in a connection string or shell.
func newPassword() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating password: %w", err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)] // 256 % 62 bias is negligible at 32 chars (~190 bits)
	}
	return string(b), nil
}

// reconcileCredentials makes sure the superuser Secret exists. It is created
// once and never rewritten: the password lives in the data directory too. A
// Secret left behind by a deleted Database of the same name (deletionPolicy
// Retain keeps it with the volumes) is adopted, so recreating the Database
// reuses both the data and its password.
//
// The replication account's Secret is kept the same way: the servers' start
// scripts read both (the pods cannot start without them).
func (r *DatabaseReconciler) reconcileCredentials(ctx context.Context, db *dbv1.Database, _ *observed) error {
	if err := r.keepCredentials(ctx, db, credentialsSecretName(db), engine.ProfileOf(db.Spec.Engine).Superuser, "superuser", false); err != nil {
		return err
	}
	// Immutable: each replica reads the replication password when it
	// starts, so a password changed under running replicas would stop
	// their streaming at the next reconnect; the API server refuses the
	// edit instead.
	return r.keepCredentials(ctx, db, replicationSecretName(db), engine.ReplicationUser, "replication account", true)
}

func (r *DatabaseReconciler) keepCredentials(ctx context.Context, db *dbv1.Database, name, user, what string, immutable bool) error {
	secret, created, err := r.getOrCreateSecret(ctx, db, name, immutable, func(password string) map[string]string {
		return map[string]string{corev1.BasicAuthUsernameKey: user, corev1.BasicAuthPasswordKey: password}
	})
	if err != nil {
		return err
	}
	if created {
		r.event(db, corev1.EventTypeNormal, "CredentialsCreated", "Create", "Generated %s credentials in Secret %s", what, secret.Name)
		return nil
	}
	key := client.ObjectKeyFromObject(secret)
	if metav1.IsControlledBy(secret, db) {
		return nil
	}
	if owner := metav1.GetControllerOf(secret); owner != nil {
		return fmt.Errorf("Secret %s is controlled by %s %s; rename or delete it", key.Name, owner.Kind, owner.Name)
	}
	if secret.Labels[labelInstance] != db.Name || secret.Labels[labelManagedBy] != managedBy {
		return fmt.Errorf("Secret %s exists and was not made by this operator; delete it or choose another Database name", key.Name)
	}
	patch := client.MergeFrom(secret.DeepCopy())
	if err := controllerutil.SetControllerReference(db, secret, r.Scheme); err != nil {
		return err
	}
	if err := r.Patch(ctx, secret, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("adopting Secret %s: %w", key.Name, err)
	}
	r.event(db, corev1.EventTypeNormal, "CredentialsAdopted", "Adopt", "Reusing the retained credentials in Secret %s", key.Name)
	return nil
}

// getOrCreateSecret returns db's basic-auth Secret name, creating it (owned
// by db, with a new password given to data, immutable if asked) when there
// is none; created says it was made now.
func (r *DatabaseReconciler) getOrCreateSecret(ctx context.Context, db *dbv1.Database, name string, immutable bool, data func(password string) map[string]string) (secret *corev1.Secret, created bool, err error) {
	secret = &corev1.Secret{}
	err = r.getSecret(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, false, fmt.Errorf("reading Secret %s: %w", name, err)
	default:
		return secret, false, nil
	}
	password, err := newPassword()
	if err != nil {
		return nil, false, err
	}
	secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: instanceLabels(db)},
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{},
	}
	if immutable {
		secret.Immutable = &immutable
	}
	for k, v := range data(password) {
		secret.Data[k] = []byte(v)
	}
	if err := controllerutil.SetControllerReference(db, secret, r.Scheme); err != nil {
		return nil, false, err
	}
	if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); err != nil {
		return nil, false, fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return secret, true, nil
}

// getSecret reads a Secret from the cache, and from the API server when the
// cache has none: the cache holds only Secrets labelled as ours, and a
// foreign Secret of the name must be noticed before one is created.
func (r *DatabaseReconciler) getSecret(ctx context.Context, key client.ObjectKey, secret *corev1.Secret) error {
	err := r.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, secret)
	}
	return err
}

// instanceLabels are the labels of objects the Go code creates itself.
func instanceLabels(db *dbv1.Database) map[string]string {
	l := selectorLabels(db)
	l[labelManagedBy] = managedBy
	return l
}
