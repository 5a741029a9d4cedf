package controller

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/pki"
)

// The CA Secret's keys: the current CA and the one it replaced, kept in
// the bundle until it expires (certificates it signed may still be served).
const (
	caSecretName     = "database-operator-ca"
	keyCACert        = "ca.crt"
	keyCAKey         = "ca.key"
	keyPreviousCA    = "previous-ca.crt"
	keyPreviousCAKey = "previous-ca.key"
)

// caPropagation is how long a new CA is only trusted, not yet signing:
// the bundles mounted in pods (the kubelet rewrites them within about a
// minute) and the applications' copies take it in first, so no client
// meets a server certificate from a CA it does not know yet.
const caPropagation = 10 * time.Minute

// tlsMountPath is where the database container mounts the certificate
// Secret: the servers read their certificate and key there, and replicas
// (and the start scripts' clients) the CA that verifies their primary.
const tlsMountPath = "/etc/database-operator/tls"

// peerCAFile is the CA bundle in the database container.
const peerCAFile = tlsMountPath + "/" + keyCACert

// tlsSecretName is the Secret with a Database's server certificate, key
// and the CA bundle (kubernetes.io/tls: tls.crt, tls.key, ca.crt).
func tlsSecretName(db *dbv1.Database) string { return db.Name + "-tls" }

// reconcileCertificates keeps the namespace's CA (one Secret shared by the
// namespace's Databases, owned by none, so deleting a Database never
// deletes it) and the Database's server certificate, each renewed once two
// thirds of its life have passed.
func (r *DatabaseReconciler) reconcileCertificates(ctx context.Context, db *dbv1.Database, _ *observed) error {
	now := r.now()
	ca, bundle, err := r.namespaceCA(ctx, db, now)
	if err != nil {
		return err
	}
	names := serverNames(db)
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: tlsSecretName(db)}
	err = r.getSecret(ctx, key, secret)
	exists := err == nil
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key.Name, err)
	case !metav1.IsControlledBy(secret, db):
		return fmt.Errorf("Secret %s exists and is not this Database's: delete or rename it", key.Name)
	}
	why := pki.Due(secret.Data[corev1.TLSCertKey], ca, names, now)
	if why == "" {
		if string(secret.Data[keyCACert]) == string(bundle) {
			return r.keepAppCA(ctx, db, bundle)
		}
		why = "the CA bundle changed"
	}
	certPEM, keyPEM := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if why != "the CA bundle changed" {
		if certPEM, keyPEM, err = ca.IssueServer(db.Name, names, now); err != nil {
			return err
		}
	}
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, keyCACert: bundle}
	if !exists {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: key.Name, Labels: instanceLabels(db)},
			Type: corev1.SecretTypeTLS, Data: data}
		if err := controllerutil.SetControllerReference(db, secret, r.Scheme); err != nil {
			return err
		}
		if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key.Name, err)
		}
	} else {
		patch := client.MergeFromWithOptions(secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
		secret.Data = data
		if err := r.Patch(ctx, secret, patch, client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("renewing Secret %s: %w", key.Name, err)
		}
	}
	log.FromContext(ctx).Info("server certificate written", "secret", key.Name, "why", why)
	r.event(db, corev1.EventTypeNormal, "CertificateIssued", "Issue", "Server certificate in Secret %s: %s", key.Name, why)
	return r.keepAppCA(ctx, db, bundle)
}

// keepAppCA puts the CA bundle into the application Secret (ca.crt), so
// applications verify the server they connect to (sslmode=verify-full,
// --ssl-verify-server-cert) with what they already mount. Until the
// Accounts phase has made that Secret there is nothing to do; its watch
// brings the reconcile that fills it in.
func (r *DatabaseReconciler) keepAppCA(ctx context.Context, db *dbv1.Database, bundle []byte) error {
	app := &corev1.Secret{}
	switch err := r.getSecret(ctx, client.ObjectKey{Namespace: db.Namespace, Name: appSecretName(db)}, app); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", appSecretName(db), err)
	case !metav1.IsControlledBy(app, db), string(app.Data[keyCACert]) == string(bundle):
		return nil
	}
	patch := client.MergeFrom(app.DeepCopy())
	if app.Data == nil {
		app.Data = map[string][]byte{}
	}
	app.Data[keyCACert] = bundle
	if err := r.Patch(ctx, app, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("writing the CA bundle into Secret %s: %w", app.Name, err)
	}
	return nil
}

