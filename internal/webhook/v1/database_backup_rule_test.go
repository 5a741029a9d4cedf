package v1

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "example.com/database-operator/api/v1"
)

func TestBackupTargetSecrets(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "full"}, Data: map[string][]byte{"accessKeyId": []byte("a"), "secretAccessKey": []byte("s"), "ca.crt": []byte("pem")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "half"}, Data: map[string][]byte{"id": []byte("a")}},
	).Build()
	rule := BackupTargetSecrets(c)
	withTarget := func(creds dbv1.S3Credentials, ca *dbv1.SecretKeyRef) *dbv1.Database {
		return &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Spec: dbv1.DatabaseSpec{Backup: &dbv1.BackupPolicy{
			Target: dbv1.BackupTarget{S3: &dbv1.S3Target{CredentialsSecret: creds, CASecret: ca}}}}}
	}
	for _, tc := range []struct {
		name string
		db   *dbv1.Database
		want string
	}{
		{"complete", withTarget(dbv1.S3Credentials{Name: "full"}, &dbv1.SecretKeyRef{Name: "full"}), ""},
		{"missing", withTarget(dbv1.S3Credentials{Name: "nope"}, nil), "Secret nope does not exist in namespace ns"},
		{"named keys missing", withTarget(dbv1.S3Credentials{Name: "half", AccessKeyIDKey: "id", SecretAccessKeyKey: "key"}, nil), "Secret half has no key(s) key"},
		{"CA key missing", withTarget(dbv1.S3Credentials{Name: "full"}, &dbv1.SecretKeyRef{Name: "full", Key: "other.pem"}), "has no key(s) other.pem"},
		{"volume target", &dbv1.Database{Spec: dbv1.DatabaseSpec{Backup: &dbv1.BackupPolicy{}}}, ""},
		{"bootstrap source", &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: dbv1.DatabaseSpec{Bootstrap: &dbv1.BootstrapSpec{Source: &dbv1.BackupSource{
			Target: dbv1.BackupTarget{S3: &dbv1.S3Target{CredentialsSecret: dbv1.S3Credentials{Name: "gone"}}}, Path: "a/b/c"}}}}, "spec.bootstrap.source.target.s3"},
	} {
		_, errs, _ := rule(context.Background(), nil, tc.db)
		got := errs.ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: refused: %v", tc.name, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, got, tc.want)
		}
	}
	// An update that leaves the target as it was is not checked again.
	gone := withTarget(dbv1.S3Credentials{Name: "nope"}, nil)
	if _, errs, _ := rule(context.Background(), gone.DeepCopy(), gone); len(errs) != 0 {
		t.Errorf("an unchanged target was checked: %v", errs)
	}
}
