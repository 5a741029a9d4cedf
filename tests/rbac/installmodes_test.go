package rbac

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/controller"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/olmrbac"
	"example.com/database-operator/tests/utils/poll"
)

// installMode is one way OLM can install the operator: its own namespace
// and the namespaces it manages (none: all).
type installMode struct {
	name    operatorsv1alpha1.InstallModeType
	targets func(own string) []string
}

var installModes = []installMode{
	{operatorsv1alpha1.InstallModeTypeAllNamespaces, func(string) []string { return nil }},
	{operatorsv1alpha1.InstallModeTypeOwnNamespace, func(own string) []string { return []string{own} }},
	{operatorsv1alpha1.InstallModeTypeSingleNamespace, func(own string) []string { return []string{own + "-a"} }},
	{operatorsv1alpha1.InstallModeTypeMultiNamespace, func(own string) []string { return []string{own + "-a", own + "-b"} }},
}

// TestInstallModes runs the operator as its service account with exactly
// the RBAC the bundle declares, granted the way OLM grants it in each
// install mode, through a Database's life: created, backed up, grown,
// deleted with its volumes. A Database in a namespace the mode does not
// cover is left alone. Then the API server's audit log of those runs is
// read: no request of the operator was refused, no rule is a wildcard, and
// no granted verb went unused unless a test elsewhere uses it (named).
//
// OLM refuses a CSV with a conversion webhook (this one converts v1alpha1)
// that supports anything but AllNamespaces, so the CSV offers that mode
// alone today; the other three are what the same permissions grant once
// it may (and what a kustomize install with --watch-namespaces grants:
// config/overlays/namespaced).
func TestInstallModes(t *testing.T) {
	rb, err := olmrbac.Load(olmrbac.CSVPath)
	if err != nil {
		t.Fatal(err)
	}
	if !rb.Modes[operatorsv1alpha1.InstallModeTypeAllNamespaces] {
		t.Fatalf("the CSV does not support AllNamespaces: %v", rb.Modes)
	}
	for _, rules := range [][]rbacv1.PolicyRule{rb.Permissions, rb.Cluster} {
		for _, r := range rules {
			if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
				t.Errorf("a wildcard in the bundle's RBAC: %+v", r)
			}
		}
	}
	for i, m := range installModes {
		t.Run(string(m.name), func(t *testing.T) {
			own := fmt.Sprintf("operator-%d", i)
			runInstallMode(t, rb, m, own)
		})
	}
	t.Run("audit log", func(t *testing.T) { checkAudit(t, rb) })
}

// accountPrefix names the operator's service accounts of these runs in
// the audit log.
const accountPrefix = "system:serviceaccount:operator-"

