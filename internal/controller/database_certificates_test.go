package controller

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/pki"
)

// TestCertificates: the first reconcile makes the namespace's CA and the
// Database's server certificate for its names; later ones write nothing
// until two thirds of the certificate's life have passed; a CA due for
// renewal is replaced, the old one stays in the bundle, and the server
// certificate is reissued by the new one. A CA Secret the operator did not
// make is never used.
func TestCertificates(t *testing.T) {
	ctx := context.Background()
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", UID: "u1"}}
	var writes int
	r, c := newFakeReconciler(t, &writes, db)
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	r.Now = func() time.Time { return now }
	reconcile := func() (tls, ca *corev1.Secret) {
		t.Helper()
		if err := r.reconcileCertificates(ctx, db, &observed{}); err != nil {
			t.Fatal(err)
		}
		tls, ca = &corev1.Secret{}, &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "orders-tls"}, tls); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: caSecretName}, ca); err != nil {
			t.Fatal(err)
		}
		return tls, ca
	}
	verify := func(tls *corev1.Secret, host string) error {
		cert, err := pki.ParseCertificate(tls.Data[corev1.TLSCertKey])
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(tls.Data["ca.crt"])
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now})
		return err
	}

	tls, ca := reconcile()
	if tls.Type != corev1.SecretTypeTLS || !metav1.IsControlledBy(tls, db) || len(ca.OwnerReferences) != 0 {
		t.Fatalf("tls Secret %s owned %v; CA owners %v", tls.Type, tls.OwnerReferences, ca.OwnerReferences)
	}
	for _, host := range []string{"orders-rw", "orders-ro.ns.svc", "orders-2.orders-headless.ns.svc", "localhost"} {
		if err := verify(tls, host); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	first := string(tls.Data[corev1.TLSCertKey])

	writes = 0
	now = now.Add(59 * 24 * time.Hour)
	if tls, _ = reconcile(); writes != 0 || string(tls.Data[corev1.TLSCertKey]) != first {
		t.Fatalf("%d writes before renewal was due", writes)
	}
	now = now.Add(2 * 24 * time.Hour)
	if tls, _ = reconcile(); string(tls.Data[corev1.TLSCertKey]) == first || verify(tls, "orders-rw") != nil {
		t.Fatal("the certificate was not renewed at two thirds of its life")
	}

	// Seven years on, the CA is replaced; clients trusting the bundle
	// trust both while certificates the old one signed are still served.
	now = now.Add(7 * 365 * 24 * time.Hour)
	oldCA := string(ca.Data[keyCACert])
	tls, ca = reconcile()
	if string(ca.Data[keyCACert]) == oldCA || string(ca.Data[keyPreviousCA]) != oldCA {
		t.Fatal("the CA was not replaced with the old one kept")
	}
	if n := strings.Count(string(tls.Data["ca.crt"]), "BEGIN CERTIFICATE"); n != 2 || verify(tls, "orders-rw") != nil {
		t.Fatalf("after the CA's renewal: bundle of %d, verify %v", n, verify(tls, "orders-rw"))
	}
	// The new CA only joins the bundles at first: a pod or an application
	// whose copy is older must not meet a certificate it signed yet.
	newCA, _ := pki.ParseCertificate(ca.Data[keyCACert])
	previousCA, _ := pki.ParseCertificate(ca.Data[keyPreviousCA])
	issued, _ := pki.ParseCertificate(tls.Data[corev1.TLSCertKey])
	if issued.CheckSignatureFrom(previousCA) != nil {
		t.Error("the server certificate was signed by the new CA before it reached the clients' bundles")
	}
	now = now.Add(caPropagation + pki.Backdate)
	tls, _ = reconcile()
	issued, _ = pki.ParseCertificate(tls.Data[corev1.TLSCertKey])
	if issued.CheckSignatureFrom(newCA) != nil {
		t.Error("the server certificate was not reissued by the new CA once it had propagated")
	}
	if n := strings.Count(string(tls.Data["ca.crt"]), "BEGIN CERTIFICATE"); n != 2 || verify(tls, "orders-rw") != nil {
		t.Errorf("after the reissue: bundle of %d, verify %v", n, verify(tls, "orders-rw"))
	}

	// A Secret of the CA's name that the operator did not make.
	other := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "orders", UID: "u2"}}
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: caSecretName}, Data: ca.Data}
	r2, _ := newFakeReconciler(t, &writes, other, foreign)
	if err := r2.reconcileCertificates(ctx, other, &observed{}); err == nil || !strings.Contains(err.Error(), "was not made by this operator") {
		t.Errorf("a foreign CA Secret: %v", err)
	}
}
