package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/chart"
)

// FieldOwner is the one field manager the operator applies with.
const FieldOwner = "database-operator"

// ownedKinds are the kinds the chart can render. The operator watches them,
// and prunes objects of these kinds that a render no longer produces. A unit
// test checks that every kind the chart renders is listed here.
func ownedKinds() []ownedKind {
	return []ownedKind{
		{gvk: appsv1.SchemeGroupVersion.WithKind("StatefulSet"), obj: &appsv1.StatefulSet{}, list: &appsv1.StatefulSetList{}},
		{gvk: corev1.SchemeGroupVersion.WithKind("Service"), obj: &corev1.Service{}, list: &corev1.ServiceList{}},
		{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), obj: &corev1.ConfigMap{}, list: &corev1.ConfigMapList{}},
		{gvk: policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), obj: &policyv1.PodDisruptionBudget{}, list: &policyv1.PodDisruptionBudgetList{}},
		{gvk: networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), obj: &networkingv1.NetworkPolicy{}, list: &networkingv1.NetworkPolicyList{}},
		{gvk: corev1.SchemeGroupVersion.WithKind("ServiceAccount"), obj: &corev1.ServiceAccount{}, list: &corev1.ServiceAccountList{}},
		{gvk: rbacv1.SchemeGroupVersion.WithKind("Role"), obj: &rbacv1.Role{}, list: &rbacv1.RoleList{}},
		{gvk: rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), obj: &rbacv1.RoleBinding{}, list: &rbacv1.RoleBindingList{}},
	}
}

type ownedKind struct {
	gvk  schema.GroupVersionKind
	obj  client.Object
	list client.ObjectList
}

// desiredObjects renders the chart for a Database and stamps each object with
// the Database as controller owner and the hash of its content.
func desiredObjects(r *chart.Renderer, db *dbv1.Database, opts ValueOptions) ([]*unstructured.Unstructured, error) {
	objs, err := r.Render(chart.Release{Name: db.Name, Namespace: db.Namespace}, chartValues(db, opts))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if err := stamp(db, o); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// stamp makes the Database an object's controller owner and records the
// hash of its content, which tells the next reconcile whether to apply it.
func stamp(db *dbv1.Database, o *unstructured.Unstructured) error {
	o.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(db, dbv1.GroupVersion.WithKind("Database"))})
	sum, err := contentHash(o)
	if err != nil {
		return err
	}
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[appliedHashAnnotation] = sum
	o.SetAnnotations(ann)
	return nil
}

func contentHash(o *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(o.Object) // map keys are sorted: stable
	if err != nil {
		return "", fmt.Errorf("hashing %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12]), nil
}

// applyObjects server-side applies each desired object that differs from
// what the cache holds, and returns the names of those it applied. An object
// already in its desired state costs no request: the check is the applied
// hash (the render changed) and a field-by-field comparison (someone changed
// the live object).
func (r *DatabaseReconciler) applyObjects(ctx context.Context, desired []*unstructured.Unstructured) ([]string, error) {
	var applied []string
	for _, want := range desired {
		same, err := r.upToDate(ctx, want)
		if err != nil {
			return applied, err
		}
		if same {
			continue
		}
		if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(want.DeepCopy()),
			client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return applied, fmt.Errorf("applying %s %s: %w", want.GetKind(), want.GetName(), err)
		}
		applied = append(applied, want.GetKind()+"/"+want.GetName())
	}
	return applied, nil
}

// upToDate reports whether the cached live object already carries every
// field of want with the same value.
func (r *DatabaseReconciler) upToDate(ctx context.Context, want *unstructured.Unstructured) (bool, error) {
	typed, err := r.Scheme.New(want.GroupVersionKind())
	if err != nil {
		return false, fmt.Errorf("unknown kind %s: %w", want.GroupVersionKind(), err)
	}
	live := typed.(client.Object)
	if err := r.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading %s %s: %w", want.GetKind(), want.GetName(), err)
	}
	if live.GetAnnotations()[appliedHashAnnotation] != want.GetAnnotations()[appliedHashAnnotation] {
		return false, nil
	}
	liveMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err != nil {
		return false, err
	}
	// The kind is settled by the typed Get; typed objects from a cache may
	// carry no apiVersion and kind at all.
	body := make(map[string]any, len(want.Object))
	for k, v := range want.Object {
		if k != "apiVersion" && k != "kind" {
			body[k] = v
		}
	}
	return contains(liveMap, body), nil
}

