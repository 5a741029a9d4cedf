// Package olmrbac grants the operator's service account exactly the RBAC
// its bundle's ClusterServiceVersion declares, the way OLM grants it in
// each install mode, so tests run the operator with nothing more.
package olmrbac

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// CSVPath is the bundle's ClusterServiceVersion, from a package under tests/.
const CSVPath = "../../bundle/manifests/database-operator.clusterserviceversion.yaml"

// Bundle is what the CSV asks OLM to grant the operator's account.
type Bundle struct {
	Account     string
	Permissions []rbacv1.PolicyRule // namespaced: Roles per target namespace, or cluster-wide for AllNamespaces
	Cluster     []rbacv1.PolicyRule // clusterPermissions
	Modes       map[operatorsv1alpha1.InstallModeType]bool
}

// Load reads the CSV at path.
func Load(path string) (Bundle, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Bundle{}, err
	}
	var csv operatorsv1alpha1.ClusterServiceVersion
	if err := yaml.Unmarshal(b, &csv); err != nil {
		return Bundle{}, fmt.Errorf("%s: %w", path, err)
	}
	raw, err := json.Marshal(csv.Spec.InstallStrategy.StrategySpec)
	if err != nil {
		return Bundle{}, err
	}
	var spec operatorsv1alpha1.StrategyDetailsDeployment
	if err := json.Unmarshal(raw, &spec); err != nil {
		return Bundle{}, err
	}
	out := Bundle{Modes: map[operatorsv1alpha1.InstallModeType]bool{}}
	for _, p := range spec.Permissions {
		out.Account, out.Permissions = p.ServiceAccountName, append(out.Permissions, p.Rules...)
	}
	for _, p := range spec.ClusterPermissions {
		out.Cluster = append(out.Cluster, p.Rules...)
	}
	for _, m := range csv.Spec.InstallModes {
		out.Modes[m.Type] = m.Supported
	}
	if out.Account == "" {
		return Bundle{}, fmt.Errorf("%s grants no service account anything", path)
	}
	return out, nil
}

// Grant makes the operator's service account in namespace own and grants
// it the bundle's RBAC as OLM does: clusterPermissions as a ClusterRole;
// permissions as a ClusterRole when the operator manages all namespaces
// (targets empty), otherwise as a Role in its own namespace and in each
// target. It returns the account's user name.
func (b Bundle) Grant(ctx context.Context, c client.Client, own string, targets []string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: b.Account}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: own, Name: b.Account}}
	var objs []client.Object
	clusterRole := func(name string, rules []rbacv1.PolicyRule) {
		objs = append(objs, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})
	}
	clusterRole(own+"-cluster", b.Cluster)
	if len(targets) == 0 {
		clusterRole(own+"-all-namespaces", b.Permissions)
	} else {
		namespaces := append([]string{own}, targets...)
		slices.Sort(namespaces)
		for _, ns := range slices.Compact(namespaces) {
			objs = append(objs, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "database-operator"}, Rules: b.Permissions},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "database-operator"}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "database-operator"}})
		}
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	return fmt.Sprintf("system:serviceaccount:%s:%s", own, b.Account), nil
}
