package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "example.com/database-operator/api/v1"
)

// afterFailover is a two-instance Database whose status records orders-1
// as the primary while the pods still carry the labels from before the
// failover (orders-0 primary).
func afterFailover(t *testing.T) (*dbv1.Database, []client.Object) {
	t.Helper()
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Replicas = 2
		db.Status.CurrentPrimary = "orders-1"
		db.Finalizers = []string{Finalizer}
	})
	var pods []client.Object
	for i, role := range []string{rolePrimary, roleReplica} {
		labels := selectorLabels(db)
		labels[labelRole] = role
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: fmt.Sprintf("orders-%d", i), Labels: labels, UID: types.UID("uid-" + role)},
			Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return db, pods
}

// applied names the object of a server-side apply and its role label.
func applied(t *testing.T, o runtime.ApplyConfiguration) (name, role string) {
	t.Helper()
	var u struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	return u.Metadata.Name, u.Metadata.Labels[labelRole]
}

func roleOf(t *testing.T, c client.Client, name string) string {
	t.Helper()
	pod := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return pod.Labels[labelRole]
}

// TestRolesNeverLabelTwoPrimaries: the old primary loses its label before
// the new one gets it, and when that fails the new one does not get it
// (the -rw Service would select both).
func TestRolesNeverLabelTwoPrimaries(t *testing.T) {
	ctx := context.Background()
	db, pods := afterFailover(t)
	writes := 0
	r, c := newFakeReconciler(t, &writes, append(pods, db)...)
	var order []string
	failOld := true
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			name, role := applied(t, o)
			if name == "orders-0" && failOld {
				return errors.New("the API server refused it")
			}
			order = append(order, name+"="+role)
			return c.Apply(ctx, o, opts...)
		},
	})

	err := r.reconcileRoles(ctx, db, &observed{})
	if err == nil || !strings.Contains(err.Error(), "orders-0") {
		t.Errorf("a failed demotion: %v, want an error naming orders-0", err)
	}
	if got := roleOf(t, c, "orders-1"); got != roleReplica {
		t.Errorf("orders-1 labelled %s while orders-0 still is the primary", got)
	}

	failOld = false
	if err := r.reconcileRoles(ctx, db, &observed{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"orders-0=replica", "orders-1=primary"}; !slices.Equal(order, want) {
		t.Errorf("labels applied in the order %v, want %v", order, want)
	}
}

// TestLaterPhasesRunAfterAFailure: a phase that fails after the primary
// is decided (here Topology: its ConfigMap cannot be written) does not
// stop Roles, so the recorded primary still gets its label and -rw an
// endpoint; the failure is reported in Degraded.
func TestLaterPhasesRunAfterAFailure(t *testing.T) {
	ctx := context.Background()
	db, pods := afterFailover(t)
	writes := 0
	r, c := newFakeReconciler(t, &writes, append(pods, db)...)
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if name, _ := applied(t, o); name == topologyName(db) {
				return errors.New("the API server refused it")
			}
			return c.Apply(ctx, o, opts...)
		},
	})
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	if _, err := r.Reconcile(ctx, req); err == nil || !strings.Contains(err.Error(), "writing topology") {
		t.Errorf("reconcile: %v, want the topology failure", err)
	}
	for pod, want := range map[string]string{"orders-0": roleReplica, "orders-1": rolePrimary} {
		if got := roleOf(t, c, pod); got != want {
			t.Errorf("%s labelled %q after Topology failed, want %q", pod, got, want)
		}
	}
	got := &dbv1.Database{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionDegraded); cond == nil || cond.Reason != "Topology"+reasonPhaseFailedPostfix {
		t.Errorf("Degraded %+v, want the Topology failure", cond)
	}
}