func runInstallMode(t *testing.T, rb olmrbac.Bundle, m installMode, own string) {
	ctx := context.Background()
	targets := m.targets(own)
	managed := targets
	if len(managed) == 0 {
		managed = []string{own + "-a", own + "-b"} // any namespace: two of them
	}
	outside := own + "-outside"
	for _, ns := range append(slices.Clone(append([]string{own}, managed...)), outside) {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	user, err := rb.Grant(ctx, k8s, own, targets)
	if err != nil {
		t.Fatal(err)
	}

	// The operator, as its account: leader election in its own namespace,
	// the cache limited to the targets (WATCH_NAMESPACES, from OLM's
	// olm.targetNamespaces), no server behind the simulated pods.
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		// One manager per mode in this process: the controllers' names repeat.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Scheme:     scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionID: "database-operator.example.com", LeaderElectionNamespace: own,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(targets),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The operator's Deployment (its pods run nothing here: the operator
	// runs in this process), the owner of its monitoring objects.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "database-operator-controller-manager"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"control-plane": "controller-manager"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"control-plane": "controller-manager"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "example.com/database-operator/manager:test"}}}}}}
	if err := k8s.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := controller.Setup(mgr, controller.Options{
		OperatorDeployment: dep.Name,
		Values:             controller.ValueOptions{OperatorNamespace: own, OperatorImage: "example.com/database-operator/manager:test"},
		Resolve: func(_ context.Context, pod *corev1.Pod, _ int) (engine.Endpoint, error) {
			return engine.Endpoint{}, fmt.Errorf("pod %s/%s is simulated: no server runs", pod.Namespace, pod.Name)
		},
	}); err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
	}()

	// The Prometheus operator's objects, in the operator's own namespace,
	// admitted by their real CRDs' schemas, the alerts whole.
	want, err := controller.MonitoringObjectsIn(own)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, own+": the ServiceMonitor, PodMonitor and PrometheusRule", func() string {
		for _, w := range want {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(w.GroupVersionKind())
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
				return err.Error()
			}
			if !equality.Semantic.DeepEqual(got.Object["spec"], w.Object["spec"]) {
				return fmt.Sprintf("%s %s: the spec applied is not the shipped one", w.GetKind(), w.GetName())
			}
			if refs := got.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != dep.UID {
				return fmt.Sprintf("%s %s: owned by %v, not by the operator's Deployment", w.GetKind(), w.GetName(), refs)
			}
		}
		return ""
	})

	dbs := map[string]*dbv1.Database{}
	for _, ns := range append(slices.Clone(managed), outside) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}, Spec: dbv1.DatabaseSpec{
			Engine: dbv1.EnginePostgreSQL, Replicas: 2, Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")},
			DeletionPolicy: dbv1.DeletionPolicyDelete}}
		if err := k8s.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		dbs[ns] = db
	}
	for _, ns := range managed {
		t.Logf("%s: Database in %s", m.name, ns)
		waitFor(t, 2*time.Minute, ns+": the Database's objects and status", func() string {
			db := &dbv1.Database{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(dbs[ns]), db); err != nil {
				return err.Error()
			}
			for _, c := range db.Status.Conditions {
				if strings.Contains(strings.ToLower(c.Message), "forbidden") {
					return fmt.Sprintf("condition %s: %s", c.Type, c.Message)
				}
			}
			sts := &appsv1.StatefulSet{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, sts); err != nil {
				return "StatefulSet: " + err.Error()
			}
			for _, s := range []string{"orders-credentials", "orders-replication", "orders-tls", "orders-app"} {
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: s}, &corev1.Secret{}); err != nil {
					return "Secret: " + err.Error()
				}
			}
			if db.Status.Phase == "" {
				return "no phase yet"
			}
			return ""
		})
	}

	// A backup onto a volume: its claim and Job are made.
	ns := managed[0]
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "first"}, Spec: dbv1.BackupSpec{
		Database: dbv1.LocalObjectReference{Name: "orders"}, Target: &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{}}}}
	if err := k8s.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, ns+": the backup's Job", func() string {
		jobs := &batchv1.JobList{}
		if err := k8s.List(ctx, jobs, client.InNamespace(ns)); err != nil {
			return err.Error()
		}
		if len(jobs.Items) == 0 {
			got := &dbv1.Backup{}
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(b), got)
			return fmt.Sprintf("no Job; Backup %s: %s", got.Status.Phase, got.Status.Message)
		}
		return ""
	})

	// Growing the storage reads the StorageClass and patches the claims.
	grow := &dbv1.Database{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(dbs[ns]), grow); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(grow.DeepCopy())
	grow.Spec.Storage.Size = resource.MustParse("2Gi")
	if err := k8s.Patch(ctx, grow, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, ns+": the claims grown", func() string {
		pvcs := &corev1.PersistentVolumeClaimList{}
		if err := k8s.List(ctx, pvcs, client.InNamespace(ns)); err != nil {
			return err.Error()
		}
		n := 0
		for _, p := range pvcs.Items {
			if strings.HasPrefix(p.Name, "data-orders-") {
				if q := p.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
					return fmt.Sprintf("%s asks for %s", p.Name, q.String())
				}
				n++
			}
		}
		if n == 0 {
			return "no instance claims yet"
		}
		return ""
	})

	// Outside the managed namespaces nothing is touched.
	if len(targets) > 0 {
		got := &dbv1.Database{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dbs[outside]), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Finalizers) > 0 || got.Status.Phase != "" {
			t.Errorf("a Database in %s, which %s does not cover, was reconciled: finalizers %v, phase %q", outside, m.name, got.Finalizers, got.Status.Phase)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: outside, Name: "orders"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("a StatefulSet in %s, which %s does not cover: %v", outside, m.name, err)
		}
	}

	// Deleted with its volumes.
	for _, ns := range managed {
		if err := k8s.Delete(ctx, dbs[ns]); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range managed {
		waitFor(t, 2*time.Minute, ns+": the Database and its claims gone", func() string {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(dbs[ns]), &dbv1.Database{}); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("the Database is still there (%v)", err)
			}
			pvcs := &corev1.PersistentVolumeClaimList{}
			if err := k8s.List(ctx, pvcs, client.InNamespace(ns)); err != nil {
				return err.Error()
			}
			for _, p := range pvcs.Items {
				if strings.HasPrefix(p.Name, "data-orders-") && p.DeletionTimestamp == nil {
					return "claim " + p.Name + " not deleted"
				}
			}
			return ""
		})
	}
	// The one outside: no finalizer of ours holds it.
	if err := k8s.Delete(ctx, dbs[outside]); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}

	// The operator uninstalled (its Deployment deleted): its monitoring
	// objects go with it, or their alerts would fire forever.
	if err := k8s.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, own+": the monitoring objects collected with the operator's Deployment", func() string {
		for _, w := range want {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(w.GroupVersionKind())
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(w), got); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("%s %s still there (%v)", w.GetKind(), w.GetName(), err)
			}
		}
		return ""
	})
}

