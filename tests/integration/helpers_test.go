package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/poll"
)

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + fmt.Sprint(time.Now().UnixNano()%100000)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := testEnv.client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testEnv.client.Delete(context.Background(), ns) })
	return name
}

func database(ns, name string, engine dbv1.Engine, replicas int32, mutate ...func(*dbv1.Database)) *dbv1.Database {
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dbv1.DatabaseSpec{
			Engine:   engine,
			Replicas: replicas,
			Storage:  dbv1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

// eventually polls cond until it returns "" (done) or the timeout passes,
// then fails with the last thing cond said.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	poll.Eventually(t, 100*time.Millisecond, timeout, what, cond)
}

func get(t testing.TB, obj client.Object) error {
	t.Helper()
	return testEnv.client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

// waitRunning waits until the Database is Running, Ready, with the given
// ready replicas, and its status describes the current generation.
func waitRunning(t testing.TB, db *dbv1.Database, replicas int32) *dbv1.Database {
	t.Helper()
	got := &dbv1.Database{}
	eventually(t, 90*time.Second, fmt.Sprintf("%s Running with %d ready", db.Name, replicas), func() string {
		if err := testEnv.client.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionReady)
		switch {
		case got.Status.Phase != dbv1.PhaseRunning:
			return fmt.Sprintf("phase %q, conditions %+v", got.Status.Phase, got.Status.Conditions)
		case ready == nil || ready.Status != metav1.ConditionTrue:
			return fmt.Sprintf("Ready %+v", ready)
		case got.Status.ReadyReplicas != replicas:
			return fmt.Sprintf("%d ready replicas", got.Status.ReadyReplicas)
		case got.Status.ObservedGeneration != got.Generation:
			return fmt.Sprintf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		return ""
	})
	return got
}

func podsOf(t testing.TB, db *dbv1.Database) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := testEnv.client.List(context.Background(), pods, client.InNamespace(db.Namespace),
		client.MatchingLabels{"app.kubernetes.io/instance": db.Name}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func pvcsOf(t testing.TB, db *dbv1.Database) []corev1.PersistentVolumeClaim {
	t.Helper()
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := testEnv.client.List(context.Background(), pvcs, client.InNamespace(db.Namespace),
		client.MatchingLabels{"app.kubernetes.io/instance": db.Name}); err != nil {
		t.Fatal(err)
	}
	return pvcs.Items
}

// updateSpec changes a Database's spec, retrying when the operator's own
// writes (finalizer, status) moved the resourceVersion in between.
func updateSpec(t testing.TB, db *dbv1.Database, mutate func(*dbv1.Database)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		got := &dbv1.Database{}
		if err := testEnv.client.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err
		}
		mutate(got)
		return testEnv.client.Update(context.Background(), got)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", db.Name, err)
	}
}

// runningDatabase creates a Database in a fresh namespace and waits until
// it is Running with every instance ready.
func runningDatabase(t testing.TB, name string, engine dbv1.Engine, replicas int32, mutate ...func(*dbv1.Database)) *dbv1.Database {
	t.Helper()
	db := database(newNamespace(t), name, engine, replicas, mutate...)
	if err := testEnv.client.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return waitRunning(t, db, replicas)
}
