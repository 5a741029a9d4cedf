package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// waitBackup waits until a Backup has finished and returns it.
func waitBackup(t testing.TB, ns, name string) *dbv1.Backup {
	t.Helper()
	b := &dbv1.Backup{}
	eventually(t, 60*time.Second, "backup "+name+" finished", func() string {
		if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return err.Error()
		}
		if !b.Status.Phase.Finished() {
			return fmt.Sprintf("phase %q: %s", b.Status.Phase, b.Status.Message)
		}
		return ""
	})
	return b
}

// TestBackupTargetSecretsAreChecked: the validating webhook refuses an S3
// target whose credentials Secret is missing or lacks a key, saying which,
// on create and on update; a complete Secret is accepted.
func TestBackupTargetSecretsAreChecked(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s3 := func(d *dbv1.Database) {
		d.Spec.Backup = &dbv1.BackupPolicy{Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "s3.example.com", Bucket: "backups",
			CredentialsSecret: dbv1.S3Credentials{Name: "s3-creds"}}}}
	}
	err := testEnv.client.Create(ctx, database(ns, "nosecret", dbv1.EnginePostgreSQL, 1, s3))
	wantInvalid(t, err, "spec.backup.target.s3", "Secret s3-creds does not exist in namespace "+ns+": create it (keys accessKeyId, secretAccessKey)")

	if err := testEnv.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-creds"},
		StringData: map[string]string{"accessKeyId": "AK"}}); err != nil {
		t.Fatal(err)
	}
	err = testEnv.client.Create(ctx, database(ns, "nosecret", dbv1.EnginePostgreSQL, 1, s3))
	wantInvalid(t, err, "spec.backup.target.s3", "Secret s3-creds has no key(s) secretAccessKey")

	// Added by an update to an existing Database: refused the same way.
	plain := database(ns, "plain", dbv1.EnginePostgreSQL, 1)
	if err := testEnv.client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	err = update(ctx, testEnv.client, plain, s3)
	wantInvalid(t, err, "spec.backup.target.s3", "has no key(s) secretAccessKey")

	secret := &corev1.Secret{}
	if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-creds"}, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data["secretAccessKey"] = []byte("SK")
	if err := testEnv.client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := testEnv.client.Create(ctx, database(ns, "withsecret", dbv1.EnginePostgreSQL, 1, s3)); err != nil {
		t.Errorf("a complete Secret: %v", err)
	}
}
