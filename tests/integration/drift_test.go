package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// TestDriftIsRepaired: someone deletes or edits what the operator owns, and
// the operator puts it back.
func TestDriftIsRepaired(t *testing.T) {
	ctx := context.Background()
	db := runningDatabase(t, "drift", dbv1.EnginePostgreSQL, 2)
	ns := db.Namespace

	t.Run("deleted ConfigMap is recreated", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drift-config"}}
		if err := get(t, cm); err != nil {
			t.Fatal(err)
		}
		oldUID := cm.UID
		if err := testEnv.client.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "ConfigMap recreated", func() string {
			fresh := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drift-config"}}
			if err := get(t, fresh); err != nil {
				return err.Error()
			}
			if fresh.UID == oldUID || fresh.Data["postgresql.conf"] == "" {
				return "not recreated yet"
			}
			return ""
		})
	})

	t.Run("edited Service selector is restored", func(t *testing.T) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drift-rw"}}
		if err := get(t, svc); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(svc.DeepCopy())
		svc.Spec.Selector["database.example.com/role"] = "replica" // would send writes to a replica
		if err := testEnv.client.Patch(ctx, svc, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "selector restored", func() string {
			if err := get(t, svc); err != nil {
				return err.Error()
			}
			if r := svc.Spec.Selector["database.example.com/role"]; r != "primary" {
				return "role selector " + r
			}
			return ""
		})
	})

	t.Run("StatefulSet scaled behind the operator's back is scaled back", func(t *testing.T) {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drift"}}
		if err := get(t, sts); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(sts.DeepCopy())
		sts.Spec.Replicas = ptr.To[int32](5)
		if err := testEnv.client.Patch(ctx, sts, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "replicas back to 2", func() string {
			if err := get(t, sts); err != nil {
				return err.Error()
			}
			if *sts.Spec.Replicas != 2 {
				return fmt.Sprintf("replicas %d", *sts.Spec.Replicas)
			}
			return ""
		})
	})

	t.Run("removed role label is put back", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drift-0"}}
		if err := get(t, p); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		delete(p.Labels, "database.example.com/role")
		if err := testEnv.client.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "primary label back", func() string {
			if err := get(t, p); err != nil {
				return err.Error()
			}
			if r := p.Labels["database.example.com/role"]; r != "primary" {
				return "role " + r
			}
			return ""
		})
	})
	waitRunning(t, db, 2)
}