// namespaceCA returns the CA that signs now and the bundle clients trust,
// making the CA on first use and replacing it once two thirds of its life
// have passed. Two Databases may race to make or replace it: the loser's
// write fails (it already exists, or the optimistic lock) and it takes the
// winner's at its next reconcile.
func (r *DatabaseReconciler) namespaceCA(ctx context.Context, db *dbv1.Database, now time.Time) (*pki.CA, []byte, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: caSecretName}
	switch err := r.getSecret(ctx, key, secret); {
	case apierrors.IsNotFound(err):
		ca, err := pki.NewCA("database-operator CA "+db.Namespace, now)
		if err != nil {
			return nil, nil, err
		}
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: caSecretName,
			Labels: map[string]string{labelManagedBy: managedBy, labelComponent: "certificate-authority"}},
			Data: map[string][]byte{keyCACert: ca.CertPEM, keyCAKey: ca.KeyPEM}}
		if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); err != nil {
			return nil, nil, fmt.Errorf("creating the namespace's CA in Secret %s: %w", caSecretName, err)
		}
		log.FromContext(ctx).Info("certificate authority created", "secret", caSecretName)
		r.event(db, corev1.EventTypeNormal, "CertificateAuthorityCreated", "Issue", "Made the namespace's CA in Secret %s", caSecretName)
		return ca, pki.Bundle(now, ca.CertPEM), nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading Secret %s: %w", caSecretName, err)
	case secret.Labels[labelManagedBy] != managedBy:
		return nil, nil, fmt.Errorf("Secret %s exists and was not made by this operator: it must hold the namespace's CA; delete or rename it", caSecretName)
	}
	ca, err := pki.ParseCA(secret.Data[keyCACert], secret.Data[keyCAKey])
	if err != nil {
		return nil, nil, fmt.Errorf("Secret %s: %w", caSecretName, err)
	}
	if why := pki.Due(secret.Data[keyCACert], nil, pki.Names{}, now); why != "" {
		next, err := pki.NewCA("database-operator CA "+db.Namespace, now)
		if err != nil {
			return nil, nil, err
		}
		patch := client.MergeFromWithOptions(secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
		secret.Data = map[string][]byte{keyCACert: next.CertPEM, keyCAKey: next.KeyPEM, keyPreviousCA: ca.CertPEM, keyPreviousCAKey: ca.KeyPEM}
		if err := r.Patch(ctx, secret, patch, client.FieldOwner(FieldOwner)); err != nil {
			return nil, nil, fmt.Errorf("replacing the namespace's CA (%s): %w", why, err)
		}
		log.FromContext(ctx).Info("certificate authority replaced", "secret", caSecretName, "why", why)
		r.event(db, corev1.EventTypeNormal, "CertificateAuthorityRenewed", "Issue", "Replaced the namespace's CA in Secret %s (%s); the old one stays trusted until it expires", caSecretName, why)
		ca = next
	}
	bundle := pki.Bundle(now, secret.Data[keyCACert], secret.Data[keyPreviousCA])
	// Until the new CA has reached the clients' bundles, the one it
	// replaced (still valid) keeps signing.
	if now.Before(ca.Cert.NotBefore.Add(pki.Backdate + caPropagation)) {
		if prev, err := pki.ParseCA(secret.Data[keyPreviousCA], secret.Data[keyPreviousCAKey]); err == nil && now.Before(prev.Cert.NotAfter) {
			return prev, bundle, nil
		}
	}
	return ca, bundle, nil
}

// serverNames are the names a Database's servers are reached by: its
// Services (short, namespaced and full names) and each pod's stable name
// under the headless Service; localhost for the agent's own checks.
func serverNames(db *dbv1.Database) pki.Names {
	var dns []string
	for _, svc := range []string{db.Name + "-rw", db.Name + "-ro", db.Name + "-headless"} {
		full := svc + "." + db.Namespace + ".svc"
		dns = append(dns, svc, svc+"."+db.Namespace, full, full+".cluster.local")
	}
	peers := db.Name + "-headless." + db.Namespace + ".svc"
	dns = append(dns, "*."+peers, "*."+peers+".cluster.local", "localhost")
	return pki.Names{DNS: dns, IPs: []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}}
}
