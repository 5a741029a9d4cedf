package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// monitoringSecretName is the Secret of the monitoring account, which
// reads server and replication state (metrics) and no table.
func monitoringSecretName(db *dbv1.Database) string { return db.Name + "-monitoring" }

func passwordHash(p string) string {
	h := sha256.Sum256([]byte(p))
	return hex.EncodeToString(h[:])
}

// appSecretData is what an application needs to connect, -rw first.
func appSecretData(db *dbv1.Database, password string) map[string]string {
	host := fmt.Sprintf("%s-rw.%s.svc", db.Name, db.Namespace)
	profile := engine.ProfileOf(db.Spec.Engine)
	port := strconv.Itoa(int(profile.Port))
	uri := url.URL{Scheme: profile.Scheme, User: url.UserPassword(appUser, password), Host: host + ":" + port, Path: "/" + appDatabase}
	return map[string]string{
		corev1.BasicAuthUsernameKey: appUser,
		corev1.BasicAuthPasswordKey: password,
		"host":                      host,
		"port":                      port,
		"database":                  appDatabase,
		"uri":                       uri.String(),
	}
}

// reconcileAccounts keeps the generated accounts in step with their
// Secrets: the application account (<name>-app, created here once; a
// password the user later writes there is rotated onto the server), the
// monitoring account (<name>-monitoring, the same way) and the
// replication account (<name>-replication, created by the Credentials
// phase: the start scripts create the account with a new primary, and
// this sets it on a primary made before, or with a new password). An
// account is set on the primary when its Secret's password is not the one
// last set. That needs a primary that serves writes: during a restore, a
// failover or before the first start there is nothing to set it on yet,
// and it looks again soon (a server it cannot reach is not a failure of
// this phase: status says whether the primary serves).
func (r *DatabaseReconciler) reconcileAccounts(ctx context.Context, db *dbv1.Database, obs *observed) error {
	app, err := r.appSecret(ctx, db)
	if err != nil {
		return err
	}
	var errs []error
	if app != nil {
		errs = append(errs, r.keepAccount(ctx, db, obs, app, engine.Account{User: appUser, Database: appDatabase}))
	}
	mon, created, err := r.getOrCreateSecret(ctx, db, monitoringSecretName(db), false, func(password string) map[string]string {
		return map[string]string{corev1.BasicAuthUsernameKey: engine.MonitoringUser, corev1.BasicAuthPasswordKey: password}
	})
	switch {
	case err != nil:
		errs = append(errs, err)
	case created:
		r.event(db, corev1.EventTypeNormal, "CredentialsCreated", "Create", "Generated monitoring account credentials in Secret %s", mon.Name)
		obs.requeueWithin(appAccountRetry) // set once the cache holds it
	default:
		errs = append(errs, r.keepAccount(ctx, db, obs, mon, engine.Account{User: engine.MonitoringUser, Monitoring: true}))
	}
	repl := &corev1.Secret{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: replicationSecretName(db)}, repl); {
	case apierrors.IsNotFound(err):
		// Created by the Credentials phase just now: not in the cache yet.
		obs.requeueWithin(appAccountRetry)
	case err != nil:
		errs = append(errs, fmt.Errorf("reading Secret %s: %w", replicationSecretName(db), err))
	default:
		errs = append(errs, r.keepAccount(ctx, db, obs, repl, engine.Account{User: engine.ReplicationUser, Replication: true}))
	}
	return errors.Join(errs...)
}

