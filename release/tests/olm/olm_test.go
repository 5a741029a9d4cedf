// Package olm_test installs the operator the way OperatorHub users do and
// upgrades it along its channel, with a real OLM v0 (the olm and catalog
// operators built from operator-lifecycle-manager's module) running as host
// processes against the local control plane, and the project's catalog
// served over gRPC on loopback by operator-registry's library. OLM's
// binaries listen on all interfaces: `make test-olm` runs this test in a
// private network namespace that has only loopback.
package olm_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/pkg/api"
	"github.com/operator-framework/operator-registry/pkg/cache"
	"github.com/operator-framework/operator-registry/pkg/server"
	"google.golang.org/grpc"
	health "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/controller"
	"example.com/database-operator/tests/utils/localcluster"
)

const (
	pkg       = "database-operator"
	olderCSV  = "database-operator.v0.1.0"
	newerCSV  = "database-operator.v0.2.0"
	opNS      = "operators"
	olmNS     = "olm"
	appNS     = "apps"
	csvFile   = "manifests/database-operator.clusterserviceversion.yaml"
	newBundle = "../../../bundle"
)

func root(p string) string { return filepath.Join("..", "..", "..", p) }

func TestSubscribeAndUpgrade(t *testing.T) {
	kubeBin, olmBin := os.Getenv("LOCAL_CLUSTER_BIN"), os.Getenv("OLM_BIN")
	if kubeBin == "" || olmBin == "" {
		t.Fatal("LOCAL_CLUSTER_BIN and OLM_BIN are not set: run this test with `make test-olm`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ctrllog.SetLogger(logr.Discard()) // the reporter's log lines are not needed here
	dir, err := os.MkdirTemp("", "dbop-olm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster, OLM and catalog logs kept in %s/logs", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	start := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: kubeBin, Dir: dir, CRDDirs: []string{filepath.Join(olmBin, "olm-crds")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextv1.AddToScheme, dbv1.AddToScheme, apiv2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// What an OLM install has: its namespaces, the cluster OLMConfig, an
	// OperatorGroup for OLM's own namespace and the global one in operators.
	for _, ns := range []string{olmNS, opNS, appNS} {
		create(t, cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	create(t, cl, obj("operators.coreos.com/v1", "OLMConfig", "", "cluster", nil))
	create(t, cl, obj("operators.coreos.com/v1", "OperatorGroup", olmNS, "olm-operators", map[string]any{"targetNamespaces": []any{olmNS}}))
	create(t, cl, obj("operators.coreos.com/v1", "OperatorGroup", opNS, "global-operators", map[string]any{}))

	// The catalog: first only the older release, later the full channel.
	port := freePort(t)
	older, newer := catalogDir(t, dir, "older", olderCSV), catalogDir(t, dir, "newer", "")
	srv := serveCatalog(t, older, port)

	// OLM's two operators. Both serve health and metrics on :8080 of every
	// interface; the catalog operator moves to :8443 by having TLS.
	certFile, keyFile, err := c.Issue(filepath.Join(dir, "pki"), "catalog-operator", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	runProcess(t, dir, "catalog", filepath.Join(olmBin, "catalog"), []string{
		"--namespace", olmNS, "--kubeconfig", c.Kubeconfig, "--writeStatusName", "", "--set-workload-user-id=false",
		"--tls-cert", certFile, "--tls-key", keyFile,
		// Required, but never used with an address-based catalog: no pods are made.
		"--configmapServerImage", "unused", "--opmImage", "unused", "--util-image", "unused",
	}, nil)
	runProcess(t, dir, "olm", filepath.Join(olmBin, "olm"), []string{"--namespace", olmNS, "--writeStatusName", ""},
		[]string{"KUBECONFIG=" + c.Kubeconfig, "OPERATOR_NAMESPACE=" + olmNS, "OPERATOR_NAME=olm-operator"})
	t.Logf("cluster and OLM started in %s", time.Since(start).Round(100*time.Millisecond))

	create(t, cl, obj("operators.coreos.com/v1alpha1", "CatalogSource", olmNS, pkg, map[string]any{
		"sourceType": "grpc", "address": fmt.Sprintf("127.0.0.1:%d", port),
		"displayName": "Database Operator", "publisher": "database-operator maintainers",
	}))
	subscribed := time.Now()
	create(t, cl, obj("operators.coreos.com/v1alpha1", "Subscription", opNS, pkg, map[string]any{
		"channel": "stable", "name": pkg, "source": pkg, "sourceNamespace": olmNS,
		"startingCSV": olderCSV, "installPlanApproval": "Automatic",
	}))
	waitCSV(t, ctx, cl, olderCSV, "Succeeded")
	t.Logf("subscribed: %s Succeeded in %s", olderCSV, time.Since(subscribed).Round(100*time.Millisecond))
	crd := &apiextv1.CustomResourceDefinition{}
	if err := cl.Get(ctx, client.ObjectKey{Name: "databases.example.com"}, crd); err != nil {
		t.Fatalf("the CRD was not installed: %v", err)
	}
	if strings.Contains(mustJSON(t, crd.Spec), "maxLag") {
		t.Fatal("the older release's CRD already has maxLag: the upgrade would prove nothing")
	}
	if err := cl.Get(ctx, client.ObjectKey{Name: "backups.example.com"}, &apiextv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the older release already has the Backup CRD (%v): the upgrade would not prove it arrives", err)
	}

	// A user's Database, created under the older release.
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "orders"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgreSQL, Version: "16", Replicas: 3,
			Storage: dbv1.StorageSpec{Size: resource.MustParse("5Gi")}},
	}
	db.Spec.Primary = "orders-1" // a switchover the user asked for
	if err := cl.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	before := db.DeepCopy()

	// OLM gave the operator an OperatorCondition and told it its name.
	checkConditionEnv(t, ctx, cl, bundleDeploymentName(t), olderCSV)
	// The operator's reporter (its own code, run here: kwok runs no
	// container) sees the switchover in progress and reports
	// Upgradeable=False through that OperatorCondition.
	reporter := &controller.UpgradeableReporter{Reader: cl, Conditions: controller.NamespacedConditions{
		Client: cl, Key: types.NamespacedName{Namespace: opNS, Name: olderCSV}}}
	db.Status.CurrentPrimary = "orders-0"
	if err := cl.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	reconcileUpgradeable(t, ctx, reporter)

	// The newer release enters the channel: OLM reconnects to the catalog
	// and resolves the upgrade edge, but holds the upgrade while the
	// operator says it is not upgradeable.
	srv.Stop()
	serveCatalog(t, newer, port)
	// OLM has seen the newer release and says why it waits...
	var why string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		why = csvPhase(ctx, cl, newerCSV) + " " + csvMessage(ctx, cl, newerCSV)
		return strings.HasPrefix(why, "Pending OperatorConditionNotUpgradeable:"), nil
	})
	if err != nil {
		t.Fatalf("OLM does not hold %s for the operator's condition: %s", newerCSV, why)
	}
	// ... and keeps waiting.
	held := time.Now()
	for time.Since(held) < 10*time.Second {
		if phase := csvPhase(ctx, cl, newerCSV); phase == "Succeeded" {
			t.Fatalf("OLM upgraded to %s while the operator reported Upgradeable=False", newerCSV)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The older CSV is still installed (OLM marks it Replacing) and its
	// Deployment still runs the older operator.
	if phase := csvPhase(ctx, cl, olderCSV); phase != "Succeeded" && phase != "Replacing" {
		t.Fatalf("%s is %q while the upgrade is held", olderCSV, phase)
	}
	if image := deploymentImage(t, ctx, cl, bundleDeploymentName(t)); !strings.HasSuffix(image, ":v0.1.0") {
		t.Fatalf("the operator runs %s while the upgrade is held", image)
	}
	t.Logf("upgrade held for %s while Upgradeable=False: %s is %q (%s)", time.Since(held).Round(time.Second),
		newerCSV, csvPhase(ctx, cl, newerCSV), csvMessage(ctx, cl, newerCSV))

	// The switchover finishes; the reporter clears the condition and OLM
	// replaces the CSV.
	db.Status.CurrentPrimary = "orders-1"
	if err := cl.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	upgrading := time.Now()
	reconcileUpgradeable(t, ctx, reporter)
	waitCSV(t, ctx, cl, newerCSV, "Succeeded")
	waitGone(t, ctx, cl, olderCSV)
	t.Logf("upgraded: %s Succeeded and %s removed %s after Upgradeable=True",
		newerCSV, olderCSV, time.Since(upgrading).Round(100*time.Millisecond))

	var state string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		sub := obj("operators.coreos.com/v1alpha1", "Subscription", opNS, pkg, nil)
		if err := cl.Get(ctx, client.ObjectKeyFromObject(sub), sub); err != nil {
			return false, nil
		}
		installed, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
		state, _, _ = unstructured.NestedString(sub.Object, "status", "state")
		state = installed + " " + state
		return state == newerCSV+" AtLatestKnown", nil
	})
	if err != nil {
		t.Errorf("subscription: %s, want %s AtLatestKnown", state, newerCSV)
	}

	// What the cluster has is what the newer bundle says.
	bundleCSV := readCSV(t, filepath.Join(newBundle, csvFile))
	if err := cl.Get(ctx, client.ObjectKey{Name: "databases.example.com"}, crd); err != nil {
		t.Fatal(err)
	}
	wantCRD := &apiextv1.CustomResourceDefinition{}
	readYAML(t, filepath.Join(newBundle, "manifests/example.com_databases.yaml"), wantCRD)
	if got, want := mustJSON(t, crd.Spec.Versions), mustJSON(t, wantCRD.Spec.Versions); got != want {
		t.Error("the CRD on the cluster differs from the newer bundle's")
	}
	// The newer release adds the Backup kind: its CRD came with the upgrade.
	backups := &apiextv1.CustomResourceDefinition{}
	if err := cl.Get(ctx, client.ObjectKey{Name: "backups.example.com"}, backups); err != nil {
		t.Errorf("the Backup CRD of the newer release: %v", err)
	}
	checkClusterRoles(t, ctx, cl, bundleCSV)
	checkDeployment(t, ctx, cl, bundleCSV)
	checkWebhooks(t, ctx, cl, bundleCSV)
	checkConversion(t, ctx, cl, bundleCSV)

	// The webhooks OLM registered are live and fail closed. Here the
	// operator's Deployment runs in kwok pods that execute nothing, so the
	// Service OLM made for the webhooks has no backend: a Database write
	// cannot be admitted, and is refused rather than let through
	// unvalidated (failurePolicy Fail). That is also why the user's Database
	// below was created under v0.1.0, which has no webhooks, and is read as
	// v1, the version it is stored in (no conversion needed). The webhooks'
	// behaviour with a real server is proven on the local cluster by
	// tests/integration (webhook_test.go).
	probe := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "probe"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Replicas: 1, Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")}}}
	if err := cl.Create(ctx, probe); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a Database create with the webhooks' backend down: %v, want a refusal from the webhook call", err)
	}

	// The Database created under the older release survived, unchanged.
	after := &dbv1.Database{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(db), after); err != nil {
		t.Fatalf("the Database did not survive the upgrade: %v", err)
	}
	if after.UID != before.UID || mustJSON(t, after.Spec) != mustJSON(t, before.Spec) {
		t.Errorf("the Database changed across the upgrade:\nbefore %s\nafter  %s", mustJSON(t, before.Spec), mustJSON(t, after.Spec))
	}

	// kubectl database report --operator finds the operator OLM installed
	// and collects OLM's objects through discovery and the dynamic client.
	checkReport(t, dir, c.Kubeconfig)
}

// checkReport runs `kubectl database report --operator` and checks that the
// zip holds the operator's Deployment and OLM's objects of its namespace.
func checkReport(t *testing.T, dir, kubeconfig string) {
	t.Helper()
	bin := filepath.Join(dir, "kubectl-database")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-database")
	build.Dir = root(".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "report.zip")
	if out, err := exec.Command(bin, "--kubeconfig", kubeconfig, "report", "--operator", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("kubectl database report --operator: %v\n%s", err, out)
	}
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	for _, want := range []string{"operator/" + opNS + "/deployments/", "olm/" + opNS + "/subscriptions/", "olm/" + opNS + "/clusterserviceversions/" + newerCSV,
		"olm/" + opNS + "/installplans/", "olm/" + opNS + "/operatorgroups/", "crds.yaml", "databases.yaml"} {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("the report has no %s*; it has:\n%s", want, strings.Join(names, "\n"))
		}
	}
}

// catalogDir writes the project's catalog for serving: with only the
// bundle named only (and its channel entries) when set. Bundle images are
// emptied: OLM then installs from the objects inlined in the catalog
// instead of unpacking the image in a Job, which would need a kubelet.
func catalogDir(t *testing.T, dir, name, only string) string {
	t.Helper()
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(root("catalog")))
	if err != nil {
		t.Fatal(err)
	}
	if only != "" {
		cfg.Bundles = slices.DeleteFunc(cfg.Bundles, func(b declcfg.Bundle) bool { return b.Name != only })
		for i := range cfg.Channels {
			cfg.Channels[i].Entries = slices.DeleteFunc(cfg.Channels[i].Entries, func(e declcfg.ChannelEntry) bool { return e.Name != only })
			for j := range cfg.Channels[i].Entries {
				cfg.Channels[i].Entries[j].Replaces, cfg.Channels[i].Entries[j].SkipRange = "", ""
			}
		}
	}
	for i := range cfg.Bundles {
		cfg.Bundles[i].Image = ""
	}
	out := filepath.Join(dir, "catalogs", name, pkg)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(*cfg, &buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "catalog.yaml"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(out)
}

type catalogServer struct{ grpc *grpc.Server }

func (s *catalogServer) Stop() { s.grpc.Stop() }

// serveCatalog serves a catalog directory over gRPC on 127.0.0.1:port, as
// `opm serve` does (registry, health and reflection services).
func serveCatalog(t *testing.T, fbc string, port int) *catalogServer {
	t.Helper()
	store, err := cache.New(filepath.Join(fbc, "..", filepath.Base(fbc)+"-cache"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.LoadOrRebuild(context.Background(), store, os.DirFS(fbc)); err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	// The port was just released by the previous server: retry briefly.
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var lerr error
		l, lerr = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		return lerr == nil, nil
	})
	if err != nil {
		t.Fatalf("listening on %d: %v", port, err)
	}
	s := grpc.NewServer()
	api.RegisterRegistryServer(s, server.NewRegistryServer(store))
	health.RegisterHealthServer(s, server.NewHealthServer())
	go func() { _ = s.Serve(l) }()
	cs := &catalogServer{grpc: s}
	t.Cleanup(cs.Stop)
	return cs
}

func runProcess(t *testing.T, dir, name, bin string, args, env []string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, "logs", name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
}

func obj(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func create(t *testing.T, cl client.Client, o client.Object) {
	t.Helper()
	if err := cl.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

func waitCSV(t *testing.T, ctx context.Context, cl client.Client, name, phase string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		csv := obj("operators.coreos.com/v1alpha1", "ClusterServiceVersion", opNS, name, nil)
		if err := cl.Get(ctx, client.ObjectKeyFromObject(csv), csv); err != nil {
			last = err.Error()
			return false, nil
		}
		got, _, _ := unstructured.NestedString(csv.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(csv.Object, "status", "message")
		last = got + ": " + msg
		return got == phase, nil
	})
	if err != nil {
		t.Fatalf("CSV %s not %s: %s", name, phase, last)
	}
}

func waitGone(t *testing.T, ctx context.Context, cl client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		csv := obj("operators.coreos.com/v1alpha1", "ClusterServiceVersion", opNS, name, nil)
		err := cl.Get(ctx, client.ObjectKeyFromObject(csv), csv)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("CSV %s still there after the upgrade", name)
	}
}

func readCSV(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	readYAML(t, path, &u.Object)
	return u
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkClusterRoles: what OLM granted the newer CSV cluster-wide is what
// the bundle asks for: its clusterPermissions, its permissions (a global
// OperatorGroup makes them cluster-wide), the ClusterRoles it ships (the
// metrics reader), plus the namespace read OLM itself adds for an operator
// watching all namespaces. Nothing else.
func checkClusterRoles(t *testing.T, ctx context.Context, cl client.Client, csv *unstructured.Unstructured) {
	t.Helper()
	want := map[string]bool{}
	addRules := func(rules []any) {
		for _, r := range rules {
			rule := rbacv1.PolicyRule{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.(map[string]any), &rule); err != nil {
				t.Fatal(err)
			}
			want[mustJSON(t, rule)] = true
		}
	}
	for _, field := range []string{"clusterPermissions", "permissions"} {
		perms, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", field)
		for _, p := range perms {
			rules, _, _ := unstructured.NestedSlice(p.(map[string]any), "rules")
			addRules(rules)
		}
	}
	shipped, _ := filepath.Glob(filepath.Join(newBundle, "manifests", "*_clusterrole.yaml"))
	for _, f := range shipped {
		role := &unstructured.Unstructured{}
		readYAML(t, f, &role.Object)
		rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
		addRules(rules)
	}
	want[mustJSON(t, rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"namespaces"}})] = true

	roles := &rbacv1.ClusterRoleList{}
	if err := cl.List(ctx, roles, client.MatchingLabels{"olm.owner": newerCSV}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range roles.Items {
		for _, rule := range r.Rules {
			got[mustJSON(t, rule)] = true
		}
	}
	for r := range want {
		if !got[r] {
			t.Errorf("the bundle asks for %s; OLM did not grant it", r)
		}
	}
	for r := range got {
		if !want[r] {
			t.Errorf("OLM granted %s, which the bundle does not ask for", r)
		}
	}
}

// checkDeployment: the operator's Deployment runs the newer bundle's image.
func checkDeployment(t *testing.T, ctx context.Context, cl client.Client, csv *unstructured.Unstructured) {
	t.Helper()
	specs, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
	if len(specs) != 1 {
		t.Fatalf("%d deployments in the CSV", len(specs))
	}
	name, _, _ := unstructured.NestedString(specs[0].(map[string]any), "name")
	containers, _, _ := unstructured.NestedSlice(specs[0].(map[string]any), "spec", "template", "spec", "containers")
	wantImage, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	if image := deploymentImage(t, ctx, cl, name); image != wantImage {
		t.Errorf("the operator runs %s, want %s", image, wantImage)
	}
}

func reconcileUpgradeable(t *testing.T, ctx context.Context, r *controller.UpgradeableReporter) {
	t.Helper()
	if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Fatalf("reporting to OLM: %v", err)
	}
}

func csvPhase(ctx context.Context, cl client.Client, name string) string {
	csv := obj("operators.coreos.com/v1alpha1", "ClusterServiceVersion", opNS, name, nil)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(csv), csv); err != nil {
		return ""
	}
	phase, _, _ := unstructured.NestedString(csv.Object, "status", "phase")
	return phase
}

