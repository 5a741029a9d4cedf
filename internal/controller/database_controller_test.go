package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	clientgoapplyconfigurations "k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// newFakeReconciler returns a reconciler over the fake client, counting
// every write it sends.
func newFakeReconciler(t *testing.T, writes *int, objs ...client.Object) (*DatabaseReconciler, client.Client) {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	count := func() { *writes++ }
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithTypeConverters(clientgoapplyconfigurations.NewTypeConverter(scheme), managedfields.NewDeducedTypeConverter()).
		WithStatusSubresource(&dbv1.Database{}).
		WithIndex(&dbv1.Backup{}, backupDatabaseIndex, backupDatabase).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				count()
				return c.Create(ctx, o, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				count()
				return c.Update(ctx, o, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				count()
				return c.Patch(ctx, o, p, opts...)
			},
			Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
				count()
				return c.Apply(ctx, o, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				count()
				return c.Delete(ctx, o, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				count()
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		}).Build()
	return &DatabaseReconciler{
		Client: c, APIReader: c, Scheme: scheme, Chart: loadChart(t),
		Recorder: events.NewFakeRecorder(100),
		// The fake client's server-side apply cannot merge a NetworkPolicy
		// ("expected objects with types from the same schema"); the
		// integration tests apply it against a real API server.
		Values: ValueOptions{NoNetworkPolicy: true, OperatorImage: testOperatorImage},
	}, c
}

// testOperatorImage is the operator image the unit tests render with (the
// instance agent's).
const testOperatorImage = "example.com/database-operator/manager:test"

// TestReconcileWithFakeClient: a first reconcile creates the credentials,
// the finalizer, every rendered object and a Pending status; a second one,
// with nothing changed, writes nothing.
func TestReconcileWithFakeClient(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) { db.Spec.Replicas = 3; db.UID = "" })
	writes := 0
	r, c := newFakeReconciler(t, &writes, db)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &dbv1.Database{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != dbv1.PhasePending && got.Status.Phase != dbv1.PhaseProvisioning {
		t.Errorf("phase %s after the first reconcile", got.Status.Phase)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionProgressing); c == nil || c.Status != "True" {
		t.Errorf("Progressing %+v", c)
	}
	sts := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, sts); err != nil {
		t.Fatalf("StatefulSet: %v", err)
	}
	if *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet replicas %d", *sts.Spec.Replicas)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-credentials"}, secret); err != nil {
		t.Fatalf("Secret: %v", err)
	}
	// Replicas stream as their own account, whose password cannot be
	// changed under them.
	repl := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-replication"}, repl); err != nil {
		t.Fatalf("replication Secret: %v", err)
	}
	if u := string(repl.Data[corev1.BasicAuthUsernameKey]); u != engine.ReplicationUser || len(repl.Data[corev1.BasicAuthPasswordKey]) < 32 ||
		repl.Immutable == nil || !*repl.Immutable || !metav1.IsControlledBy(repl, got) {
		t.Errorf("replication Secret: user %q, %d-byte password, immutable %v, owners %v", u, len(repl.Data[corev1.BasicAuthPasswordKey]), repl.Immutable, repl.OwnerReferences)
	}

	// Applications verify the server with the CA bundle from their Secret.
	tlsSecret, app := &corev1.Secret{}, &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-tls"}, tlsSecret); err != nil {
		t.Fatalf("certificate Secret: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-app"}, app); err != nil {
		t.Fatalf("application Secret: %v", err)
	}
	if ca := app.Data["ca.crt"]; len(ca) == 0 || string(ca) != string(tlsSecret.Data["ca.crt"]) {
		t.Errorf("the application Secret's ca.crt (%d bytes) is not the certificate's CA bundle", len(ca))
	}

	writes = 0
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if writes != 0 {
		t.Errorf("a reconcile with nothing to do sent %d writes", writes)
	}
}
