package v1

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

func TestBackupTargetSecrets(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "full"}, Data: map[string][]byte{"accessKeyId": []byte("a"), "secretAccessKey": []byte("s"), "ca.crt": []byte("pem")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "half"}, Data: map[string][]byte{"id": []byte("a")}},
	).WithInterceptorFuncs(authorizer(map[string][]string{"alice": {"*"}, "mallory": {"mallory-s3"}})).Build()
	rule := BackupTargetSecrets(c, c)
	asAlice := asUser("alice")
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
		{"volume target", &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Spec: dbv1.DatabaseSpec{Backup: &dbv1.BackupPolicy{}}}, ""},
		{"bootstrap source", &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: dbv1.DatabaseSpec{Bootstrap: &dbv1.BootstrapSpec{Source: &dbv1.BackupSource{
			Target: dbv1.BackupTarget{S3: &dbv1.S3Target{CredentialsSecret: dbv1.S3Credentials{Name: "gone"}}}, Path: "a/b/c"}}}}, "spec.bootstrap.source.target.s3"},
	} {
		_, errs, _ := rule(asAlice, nil, tc.db)
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
	if _, errs, _ := rule(asAlice, gone.DeepCopy(), gone); len(errs) != 0 {
		t.Errorf("an unchanged target was checked: %v", errs)
	}
	// Someone who may not read the Secret may not name it, and is not told
	// whether it exists.
	for _, name := range []string{"full", "nope"} {
		_, errs, _ := rule(asUser("mallory"), nil, withTarget(dbv1.S3Credentials{Name: name}, nil))
		if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), "mallory may not get secrets/"+name) || strings.Contains(got.Error(), "does not exist") {
			t.Errorf("mallory naming Secret %s: %v", name, got)
		}
	}
}

// asUser is a context carrying an admission request from user.
func asUser(user string) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UserInfo: authenticationv1.UserInfo{Username: user}}})
}

// authorizer answers SubjectAccessReviews as an API server whose RBAC lets
// each user get the Secrets of namespace ns listed for it; "*" may do
// anything there.
func authorizer(secrets map[string][]string) interceptor.Funcs {
	return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		review, ok := obj.(*authorizationv1.SubjectAccessReview)
		if !ok {
			return c.Create(ctx, obj, opts...)
		}
		a, may := review.Spec.ResourceAttributes, secrets[review.Spec.User]
		review.Status.Allowed = a.Namespace == "ns" && (slices.Contains(may, "*") ||
			(a.Verb == "get" && a.Resource == "secrets" && slices.Contains(may, a.Name)))
		return nil
	}}
}

// TestBackupValidator: a Backup's own target needs what reading the data
// needs (the Database's credentials Secret), every Secret it names, and
// pods for a volume claim; an admitted Backup is recorded with its user.
func TestBackupValidator(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(authorizer(map[string][]string{"alice": {"*"}, "mallory": {"mallory-s3"}})).Build()
	rec := events.NewFakeRecorder(10)
	v := &BackupValidator{Client: c, Recorder: rec}
	backup := func(target *dbv1.BackupTarget) *dbv1.Backup {
		return &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b1", UID: "u1"},
			Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}, Target: target}}
	}
	s3 := func(secret string) *dbv1.BackupTarget {
		return &dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "https://s3.elsewhere.test", Bucket: "loot",
			CredentialsSecret: dbv1.S3Credentials{Name: secret}}}
	}
	for _, tc := range []struct {
		name   string
		target *dbv1.BackupTarget
		want   []string
	}{
		{"someone else's Secret", s3("app-credentials"), []string{"mallory may not get secrets/app-credentials", "mallory may not get secrets/orders-credentials"}},
		// Her own S3 keys, her own bucket: still the Database's data.
		{"her own Secret", s3("mallory-s3"), []string{"mallory may not get secrets/orders-credentials in namespace ns, and a backup target receives all of Database orders's data"}},
		{"another Database's volume", &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "data-billing-0"}}, []string{"mallory may not create pods"}},
	} {
		_, err := v.ValidateCreate(asUser("mallory"), backup(tc.target))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", tc.name, err, w)
			}
		}
	}
	if _, err := v.ValidateCreate(asUser("mallory"), backup(nil)); err != nil {
		t.Errorf("mallory's Backup to the Database's own target: %v", err)
	}
	if _, err := v.ValidateCreate(asUser("alice"), backup(s3("app-credentials"))); err != nil {
		t.Errorf("alice's Backup: %v", err)
	}
	// Changing the target later is judged like a new one.
	if _, err := v.ValidateUpdate(asUser("mallory"), backup(nil), backup(s3("mallory-s3"))); err == nil {
		t.Error("mallory moved a Backup's target to her bucket")
	}
	want := []string{
		"Normal AuditBackupRequested Backup b1 of Database orders to the Database's own target requested (by mallory)",
		"Normal AuditBackupRequested Backup b1 of Database orders to bucket loot at https://s3.elsewhere.test requested (by alice)",
	}
	if got := drain(rec); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events %q, want %q", got, want)
	}
}
