package client_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/pkg/client/clientset/versioned/fake"
	"example.com/database-operator/pkg/client/informers/externalversions"
)

// Watch Databases with the shared informer factory, read them from its
// lister, and read one with the dynamic client. A program builds the
// clientset with versioned.NewForConfig and the dynamic client with
// dynamic.NewForConfig from its rest.Config; the fakes stand in for them
// here so that the example runs.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	orders := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec:       dbv1.DatabaseSpec{Engine: dbv1.EnginePostgreSQL, Replicas: 3},
		Status:     dbv1.DatabaseStatus{Phase: dbv1.PhaseRunning, CurrentPrimary: "orders-0"},
	}
	clientset := fake.NewClientset(orders)

	factory := externalversions.NewSharedInformerFactoryWithOptions(clientset, 10*time.Minute,
		externalversions.WithNamespace("shop"))
	informer := factory.Example().V1().Databases()
	added := make(chan *dbv1.Database, 1)
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { added <- obj.(*dbv1.Database) },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	select {
	case db := <-added:
		fmt.Printf("added %s: %s, primary %s\n", db.Name, db.Status.Phase, db.Status.CurrentPrimary)
	case <-ctx.Done():
		fmt.Println("no Database seen")
	}

	// The lister reads the informer's cache: no request to the API server.
	cached, _ := informer.Lister().Databases("shop").Get("orders")
	fmt.Println("lister:", cached.Name, cached.Spec.Engine, cached.Spec.Replicas)

	// The dynamic client reads the same object as unstructured data.
	scheme := runtime.NewScheme()
	_ = dbv1.AddToScheme(scheme)
	dynamic := dynamicfake.NewSimpleDynamicClient(scheme, orders)
	u, _ := dynamic.Resource(dbv1.GroupVersion.WithResource("databases")).Namespace("shop").
		Get(ctx, "orders", metav1.GetOptions{})
	engine, _, _ := unstructured.NestedString(u.Object, "spec", "engine")
	fmt.Println("dynamic:", u.GetName(), engine)

	cancel() // stops the informers
	factory.Shutdown()
	// Output:
	// added orders: Running, primary orders-0
	// lister: orders postgresql 3
	// dynamic: orders postgresql
}
