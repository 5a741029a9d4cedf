package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// The application account: what an application connects with, in the
// Secret <name>-app. It owns the database "app" and has no superuser,
// replication or READ ONLY ADMIN right, so a replica and a fenced primary
// refuse its writes; the superuser (<name>-credentials) is the operator's.
const (
	appUser     = "app"
	appDatabase = "app"
)

// appAccountRetry is how soon an account that could not be set yet is
// tried again.
const appAccountRetry = 10 * time.Second

func appSecretName(db *dbv1.Database) string { return db.Name + "-app" }

func passwordHash(p string) string {
	h := sha256.Sum256([]byte(p))
	return hex.EncodeToString(h[:])
}

// appSecretData is what an application needs to connect, -rw first.
func appSecretData(db *dbv1.Database, password string) map[string]string {
	host := fmt.Sprintf("%s-rw.%s.svc", db.Name, db.Namespace)
	port := strconv.Itoa(int(enginePort(db.Spec.Engine)))
	scheme := "mysql"
	if db.Spec.Engine == dbv1.EnginePostgreSQL {
		scheme = "postgresql"
	}
	uri := url.URL{Scheme: scheme, User: url.UserPassword(appUser, password), Host: host + ":" + port, Path: "/" + appDatabase}
	return map[string]string{
		corev1.BasicAuthUsernameKey: appUser,
		corev1.BasicAuthPasswordKey: password,
		"host":                      host,
		"port":                      port,
		"database":                  appDatabase,
		"uri":                       uri.String(),
	}
}

// reconcileAppAccount keeps the application Secret and the account on the
// primary in step. It creates the Secret once (a password the user later
// writes there is rotated onto the server), and sets the account on the
// primary when the Secret's password is not the one last set. It needs a
// primary that serves writes: during a restore, a failover or before the
// first start there is nothing to set it on yet, and it looks again soon
// (a server it cannot reach is not a failure of this phase: status says
// whether the primary serves).
func (r *DatabaseReconciler) reconcileAppAccount(ctx context.Context, db *dbv1.Database, obs *observed) error {
	secret, err := r.appSecret(ctx, db)
	if err != nil || secret == nil {
		return err
	}
	password := string(secret.Data[corev1.BasicAuthPasswordKey])
	if password == "" {
		return fmt.Errorf("Secret %s has no password", secret.Name)
	}
	if secret.Annotations[appliedPasswordAnnotation] == passwordHash(password) {
		return nil
	}
	if r.Instances == nil || obs.restoring {
		return nil
	}
	notYet := func(why string) error {
		log.FromContext(ctx).V(1).Info("application account not set yet", "secret", secret.Name, "why", why)
		obs.requeueWithin(appAccountRetry)
		return nil
	}
	primary := primaryName(db, obs)
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	var pod *corev1.Pod
	for i := range pods {
		if pods[i].Name == primary && podReady(&pods[i]) {
			pod = &pods[i]
		}
	}
	if pod == nil {
		return notYet("no ready primary")
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		return notYet(err.Error())
	}
	st, err := inst.Status(ctx)
	if err != nil {
		return notYet(err.Error())
	}
	if st.Role != engine.RolePrimary || st.ReadOnly {
		return notYet(pod.Name + " does not serve writes") // never write through a fence
	}
	if err := inst.EnsureAccount(ctx, engine.Account{User: appUser, Password: password, Database: appDatabase}); err != nil {
		return fmt.Errorf("setting the application account on %s: %w", pod.Name, err)
	}
	log.FromContext(ctx).Info("application account set", "pod", pod.Name, "user", appUser, "secret", secret.Name)
	rotated := secret.Annotations[appliedPasswordAnnotation] != ""
	patch := client.MergeFrom(secret.DeepCopy())
	metav1.SetMetaDataAnnotation(&secret.ObjectMeta, appliedPasswordAnnotation, passwordHash(password))
	// The keys derived from the password (uri) follow a rotated one.
	for k, v := range appSecretData(db, password) {
		secret.Data[k] = []byte(v)
	}
	if err := r.Patch(ctx, secret, patch); err != nil {
		return fmt.Errorf("recording the application password as set: %w", err)
	}
	if rotated {
		r.event(db, corev1.EventTypeNormal, "AppPasswordRotated", "Rotate", "Set the new password of %s from Secret %s on %s", appUser, secret.Name, pod.Name)
	} else {
		r.event(db, corev1.EventTypeNormal, "AppAccountCreated", "Create", "Application account %s with database %s on %s; connection details in Secret %s", appUser, appDatabase, pod.Name, secret.Name)
	}
	return nil
}

// appSecret returns the application Secret, or nil when it was created
// just now (its watch brings the next reconcile, which sets the account).
// A Secret of that name that is not this Database's is left alone and
// reported.
func (r *DatabaseReconciler) appSecret(ctx context.Context, db *dbv1.Database) (*corev1.Secret, error) {
	secret, created, err := r.getOrCreateSecret(ctx, db, appSecretName(db), func(password string) map[string]string {
		return appSecretData(db, password)
	})
	if err != nil || created {
		return nil, err
	}
	if !metav1.IsControlledBy(secret, db) {
		return nil, fmt.Errorf("Secret %s exists and is not this Database's; delete it or choose another Database name", secret.Name)
	}
	return secret, nil
}
