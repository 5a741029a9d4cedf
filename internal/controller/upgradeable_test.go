package controller

import (
	"context"
	"strings"
	"testing"

	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "example.com/database-operator/api/v1"
)

func TestUpgradeableCondition(t *testing.T) {
	quiet := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" })
	failing := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Name, db.Status.CurrentPrimary = "shop", "shop-0"
		db.Status.PrimaryUnhealthySince = &metav1.Time{}
	})
	switching := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Name, db.Spec.Primary, db.Status.CurrentPrimary = "cart", "cart-2", "cart-0"
	})
	switched := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Name, db.Spec.Primary, db.Status.CurrentPrimary = "done", "done-2", "done-2"
	})
	restoring := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Name = "copy"
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "b1"}}
		db.Status.Conditions = []metav1.Condition{{Type: dbv1.ConditionRestored, Status: metav1.ConditionFalse, Reason: dbv1.ReasonRestoring}}
	})
	restoreFailed := restoring.DeepCopy()
	restoreFailed.Name, restoreFailed.Status.Conditions[0].Reason = "broken", dbv1.ReasonRestoreFailed
	running := dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly"}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}},
		Status: dbv1.BackupStatus{Phase: dbv1.BackupRunning}}
	done := *running.DeepCopy()
	done.Name, done.Status.Phase = "older", dbv1.BackupCompleted
	for _, tc := range []struct {
		name    string
		dbs     []dbv1.Database
		backups []dbv1.Backup
		status  metav1.ConditionStatus
		msg     string
	}{
		{"a restore in progress", []dbv1.Database{*restoring}, nil, metav1.ConditionFalse, "shop/copy: restore from a backup"},
		{"a failed restore is not in progress", []dbv1.Database{*restoreFailed}, []dbv1.Backup{done}, metav1.ConditionTrue, "no failover"},
		{"a backup running", nil, []dbv1.Backup{done, running}, metav1.ConditionFalse, "shop/orders: backup nightly"},
		{"nothing managed", nil, nil, metav1.ConditionTrue, "no failover"},
		{"all quiet (a finished switchover too)", []dbv1.Database{*quiet, *switched}, nil, metav1.ConditionTrue, "no failover"},
		{"a failover pending", []dbv1.Database{*quiet, *failing}, nil, metav1.ConditionFalse, "shop/shop: failover of shop-0"},
		{"a switchover asked for", []dbv1.Database{*switching}, nil, metav1.ConditionFalse, "shop/cart: switchover to cart-2"},
		{"both, listed", []dbv1.Database{*switching, *failing}, nil, metav1.ConditionFalse, "2 operation(s)"},
	} {
		c := upgradeableCondition(tc.dbs, tc.backups)
		if c.Status != tc.status || !strings.Contains(c.Message, tc.msg) || c.Type != apiv2.Upgradeable {
			t.Errorf("%s: %+v, want %s with %q", tc.name, c, tc.status, tc.msg)
		}
	}
}

// TestUpgradeableReporter: the reporter writes the OperatorCondition only
// when what it reports changes.
func TestUpgradeableReporter(t *testing.T) {
	ctx := context.Background()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "operators", Name: "database-operator.v0.2.0"}
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) { db.Spec.Primary, db.Status.CurrentPrimary = "orders-1", "orders-0" })
	writes := 0
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&apiv2.OperatorCondition{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, db).
		WithStatusSubresource(db).Build()
	u := &UpgradeableReporter{Reader: c, Conditions: NamespacedConditions{Client: countUpdates{c, &writes}, Key: key}}

	get := func() *metav1.Condition {
		oc := &apiv2.OperatorCondition{}
		if err := c.Get(ctx, key, oc); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(oc.Spec.Conditions, apiv2.Upgradeable)
	}
	if _, err := u.Reconcile(ctx, upgradeableKey); err != nil {
		t.Fatal(err)
	}
	if got := get(); got == nil || got.Status != metav1.ConditionFalse || got.Reason != ReasonOperationsInProgress {
		t.Fatalf("during a switchover: %+v", got)
	}
	if _, err := u.Reconcile(ctx, upgradeableKey); err != nil || writes != 1 {
		t.Fatalf("a reconcile with nothing new wrote (%d writes, %v)", writes, err)
	}
	db.Status.CurrentPrimary = "orders-1"
	if err := c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Reconcile(ctx, upgradeableKey); err != nil {
		t.Fatal(err)
	}
	if got := get(); got == nil || got.Status != metav1.ConditionTrue || writes != 2 {
		t.Fatalf("after the switchover: %+v (%d writes)", got, writes)
	}
	// No OperatorCondition (OLM removed it, or the name is wrong): an error, retried.
	u.Conditions = NamespacedConditions{Client: c, Key: types.NamespacedName{Namespace: "operators", Name: "missing"}}
	if _, err := u.Reconcile(ctx, upgradeableKey); err == nil {
		t.Error("a missing OperatorCondition was not reported")
	}
}

type countUpdates struct {
	client.Client
	n *int
}

func (c countUpdates) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	*c.n++
	return c.Client.Update(ctx, o, opts...)
}
