package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// TestKeptVolumesAdopted: a Database created again over the volumes an
// earlier one of its name kept (a failover had made instance 2 the
// primary, with the newest writes). Before its pods start it records the
// kept claims, names no primary in the topology and gives the Lease to no
// one, so instance 0 does not start as the primary over older data. Once
// every kept instance answers, the most advanced becomes the primary: a
// standby is promoted; a PostgreSQL former primary (started fenced) is
// restarted to start as the primary.
func TestKeptVolumesAdopted(t *testing.T) {
	for _, tt := range []struct {
		name    string
		servers map[string]*scriptedServer
		restart bool
		noData  string // an instance whose kept volume is empty
	}{
		{"the newest is a standby", map[string]*scriptedServer{
			"orders-0": {role: engine.RolePrimary, readOnly: true, applied: 150},
			"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 180},
			"orders-2": {role: engine.RoleReplica, readOnly: true, applied: 200},
		}, false, ""},
		{"the newest is a former primary", map[string]*scriptedServer{
			"orders-0": {role: engine.RoleReplica, readOnly: true, applied: 150},
			"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 180},
			"orders-2": {role: engine.RolePrimary, readOnly: true, applied: 200},
		}, true, ""},
		{"an instance whose kept volume is empty is no candidate", map[string]*scriptedServer{
			"orders-0": {role: engine.RoleReplica, readOnly: true, applied: 150},
			"orders-2": {role: engine.RoleReplica, readOnly: true, applied: 200},
		}, false, "orders-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			created := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 3
				db.CreationTimestamp = created
				db.Finalizers = []string{Finalizer}
			})
			objs := []client.Object{db}
			for i := range 3 {
				objs = append(objs, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace,
					Name: fmt.Sprintf("data-orders-%d", i), Labels: selectorLabels(db), CreationTimestamp: metav1.NewTime(created.Add(-time.Hour))}})
			}
			writes := 0
			r, c := newFakeReconciler(t, &writes, objs...)
			r.Instances = scriptedConnector(c, tt.servers)
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			got := &dbv1.Database{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if a := got.Annotations[keptVolumesAnnotation]; a != "data-orders-0,data-orders-1,data-orders-2" {
				t.Fatalf("kept volumes %q", a)
			}
			topo := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, topo); err != nil {
				t.Fatal(err)
			}
			if _, named := topo.Data[topologyPrimaryKey]; named || topo.Data[topologyAdoptKey] == "" {
				t.Fatalf("topology before the choice %v: want no primary named, adopt set", topo.Data)
			}
			lease := &coordinationv1.Lease{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, lease); err != nil {
				t.Fatal(err)
			}
			if holderOf(lease) != "" {
				t.Fatalf("the Lease names %q before the choice, want no one", holderOf(lease))
			}
			sts := &appsv1.StatefulSet{}
			if err := c.Get(ctx, req.NamespacedName, sts); err != nil || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Fatalf("StatefulSet: %v, pod management %s; want Parallel", err, sts.Spec.PodManagementPolicy)
			}

			// The pods start, each on its own data, read-only.
			for i := range 3 {
				name := fmt.Sprintf("orders-%d", i)
				status := corev1.ContainerStatus{Name: "database", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
				if name == tt.noData {
					status = corev1.ContainerStatus{Name: "database", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
						LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: noDataMessage}}}
				}
				if err := c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: selectorLabels(db)},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
						ContainerStatuses: []corev1.ContainerStatus{status}}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.CurrentPrimary != "orders-2" {
				t.Errorf("primary %q, want orders-2 (the most advanced data)", got.Status.CurrentPrimary)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil || holderOf(lease) != "orders-2" {
				t.Errorf("the Lease names %q (%v), want orders-2", holderOf(lease), err)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(topo), topo); err != nil || topo.Data[topologyPrimaryKey] != "orders-2" {
				t.Errorf("topology %v (%v), want orders-2 named", topo.Data, err)
			}
			events := strings.Join(eventNotes(r), "\n")
			if !strings.Contains(events, "KeptVolumesAdopted orders-2 is the primary: orders-2 holds the most advanced data") {
				t.Errorf("events:\n%s", events)
			}
			promoted := slices.Contains(tt.servers["orders-2"].calls, "promote")
			restarted := strings.Contains(events, "Restarted orders-2 to start it as the primary")
			if promoted == tt.restart || restarted != tt.restart {
				t.Errorf("orders-2 promoted %v, restarted %v; want restarted %v", promoted, restarted, tt.restart)
			}
			if tt.noData != "" && !strings.Contains(events, "no data on "+tt.noData) {
				t.Errorf("events do not say %s holds no data:\n%s", tt.noData, events)
			}
			for _, other := range []string{"orders-0", "orders-1"} {
				if tt.servers[other] == nil {
					continue
				}
				if slices.Contains(tt.servers[other].calls, "promote") || slices.Contains(tt.servers[other].calls, "unfence") {
					t.Errorf("%s was made writable: %v", other, tt.servers[other].calls)
				}
			}
		})
	}
}