// usedElsewhere are grants these runs do not use, each with where they
// are used (and tested): a grant neither used here nor named here fails
// the audit check, so an unneeded verb cannot creep in.
var usedElsewhere = map[string]string{
	"example.com/databases/finalizers:update":          "blockOwnerDeletion on the objects a Database owns, where the OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift; not in this API server)",
	"example.com/backups/finalizers:update":            "blockOwnerDeletion on a Backup's Job, as for Databases",
	"example.com/databases:get":                        "the scale webhook reads the Database afresh (tests/integration scale tests)",
	"authorization.k8s.io/subjectaccessreviews:create": "the Backup and Database webhooks (tests/integration backup_access_test.go)",
	"authentication.k8s.io/tokenreviews:create":        "the metrics endpoint's authentication (config/rbac/metrics_auth_role.yaml)",
	"/secrets:patch":                                   "an application password rotated onto the server is recorded on its Secret; a renewed CA bundle goes into the application Secret (tests/e2e, controller unit tests)",
	"/pods:delete":                                     "a replica's rebuild and the rollout of a changed pod template (tests/e2e)",
	"example.com/backups:create":                       "scheduled backups (tests/integration, tests/e2e)",
	"example.com/backups:delete":                       "backups pruned by retention (tests/e2e)",
	"batch/jobs:get":                                   "a finished Backup reads its Job afresh (tests/e2e)",
	"batch/jobs:delete":                                "a Backup's Job pruned (tests/e2e)",
	"/configmaps:delete":                               "objects the chart no longer renders are pruned (tests/integration)",
	"/services:delete":                                 "objects the chart no longer renders are pruned (tests/integration)",
	"/serviceaccounts:delete":                          "objects the chart no longer renders are pruned (tests/integration)",
	"policy/poddisruptionbudgets:delete":               "objects the chart no longer renders are pruned (tests/integration)",
	"networking.k8s.io/networkpolicies:delete":         "networkPolicy disabled: the policy is pruned (tests/integration)",
	"rbac.authorization.k8s.io/roles:delete":           "objects the chart no longer renders are pruned (tests/integration)",
	"rbac.authorization.k8s.io/rolebindings:delete":    "objects the chart no longer renders are pruned (tests/integration)",
	"/events:patch":                                    "a repeated leader election Event is merged (patched) into the first",
	"/pods/log:get":                                    "the diagnosis of a crash-looping instance reads its previous log (tests/e2e diagnosis_test.go)",
}

// auditEvent is the part of an audit event read here.
type auditEvent struct {
	Verb             string `json:"verb"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
}

// checkAudit reads every request the operator's accounts made in these
// runs: none refused, and each granted verb used (or used elsewhere, named).
func checkAudit(t *testing.T, rb olmrbac.Bundle) {
	f, err := os.Open(cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used := map[string]int{}
	var refused []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if e.ImpersonatedUser == nil || !strings.HasPrefix(e.ImpersonatedUser.Username, accountPrefix) || e.ObjectRef == nil {
			continue
		}
		res := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			res += "/" + e.ObjectRef.Subresource
		}
		key := e.ObjectRef.APIGroup + "/" + res + ":" + e.Verb
		if e.ResponseStatus != nil && e.ResponseStatus.Code == 403 {
			refused = append(refused, fmt.Sprintf("%s %s/%s (%s)", key, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ResponseStatus.Message))
			continue
		}
		used[key]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Fatal("the audit log has no request of the operator's accounts")
	}
	for _, r := range refused {
		t.Errorf("refused: %s", r)
	}
	granted := map[string]bool{}
	for _, r := range append(slices.Clone(rb.Permissions), rb.Cluster...) {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					granted[g+"/"+res+":"+v] = true
				}
			}
		}
	}
	var unused, explained []string
	for g := range granted {
		if used[g] > 0 {
			continue
		}
		if res, ok := strings.CutSuffix(g, ":create"); ok && used[res+":patch"] > 0 {
			// Server-side apply makes an object with a patch, which the API
			// server authorizes as create too (refused without it: found here).
			explained = append(explained, g+": server-side apply creating the object")
			continue
		}
		if res, ok := strings.CutSuffix(g, ":list"); ok && used[res+":watch"] > 0 {
			// The informer's first list: a watch that sends the initial
			// objects here (WatchList), a LIST on API servers without it.
			explained = append(explained, g+": the informers' initial list on API servers that stream none")
			continue
		}
		if why, ok := usedElsewhere[g]; ok {
			explained = append(explained, g+": "+why)
			continue
		}
		unused = append(unused, g)
	}
	sort.Strings(unused)
	sort.Strings(explained)
	for _, g := range unused {
		t.Errorf("granted but never used, here or by a named test elsewhere: %s", g)
	}
	for _, g := range explained {
		t.Logf("granted, used elsewhere: %s", g)
	}
	var keys []string
	for k, n := range used {
		keys = append(keys, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(keys)
	t.Logf("the operator's requests in these runs (%d kinds): %s", len(keys), strings.Join(keys, ", "))
}

// waitFor polls cond until it returns "" or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	poll.Eventually(t, 200*time.Millisecond, timeout, what, cond)
}
