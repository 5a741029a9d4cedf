package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	dbv1 "example.com/database-operator/api/v1"
	applyv1 "example.com/database-operator/pkg/client/applyconfiguration/api/v1"
	"example.com/database-operator/pkg/client/clientset/versioned"
	"example.com/database-operator/pkg/client/informers/externalversions"
)

// TestTypedClient drives the generated client (pkg/client) against the API
// server and the operator: a Database created by server-side apply, watched
// to Running through the informer factory and read from its lister, scaled
// through the scale subresource, read as v1alpha1 (the conversion webhook)
// and with the dynamic client; a Backup listed; a missing Database a
// NotFound naming the resource.
func TestTypedClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	cs, err := versioned.NewForConfig(testEnv.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}

	factory := externalversions.NewSharedInformerFactoryWithOptions(cs, 0, externalversions.WithNamespace(ns))
	informer := factory.Example().V1().Databases()
	phases := make(chan dbv1.Phase, 100)
	_, err = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { phases <- obj.(*dbv1.Database).Status.Phase },
	})
	if err != nil {
		t.Fatal(err)
	}
	informerCtx, stop := context.WithCancel(ctx)
	factory.Start(informerCtx.Done())
	defer func() { stop(); factory.Shutdown() }()
	factory.WaitForCacheSync(ctx.Done())

	apply := applyv1.Database("typed", ns).WithSpec(applyv1.DatabaseSpec().
		WithEngine(dbv1.EngineMariaDB).WithReplicas(1).
		WithStorage(applyv1.StorageSpec().WithSize(resource.MustParse("1Gi"))))
	if _, err := cs.ExampleV1().Databases(ns).Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "typed-client-test"}); err != nil {
		t.Fatal(err)
	}
	waitPhase(ctx, t, phases, dbv1.PhaseRunning)
	cached, err := informer.Lister().Databases(ns).Get("typed")
	if err != nil || cached.Status.CurrentPrimary != "typed-0" {
		t.Fatalf("lister: %+v (err %v)", cached, err)
	}

	scale, err := cs.ExampleV1().Databases(ns).GetScale(ctx, "typed", metav1.GetOptions{})
	if err != nil || scale.Spec.Replicas != 1 || scale.Status.Selector == "" {
		t.Fatalf("GetScale: %+v (err %v)", scale, err)
	}
	scale.Spec.Replicas = 2
	if _, err := cs.ExampleV1().Databases(ns).UpdateScale(ctx, "typed", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "2 ready replicas in the lister", func() string {
		db, err := informer.Lister().Databases(ns).Get("typed")
		if err != nil {
			return err.Error()
		}
		if db.Spec.Replicas != 2 || db.Status.ReadyReplicas != 2 {
			return fmt.Sprintf("replicas %d, ready %d", db.Spec.Replicas, db.Status.ReadyReplicas)
		}
		return ""
	})

	old, err := cs.ExampleV1alpha1().Databases(ns).Get(ctx, "typed", metav1.GetOptions{})
	if err != nil || old.Spec.Instances != 2 {
		t.Errorf("v1alpha1: %+v (err %v)", old.Spec, err)
	}

	dyn, err := dynamic.NewForConfig(testEnv.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(dbv1.GroupVersion.WithResource("databases")).Namespace(ns).Get(ctx, "typed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if engine, _, _ := unstructured.NestedString(u.Object, "spec", "engine"); engine != string(dbv1.EngineMariaDB) {
		t.Errorf("dynamic client: spec.engine %q", engine)
	}

	if backups, err := cs.ExampleV1().Backups(ns).List(ctx, metav1.ListOptions{}); err != nil || len(backups.Items) != 0 {
		t.Errorf("Backups: %+v (err %v)", backups, err)
	}
	_, err = cs.ExampleV1().Databases(ns).Get(ctx, "missing", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a missing Database: %v, want NotFound", err)
	}
	if _, err := informer.Lister().Databases(ns).Get("missing"); !apierrors.IsNotFound(err) || err.Error() != `database.example.com "missing" not found` {
		t.Errorf("the lister on a missing Database: %v", err)
	}
}

// waitPhase reads the informer's updates until one has the phase.
func waitPhase(ctx context.Context, t *testing.T, phases <-chan dbv1.Phase, want dbv1.Phase) {
	t.Helper()
	var seen []dbv1.Phase
	for {
		select {
		case p := <-phases:
			if p == want {
				return
			}
			seen = append(seen, p)
		case <-ctx.Done():
			t.Fatalf("the informer saw phases %v, never %s", seen, want)
		}
	}
}
