package controller

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// TestPrimaryPositionOutlivesTheOperator: the position sampled for
// spec.failover.maxLag is recorded in the topology, so an operator that
// starts afresh (nothing in memory) still bounds a failover by it.
func TestPrimaryPositionOutlivesTheOperator(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Replicas = 2
		db.Spec.Failover.MaxLag = ptr.To[int64](10)
		db.Status.CurrentPrimary = "orders-0"
		db.Finalizers = []string{Finalizer}
	})
	objs := append([]client.Object{db}, readyPods(db)...)
	servers := map[string]*scriptedServer{
		"orders-0": {role: engine.RolePrimary, applied: 500},
		"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 500},
	}
	writes := 0
	r, c := newFakeReconciler(t, &writes, objs...)
	r.Instances = scriptedConnector(c, servers)
	r.Positions = &PrimaryPositions{}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	for range 2 { // the first writes the topology, the second samples into it
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	restarted := *r
	restarted.Positions = &PrimaryPositions{}
	pos, ok := restarted.lastPrimaryPosition(ctx, db)
	if !ok || pos.LSN != 500 {
		t.Fatalf("an operator started afresh reads the primary's position %+v (%t), want LSN 500", pos, ok)
	}
}
