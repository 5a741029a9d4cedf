package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// TestBackupTargetsNeedSecretAccess: the confused deputy. Mallory may write
// Databases and Backups in the namespace and read her own S3 keys, but no
// other Secret; a backup target she names would have the operator's Job
// send a Secret, or the Database's data, to an endpoint of her choosing.
// The webhooks ask the API server (SubjectAccessReview) whether she may
// read each Secret named and the Database's credentials, and refuse;
// someone who may is admitted, and the Backup is recorded with their name.
// A plain http:// endpoint is refused unless allowed outright.
func TestBackupTargetsNeedSecretAccess(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, name := range []string{"app-credentials", "mallory-s3"} {
		if err := testEnv.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			StringData: map[string]string{"accessKeyId": "AK", "secretAccessKey": "a-password"}}); err != nil {
			t.Fatal(err)
		}
	}
	grant(t, ns, "mallory", rbacv1.PolicyRule{APIGroups: []string{"example.com"}, Resources: []string{"databases", "backups"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"mallory-s3"}, Verbs: []string{"get"}})
	mallory := restrictedClient(t, "mallory")
	alice, _ := userClient(t, "alice") // system:masters: may read every Secret

	lootWith := func(secret, endpoint string) *dbv1.BackupTarget {
		return &dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: endpoint, Bucket: "loot", ForcePathStyle: true,
			CredentialsSecret: dbv1.S3Credentials{Name: secret}}}
	}
	loot := func(endpoint string) *dbv1.BackupTarget { return lootWith("app-credentials", endpoint) }
	backup := func(name string, target *dbv1.BackupTarget) *dbv1.Backup {
		return &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}, Target: target}}
	}
	refusal := "mallory may not get secrets/app-credentials in namespace " + ns

	t.Run("a Backup naming a Secret its user may not read", func(t *testing.T) {
		err := mallory.Create(ctx, backup("exfiltrate", loot("https://s3.elsewhere.test")))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("mallory's Backup: %v\nwant Invalid saying %q", err, refusal)
		}
	})
	t.Run("a Backup to her own bucket with her own keys", func(t *testing.T) {
		err := mallory.Create(ctx, backup("own-bucket", lootWith("mallory-s3", "https://s3.elsewhere.test")))
		want := "mallory may not get secrets/orders-credentials in namespace " + ns + ", and a backup target receives all of Database orders's data"
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("mallory's Backup with her own keys: %v\nwant Invalid saying %q", err, want)
		}
	})
	t.Run("a Database target naming a Secret its user may not read", func(t *testing.T) {
		db := database(ns, "orders", dbv1.EnginePostgreSQL, 1, func(d *dbv1.Database) { d.Spec.Backup = &dbv1.BackupPolicy{Target: *loot("https://s3.elsewhere.test")} })
		err := mallory.Create(ctx, db)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), refusal) || strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("mallory's Database: %v\nwant Invalid saying %q", err, refusal)
		}
	})
	t.Run("a plain http endpoint", func(t *testing.T) {
		err := alice.Create(ctx, backup("plain", loot(" HTTP://s3.elsewhere.test:9000")))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "endpoint is plain http://") {
			t.Fatalf("an http:// endpoint: %v", err)
		}
		allowed := backup("plain", loot("http://s3.elsewhere.test:9000"))
		allowed.Spec.Target.S3.AllowInsecureHTTP = true
		if err := alice.Create(ctx, allowed); err != nil {
			t.Fatalf("an http:// endpoint allowed outright: %v", err)
		}
		// A Backup's status copies the target it used, which may have been
		// admitted before the rule existed: the rule is not on status.
		b := backup("before-the-rule", nil)
		if err := alice.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		err = retry.RetryOnConflict(conflictBackoff, func() error {
			if err := alice.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return err
			}
			b.Status.Target = loot("http://s3.elsewhere.test:9000")
			return alice.Status().Update(ctx, b)
		})
		if err != nil {
			t.Errorf("a status copy of an http:// target: %v", err)
		}
	})
	t.Run("someone who may read the Secret, recorded by name", func(t *testing.T) {
		if err := alice.Create(ctx, backup("allowed", loot("https://s3.elsewhere.test"))); err != nil {
			t.Fatalf("alice's Backup: %v", err)
		}
		// Mallory may still back up to the Database's own target.
		if err := mallory.Create(ctx, backup("own-target", nil)); err != nil {
			t.Fatalf("mallory's Backup to the Database's own target: %v", err)
		}
		for _, want := range []string{
			"Backup allowed of Database orders to bucket loot at https://s3.elsewhere.test requested (by alice)",
			"Backup own-target of Database orders to the Database's own target requested (by mallory)",
		} {
			eventually(t, 30*time.Second, "audit Event", func() string {
				evs := &eventsv1.EventList{}
				if err := testEnv.client.List(ctx, evs, client.InNamespace(ns)); err != nil {
					return err.Error()
				}
				for _, e := range evs.Items {
					if e.Reason == "AuditBackupRequested" && e.Note == want {
						return ""
					}
				}
				return fmt.Sprintf("no Event %q among %d", want, len(evs.Items))
			})
		}
	})
}

// grant gives user the rules in namespace ns through a Role and a RoleBinding.
func grant(t testing.TB, ns, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: rules}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := testEnv.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// restrictedClient acts as user with only the RBAC granted to that name.
func restrictedClient(t testing.TB, user string) client.Client {
	t.Helper()
	return clientAs(t, rest.ImpersonationConfig{UserName: user}, nil)
}
