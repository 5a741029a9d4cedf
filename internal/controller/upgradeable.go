package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	"github.com/operator-framework/operator-lib/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "example.com/database-operator/api/v1"
)

// No RBAC marker for OperatorConditions: OLM grants the operator's service
// account a Role for its own OperatorCondition, and nothing more is needed.

// Reasons of the Upgradeable condition the operator reports to OLM.
const (
	ReasonOperationsInProgress   = "OperationsInProgress"
	ReasonNoOperationsInProgress = "NoOperationsInProgress"
)

// UpgradeableReporter tells OLM, through the operator's OperatorCondition
// (operator-lib's conditions package), not to upgrade the operator while a
// failover, a switchover, a restore or a backup is in progress on any
// Database it manages: a new operator taking over halfway could fence or
// promote on stale decisions, or read a Job's result in another format. It
// reports Upgradeable=True again once every Database is quiet.
type UpgradeableReporter struct {
	client.Reader
	Conditions conditions.Factory
}

// upgradeableKey is the one request the reporter reconciles: every Database
// change leads to it.
var upgradeableKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "upgradeable"}}

// busy lists the operations in progress that an operator upgrade must not
// interrupt, one "namespace/name: what" each, sorted.
func busy(dbs []dbv1.Database, backups []dbv1.Backup) []string {
	var out []string
	for _, db := range dbs {
		key := db.Namespace + "/" + db.Name
		switch {
		case db.Status.PrimaryUnhealthySince != nil:
			out = append(out, key+": failover of "+db.Status.CurrentPrimary)
		case db.Spec.Primary != "" && db.Status.CurrentPrimary != "" && db.Spec.Primary != db.Status.CurrentPrimary:
			out = append(out, key+": switchover to "+db.Spec.Primary)
		case !restoreDone(&db):
			out = append(out, key+": restore from a backup")
		}
	}
	for _, b := range backups {
		if b.Status.Phase == dbv1.BackupRunning {
			out = append(out, b.Namespace+"/"+b.Spec.Database.Name+": backup "+b.Name)
		}
	}
	slices.Sort(out)
	return out
}

// upgradeableCondition is what the reporter sets for the Databases.
func upgradeableCondition(dbs []dbv1.Database, backups []dbv1.Backup) metav1.Condition {
	ops := busy(dbs, backups)
	if len(ops) == 0 {
		return metav1.Condition{Type: apiv2.Upgradeable, Status: metav1.ConditionTrue, Reason: ReasonNoOperationsInProgress,
			Message: "no failover, switchover, restore or backup in progress"}
	}
	return metav1.Condition{Type: apiv2.Upgradeable, Status: metav1.ConditionFalse, Reason: ReasonOperationsInProgress,
		Message: fmt.Sprintf("wait for %d operation(s) to finish: %s", len(ops), strings.Join(ops, "; "))}
}

// Reconcile sets the condition when it changed.
func (u *UpgradeableReporter) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	dbs := &dbv1.DatabaseList{}
	if err := u.List(ctx, dbs); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing Databases: %w", err)
	}
	backups := &dbv1.BackupList{}
	// A cluster whose CRDs predate the Backup kind (the previous release's,
	// during an upgrade) has no backups to wait for.
	if err := u.List(ctx, backups); err != nil && !meta.IsNoMatchError(err) {
		return ctrl.Result{}, fmt.Errorf("listing Backups: %w", err)
	}
	want := upgradeableCondition(dbs.Items, backups.Items)
	cond, err := u.Conditions.NewCondition(apiv2.ConditionType(apiv2.Upgradeable))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("the operator's OperatorCondition: %w", err)
	}
	cur, err := cond.Get(ctx)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("the operator's OperatorCondition: %w", err)
	}
	if err == nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
		return ctrl.Result{}, nil
	}
	if err := cond.Set(ctx, want.Status, conditions.WithReason(want.Reason), conditions.WithMessage(want.Message)); err != nil {
		return ctrl.Result{}, fmt.Errorf("setting Upgradeable=%s: %w", want.Status, err)
	}
	log.FromContext(ctx).Info("reported to OLM", "upgradeable", want.Status, "reason", want.Reason, "message", want.Message)
	return ctrl.Result{}, nil
}

// SetupWithManager reconciles the one condition on every Database and
// Backup change.
func (u *UpgradeableReporter) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{upgradeableKey}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("upgradeable").
		Watches(&dbv1.Database{}, all).
		Watches(&dbv1.Backup{}, all).
		Complete(u)
}

// NamespacedConditions is a conditions.Factory for an OperatorCondition
// named explicitly. In a pod OLM manages, conditions.InClusterFactory finds
// the name (OPERATOR_CONDITION_NAME) and namespace (the service account's)
// itself; this one serves where there is no pod: tests, and the operator
// run outside the cluster.
type NamespacedConditions struct {
	Client client.Client
	Key    types.NamespacedName
}

var _ conditions.Factory = NamespacedConditions{}

// NewCondition is the operator's OperatorCondition, condition type t.
func (f NamespacedConditions) NewCondition(t apiv2.ConditionType) (conditions.Condition, error) {
	return namespacedCondition{client: f.Client, key: f.Key, typ: string(t)}, nil
}

// GetNamespacedName names the operator's OperatorCondition.
func (f NamespacedConditions) GetNamespacedName() (*types.NamespacedName, error) {
	key := f.Key
	return &key, nil
}

// namespacedCondition reads and writes one condition type in the
// OperatorCondition's spec.conditions, as operator-lib's does.
type namespacedCondition struct {
	client client.Client
	key    types.NamespacedName
	typ    string
}

func (c namespacedCondition) Get(ctx context.Context) (*metav1.Condition, error) {
	oc := &apiv2.OperatorCondition{}
	if err := c.client.Get(ctx, c.key, oc); err != nil {
		return nil, err
	}
	if cond := meta.FindStatusCondition(oc.Spec.Conditions, c.typ); cond != nil {
		return cond, nil
	}
	return nil, fmt.Errorf("condition %s not set", c.typ)
}

func (c namespacedCondition) Set(ctx context.Context, status metav1.ConditionStatus, opts ...conditions.Option) error {
	oc := &apiv2.OperatorCondition{}
	if err := c.client.Get(ctx, c.key, oc); err != nil {
		return err
	}
	cond := metav1.Condition{Type: c.typ, Status: status}
	for _, o := range opts {
		o(&cond)
	}
	meta.SetStatusCondition(&oc.Spec.Conditions, cond)
	return c.client.Update(ctx, oc)
}
