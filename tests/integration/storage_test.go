package integration

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// TestStorageGrows: a larger spec.storage.size expands every PVC and
// replaces the StatefulSet (its volume templates are immutable) without
// restarting the running pods.
func TestStorageGrows(t *testing.T) {
	db := runningDatabase(t, "growing", dbv1.EngineMariaDB, 2)
	ns := db.Namespace
	podUIDs := map[string]string{}
	for _, p := range podsOf(t, db) {
		podUIDs[p.Name] = string(p.UID)
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "growing"}}
	if err := get(t, sts); err != nil {
		t.Fatal(err)
	}
	oldSTS := sts.UID

	updateSpec(t, db, func(db *dbv1.Database) { db.Spec.Storage.Size = resource.MustParse("3Gi") })
	want := resource.MustParse("3Gi")
	eventually(t, 60*time.Second, "volumes and template at 3Gi", func() string {
		for _, pvc := range pvcsOf(t, db) {
			if pvc.Spec.Resources.Requests.Storage().Cmp(want) != 0 {
				return fmt.Sprintf("PVC %s requests %s", pvc.Name, pvc.Spec.Resources.Requests.Storage())
			}
		}
		fresh := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "growing"}}
		if err := get(t, fresh); err != nil {
			return err.Error()
		}
		if fresh.UID == oldSTS {
			return "StatefulSet not replaced yet"
		}
		if s := fresh.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage(); s.Cmp(want) != 0 {
			return "template requests " + s.String()
		}
		return ""
	})
	waitRunning(t, db, 2)
	eventually(t, 30*time.Second, "the running pods adopted, not restarted", func() string {
		for _, p := range podsOf(t, db) {
			if podUIDs[p.Name] != string(p.UID) {
				t.Fatalf("pod %s was restarted by the volume expansion", p.Name)
			}
			if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "StatefulSet" {
				return fmt.Sprintf("pod %s not adopted yet: %v", p.Name, p.OwnerReferences)
			}
		}
		return ""
	})
}