func csvMessage(ctx context.Context, cl client.Client, name string) string {
	csv := obj("operators.coreos.com/v1alpha1", "ClusterServiceVersion", opNS, name, nil)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(csv), csv); err != nil {
		return err.Error()
	}
	reason, _, _ := unstructured.NestedString(csv.Object, "status", "reason")
	msg, _, _ := unstructured.NestedString(csv.Object, "status", "message")
	return reason + ": " + msg
}

func deploymentImage(t *testing.T, ctx context.Context, cl client.Client, name string) string {
	t.Helper()
	dep := obj("apps/v1", "Deployment", opNS, name, nil)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	image, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	return image
}

func bundleDeploymentName(t *testing.T) string {
	t.Helper()
	specs, _, _ := unstructured.NestedSlice(readCSV(t, filepath.Join(newBundle, csvFile)).Object, "spec", "install", "spec", "deployments")
	name, _, _ := unstructured.NestedString(specs[0].(map[string]any), "name")
	return name
}

// checkConditionEnv: OLM made the CSV's OperatorCondition and set its name
// in the operator's Deployment, where operator-lib's InClusterFactory reads it.
func checkConditionEnv(t *testing.T, ctx context.Context, cl client.Client, deployment, csv string) {
	t.Helper()
	oc := obj("operators.coreos.com/v2", "OperatorCondition", opNS, csv, nil)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(oc), oc); err != nil {
		t.Fatalf("OLM made no OperatorCondition for %s: %v", csv, err)
	}
	dep := obj("apps/v1", "Deployment", opNS, deployment, nil)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	for _, e := range env {
		if m := e.(map[string]any); m["name"] == "OPERATOR_CONDITION_NAME" && m["value"] == csv {
			return
		}
	}
	t.Errorf("the operator's Deployment has no OPERATOR_CONDITION_NAME=%s: %v", csv, env)
}