// contains reports whether live holds every field of want with an equal
// value. Empty values in want match absent ones (the API server drops them);
// numbers compare by value and quantities semantically ("1Gi" == "1024Mi").
func contains(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		return containsMap(live, w)
	case []any:
		return containsList(live, w)
	case string:
		l, ok := live.(string)
		return ok && equalStrings(l, w)
	case nil:
		return isEmpty(live)
	default:
		if wn, ok := number(w); ok {
			ln, ok := number(live)
			return ok && ln == wn
		}
		return live == want
	}
}

// containsMap: live is a map holding every field of want; an empty value
// in want matches an absent one.
func containsMap(live any, want map[string]any) bool {
	l, ok := live.(map[string]any)
	if !ok {
		return len(want) == 0 && live == nil
	}
	for k, wv := range want {
		lv, present := l[k]
		if !present {
			if isEmpty(wv) {
				continue
			}
			return false
		}
		if !contains(lv, wv) {
			return false
		}
	}
	return true
}

// containsList: live is a list as long as want, each item containing
// want's.
func containsList(live any, want []any) bool {
	l, ok := live.([]any)
	if !ok {
		return len(want) == 0 && live == nil
	}
	if len(l) != len(want) {
		return false
	}
	for i := range want {
		if !contains(l[i], want[i]) {
			return false
		}
	}
	return true
}

// equalStrings compares strings, and quantities by value ("1Gi" ==
// "1024Mi").
func equalStrings(live, want string) bool {
	if live == want {
		return true
	}
	lq, err1 := resource.ParseQuantity(live)
	wq, err2 := resource.ParseQuantity(want)
	return err1 == nil && err2 == nil && lq.Cmp(wq) == 0
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	case string:
		return x == ""
	}
	return false
}

// pruneObjects deletes the objects this Database controls that the latest
// render no longer produces (a PodDisruptionBudget after scaling to one
// instance, say). It never touches PVCs or the credentials Secret.
func (r *DatabaseReconciler) pruneObjects(ctx context.Context, db *dbv1.Database, desired []*unstructured.Unstructured) ([]string, error) {
	// The topology ConfigMap is the operator's own, not the chart's.
	keep := map[string]bool{"ConfigMap/" + topologyName(db): true}
	for _, o := range desired {
		keep[o.GetKind()+"/"+o.GetName()] = true
	}
	var pruned []string
	for _, k := range ownedKinds() {
		list := k.list.DeepCopyObject().(client.ObjectList)
		if err := r.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
			return pruned, fmt.Errorf("listing %s: %w", k.gvk.Kind, err)
		}
		items, err := metaItems(list)
		if err != nil {
			return pruned, err
		}
		for _, o := range items {
			id := k.gvk.Kind + "/" + o.GetName()
			if keep[id] || !metav1.IsControlledBy(o, db) {
				continue
			}
			if err := r.Delete(ctx, o, client.Preconditions{UID: ptr.To(o.GetUID())}); client.IgnoreNotFound(err) != nil {
				return pruned, fmt.Errorf("pruning %s: %w", id, err)
			}
			pruned = append(pruned, id)
		}
	}
	slices.Sort(pruned)
	return pruned, nil
}

func metaItems(list client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("reading list: %w", err)
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		co, ok := o.(client.Object)
		if !ok {
			return nil, fmt.Errorf("list item %T is not an object", o)
		}
		out = append(out, co)
	}
	return out, nil
}
