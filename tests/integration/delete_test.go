package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// TestDeletionPolicyRetain: deleting the Database keeps the PVCs and the
// credentials Secret (released, so the garbage collector leaves it); a new
// Database of the same name adopts both, and names no primary until one is
// chosen from the kept volumes' data.
func TestDeletionPolicyRetain(t *testing.T) {
	ctx := context.Background()
	db := runningDatabase(t, "kept", dbv1.EnginePostgreSQL, 2)
	ns := db.Namespace
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-credentials"}}
	if err := get(t, secret); err != nil {
		t.Fatal(err)
	}
	password := string(secret.Data["password"])

	if err := testEnv.client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitGone(t, db)
	eventually(t, 60*time.Second, "the StatefulSet's pods gone", func() string {
		if n := len(podsOf(t, db)); n != 0 {
			return fmt.Sprintf("%d pods", n)
		}
		return ""
	})
	if n := len(pvcsOf(t, db)); n != 2 {
		t.Fatalf("%d PVCs after deletion with Retain, want 2", n)
	}
	if err := get(t, secret); err != nil {
		t.Fatalf("credentials Secret: %v", err)
	}
	if len(secret.OwnerReferences) != 0 {
		t.Errorf("retained Secret still has owners %v", secret.OwnerReferences)
	}

	// Created again, it finds its volumes: no instance may take writes
	// until the primary is chosen from their data (their servers' positions:
	// simulated pods run none, so here it waits; tests/e2e
	// TestRecreatedOverKeptVolumes makes the choice on real servers).
	again := database(ns, "kept", dbv1.EnginePostgreSQL, 2)
	if err := testEnv.client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	got := &dbv1.Database{}
	eventually(t, 60*time.Second, "the kept volumes found, no primary chosen without their data", func() string {
		if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(again), got); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionProgressing)
		if got.Annotations["database.example.com/kept-volumes"] != "data-kept-0,data-kept-1" || c == nil ||
			!strings.Contains(c.Message, "choosing the primary among the kept volumes") || got.Status.CurrentPrimary != "" {
			return fmt.Sprintf("annotations %v, Progressing %+v, primary %q", got.Annotations, c, got.Status.CurrentPrimary)
		}
		return ""
	})
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-primary"}}
	if err := get(t, lease); err != nil || lease.Spec.HolderIdentity != nil {
		t.Errorf("the primary Lease %+v (%v): want it held by no one until the primary is chosen", lease.Spec.HolderIdentity, err)
	}
	topology := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept-topology"}}
	if err := get(t, topology); err != nil || topology.Data["primary"] != "" || topology.Data["adopt"] == "" {
		t.Errorf("topology %v (%v): want no primary named, adopt set", topology.Data, err)
	}
	if err := get(t, secret); err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["password"]) != password || !metav1.IsControlledBy(secret, got) {
		t.Errorf("the recreated Database did not adopt the retained credentials (owners %v)", secret.OwnerReferences)
	}
	if n := len(pvcsOf(t, again)); n != 2 {
		t.Errorf("%d PVCs after recreation, want the 2 retained ones", n)
	}
}

// TestDeletionPolicyDelete: deleting the Database deletes its PVCs, and
// only them: volumes of another chart that carry the same common
// app.kubernetes.io labels are left alone.
func TestDeletionPolicyDelete(t *testing.T) {
	ctx := context.Background()
	db := runningDatabase(t, "gone", dbv1.EngineMariaDB, 2, func(db *dbv1.Database) { db.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete })
	if n := len(pvcsOf(t, db)); n != 2 {
		t.Fatalf("%d PVCs, want 2", n)
	}
	foreign := []string{"data-gone-02", "data-gone-archive", "gone-cache"} // sorted, as a list is
	for _, name := range foreign {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name,
				Labels: map[string]string{"app.kubernetes.io/name": "database", "app.kubernetes.io/instance": db.Name}},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if err := testEnv.client.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testEnv.client.Delete(context.Background(), pvc) })
	}
	if err := testEnv.client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitGone(t, db)
	eventually(t, 60*time.Second, "the Database's PVCs deleted", func() string {
		var left []string
		for _, pvc := range pvcsOf(t, db) {
			if pvc.DeletionTimestamp.IsZero() {
				left = append(left, pvc.Name)
			}
		}
		slices.Sort(left)
		if got, want := strings.Join(left, ","), strings.Join(foreign, ","); got != want {
			return fmt.Sprintf("left %s, want only the foreign %s", got, want)
		}
		return ""
	})
}

func waitGone(t testing.TB, db *dbv1.Database) {
	t.Helper()
	eventually(t, 30*time.Second, db.Name+" deleted", func() string {
		if err := get(t, db.DeepCopy()); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("still there (err %v)", err)
		}
		return ""
	})
}