// checkWebhooks: OLM made exactly the admission webhooks the CSV defines
// (its webhookdefinitions), each named after its generateName.
func checkWebhooks(t *testing.T, ctx context.Context, cl client.Client, csv *unstructured.Unstructured) {
	t.Helper()
	defs, _, _ := unstructured.NestedSlice(csv.Object, "spec", "webhookdefinitions")
	want := map[string]string{}
	for _, d := range defs {
		m := d.(map[string]any)
		if m["type"] == "ConversionWebhook" { // on the CRD: checkConversion
			continue
		}
		want[m["generateName"].(string)] = m["type"].(string)
	}
	got := map[string]string{}
	owned := client.MatchingLabels{"olm.owner": newerCSV}
	for kind, list := range map[string]*unstructured.UnstructuredList{
		"ValidatingAdmissionWebhook": {Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfigurationList"}},
		"MutatingAdmissionWebhook":   {Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfigurationList"}},
	} {
		if err := cl.List(ctx, list, owned); err != nil {
			t.Fatal(err)
		}
		for _, cfg := range list.Items {
			hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
			for _, h := range hooks {
				name := h.(map[string]any)["name"].(string)
				got[name] = kind
				// OLM issued the certificate: the API server trusts its CA.
				if ca, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle"); ca == "" {
					t.Errorf("webhook %s has no caBundle", name)
				}
			}
		}
	}
	if mustJSON(t, got) != mustJSON(t, want) {
		t.Errorf("admission webhooks on the cluster %v, the bundle defines %v", got, want)
	}
}

// checkConversion: the CSV's conversion webhook reached its conversionCRDs:
// the API server converts through the Service OLM made for the operator's
// Deployment, trusting the CA OLM issued its certificate from.
func checkConversion(t *testing.T, ctx context.Context, cl client.Client, csv *unstructured.Unstructured) {
	t.Helper()
	defs, _, _ := unstructured.NestedSlice(csv.Object, "spec", "webhookdefinitions")
	var conversion map[string]any
	for _, d := range defs {
		if m := d.(map[string]any); m["type"] == "ConversionWebhook" {
			conversion = m
		}
	}
	if conversion == nil {
		t.Fatal("the CSV defines no conversion webhook")
	}
	crds, _, _ := unstructured.NestedStringSlice(conversion, "conversionCRDs")
	for _, name := range crds {
		crd := &apiextv1.CustomResourceDefinition{}
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatal(err)
		}
		conv := crd.Spec.Conversion
		if conv == nil || conv.Strategy != apiextv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil ||
			conv.Webhook.ClientConfig.Service == nil || len(conv.Webhook.ClientConfig.CABundle) == 0 {
			t.Errorf("CRD %s: conversion %s, want a webhook through a Service with a caBundle", name, mustJSON(t, conv))
			continue
		}
		svc := conv.Webhook.ClientConfig.Service
		wantName := conversion["deploymentName"].(string) + "-service"
		if svc.Namespace != opNS || svc.Name != wantName || svc.Path == nil || *svc.Path != conversion["webhookPath"] {
			t.Errorf("CRD %s converts through %s/%s %v, want %s/%s %v", name, svc.Namespace, svc.Name, svc.Path, opNS, wantName, conversion["webhookPath"])
		}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: opNS, Name: wantName}, &corev1.Service{}); err != nil {
			t.Errorf("the conversion webhook's Service: %v", err)
		}
		served := map[string]bool{}
		for _, v := range crd.Spec.Versions {
			served[v.Name] = v.Served
		}
		if !served["v1"] || !served["v1alpha1"] {
			t.Errorf("CRD %s serves %v, want v1 and v1alpha1", name, served)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