// keepAccount sets acct, with the password of its Secret, on the primary
// unless that password is the one last set.
func (r *DatabaseReconciler) keepAccount(ctx context.Context, db *dbv1.Database, obs *observed, secret *corev1.Secret, acct engine.Account) error {
	acct.Password = string(secret.Data[corev1.BasicAuthPasswordKey])
	if acct.Password == "" {
		return fmt.Errorf("Secret %s has no password", secret.Name)
	}
	if secret.Annotations[appliedPasswordAnnotation] == passwordHash(acct.Password) {
		return nil
	}
	if r.Instances == nil || obs.restoring {
		return nil
	}
	notYet := func(why string) error {
		log.FromContext(ctx).V(1).Info("account not set yet", "user", acct.User, "secret", secret.Name, "why", why)
		obs.requeueWithin(appAccountRetry)
		return nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	// Never written through a fence.
	pod, inst, st, err := writablePrimary(ctx, db, obs, pods)
	if err != nil {
		return notYet(err.Error())
	}
	if k := int(db.Spec.SynchronousReplicas()); st.SyncReplicas < k {
		// The statement would wait for them, holding MariaDB's privilege
		// lock: no client, nor a replica's clone, could log in meanwhile.
		return notYet(fmt.Sprintf("%d of the %d synchronous replicas a commit waits for are connected", st.SyncReplicas, k))
	}
	if err := inst.EnsureAccount(ctx, acct); err != nil {
		return fmt.Errorf("setting account %s on %s: %w", acct.User, pod.Name, err)
	}
	log.FromContext(ctx).Info("account set", "pod", pod.Name, "user", acct.User, "secret", secret.Name)
	rotated := secret.Annotations[appliedPasswordAnnotation] != ""
	patch := client.MergeFrom(secret.DeepCopy())
	metav1.SetMetaDataAnnotation(&secret.ObjectMeta, appliedPasswordAnnotation, passwordHash(acct.Password))
	if !acct.Replication && !acct.Monitoring {
		// The keys derived from the password (uri) follow a rotated one.
		for k, v := range appSecretData(db, acct.Password) {
			secret.Data[k] = []byte(v)
		}
	}
	if err := r.Patch(ctx, secret, patch); err != nil {
		return fmt.Errorf("recording the password of %s as set: %w", acct.User, err)
	}
	switch {
	case acct.Replication && rotated:
		// Only a Secret deleted and made again gets here (it is immutable).
		r.event(db, corev1.EventTypeWarning, "ReplicationPasswordChanged", "Rotate",
			"Set a new password of %s from Secret %s on %s: a replica that reconnects with the old one stops streaming until it is restarted (PostgreSQL) or re-pointed (MySQL, MariaDB)", acct.User, secret.Name, pod.Name)
	case acct.Replication:
		r.event(db, corev1.EventTypeNormal, "ReplicationAccountSet", "Create", "Replication account %s on %s; replicas stream with it, never as the superuser", acct.User, pod.Name)
	case acct.Monitoring && rotated:
		r.event(db, corev1.EventTypeNormal, "MonitoringPasswordRotated", "Rotate", "Set the new password of %s from Secret %s on %s", acct.User, secret.Name, pod.Name)
	case acct.Monitoring:
		r.event(db, corev1.EventTypeNormal, "MonitoringAccountSet", "Create", "Monitoring account %s on %s: it reads server and replication state, no table", acct.User, pod.Name)
	case rotated:
		r.event(db, corev1.EventTypeNormal, "AppPasswordRotated", "Rotate", "Set the new password of %s from Secret %s on %s", acct.User, secret.Name, pod.Name)
	default:
		r.event(db, corev1.EventTypeNormal, "AppAccountCreated", "Create", "Application account %s with database %s on %s; connection details in Secret %s", acct.User, appDatabase, pod.Name, secret.Name)
	}
	return nil
}

// appSecret returns the application Secret, or nil when it was created
// just now (its watch brings the next reconcile, which sets the account).
// A Secret of that name that is not this Database's is left alone and
// reported.
func (r *DatabaseReconciler) appSecret(ctx context.Context, db *dbv1.Database) (*corev1.Secret, error) {
	// The CA bundle goes in from the start (the Certificates phase keeps
	// it current afterwards), so a client verifies its server at once.
	tlsSecret := &corev1.Secret{}
	if err := r.getSecret(ctx, client.ObjectKey{Namespace: db.Namespace, Name: tlsSecretName(db)}, tlsSecret); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s: %w", tlsSecretName(db), err)
	}
	secret, created, err := r.getOrCreateSecret(ctx, db, appSecretName(db), false, func(password string) map[string]string {
		data := appSecretData(db, password)
		if ca := tlsSecret.Data[keyCACert]; len(ca) > 0 {
			data[keyCACert] = string(ca)
		}
		return data
	})
	if err != nil || created {
		return nil, err
	}
	if !metav1.IsControlledBy(secret, db) {
		return nil, fmt.Errorf("Secret %s exists and is not this Database's; delete it or choose another Database name", secret.Name)
	}
	return secret, nil
}
