package plugin

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
	dbfake "example.com/database-operator/pkg/client/clientset/versioned/fake"
)

const (
	reportTestNS         = "shop"
	reportTestOperatorNS = "ops"
)

// reportFixture is a cluster of fake clients: the Database orders (and
// other) in shop, and the operator in ops.
type reportFixture struct {
	kube    *kubefake.Clientset
	db      *dbfake.Clientset
	dynamic *dynamicfake.FakeDynamicClient
	// secrets are the values of every Secret of the cluster.
	secrets []string
	dir     string
}

func randomValue(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func labelled(name, ns string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "database-operator", Operation: metav1.ManagedFieldsOperationApply}}}
}

func instance(name string) map[string]string {
	return map[string]string{reportInstanceLabel: name}
}

func (f *reportFixture) secret(t *testing.T, name, ns string, labels map[string]string, keys ...string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: labelled(name, ns, labels), Data: map[string][]byte{}}
	for _, k := range keys {
		v := randomValue(t)
		s.Data[k] = []byte(v)
		f.secrets = append(f.secrets, v)
	}
	return s
}

func newReportFixture(t *testing.T) *reportFixture {
	t.Helper()
	f := &reportFixture{dir: t.TempDir()}
	dbSecret := f.secret(t, "orders-credentials", reportTestNS, instance("orders"), "password")
	dbSecret.Data["username"] = []byte("postgres")
	dbSecret.Annotations = map[string]string{reportLastApplied: `{"data":{"password":"` + base64.StdEncoding.EncodeToString(dbSecret.Data["password"]) + `"}}`}
	dbSecret.StringData = map[string]string{"uri": "postgresql://app:" + string(dbSecret.Data["password"]) + "@orders-rw:5432/app"}
	unrelated := f.secret(t, "unrelated", reportTestNS, nil, "token")
	operatorSecret := f.secret(t, "webhook-server-cert", reportTestOperatorNS, nil, "tls.key")

	replicas := int32(1)
	operatorLabels := map[string]string{"control-plane": "controller-manager", "app.kubernetes.io/name": "database-operator"}
	f.kube = kubefake.NewSimpleClientset(
		dbSecret, unrelated, operatorSecret,
		&appsv1.StatefulSet{ObjectMeta: labelled("orders", reportTestNS, instance("orders")), Spec: appsv1.StatefulSetSpec{Replicas: &replicas}},
		&appsv1.StatefulSet{ObjectMeta: labelled("other", reportTestNS, instance("other"))},
		&corev1.Service{ObjectMeta: labelled("orders-rw", reportTestNS, instance("orders"))},
		&corev1.ConfigMap{ObjectMeta: labelled("orders-topology", reportTestNS, instance("orders"))},
		&coordinationv1.Lease{ObjectMeta: labelled("orders-primary", reportTestNS, nil)},
		&batchv1.Job{ObjectMeta: labelled("orders-backup-1", reportTestNS, map[string]string{
			reportInstanceLabel: "orders", reportNameLabel: reportJobAppName})},
		&corev1.Pod{
			ObjectMeta: labelled("orders-0", reportTestNS, instance("orders")),
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "bootstrap"}},
				Containers:     []corev1.Container{{Name: "database"}, {Name: "agent"}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "database", RestartCount: 1}, {Name: "agent"},
			}},
		},
		// A chart-rendered backup pod: the Job labels, not the instance's.
		&corev1.Pod{
			ObjectMeta: labelled("orders-backup-1-x7k2p", reportTestNS, map[string]string{
				reportNameLabel: reportJobAppName, reportDatabaseLabel: "orders"}),
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "backup"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "backup", RestartCount: 2}}},
		},
		&corev1.Pod{ObjectMeta: labelled("other-0", reportTestNS, instance("other")), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "database"}}}},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "orders-0.1", Namespace: reportTestNS},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "orders-0"}, Reason: "BackOff", Message: "Back-off restarting failed container database"},
		&appsv1.Deployment{
			ObjectMeta: labelled("database-operator-controller-manager", reportTestOperatorNS, operatorLabels),
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"control-plane": "controller-manager"}},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "database-operator:v1.2.3"}}}},
			},
		},
		&corev1.Pod{
			ObjectMeta: labelled("database-operator-controller-manager-5d9f-abcde", reportTestOperatorNS, map[string]string{"control-plane": "controller-manager"}),
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager"}}},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "manager", RestartCount: 3}}},
		},
	)
	f.db = dbfake.NewSimpleClientset(
		&dbv1.Database{ObjectMeta: labelled("orders", reportTestNS, nil), Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgreSQL},
			Status: dbv1.DatabaseStatus{Phase: dbv1.PhaseDegraded}},
		&dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: reportTestNS}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL},
			Status: dbv1.DatabaseStatus{Phase: dbv1.PhaseRunning}},
		&dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Namespace: reportTestNS}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}}},
		&dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "other-1", Namespace: reportTestNS}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "other"}}},
	)
	f.dynamic = newReportDynamic()
	// The backup container's previous log is gone (its pod was replaced).
	f.kube.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts, _ := a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions)
		if a.GetSubresource() == "log" && opts != nil && opts.Container == "backup" && opts.Previous {
			return true, nil, apierrors.NewBadRequest("previous terminated container \"backup\" not found")
		}
		return false, nil, nil
	})
	return f
}

// OLM's and apiextensions' resources, for the dynamic fake's lists.
var (
	subscriptionsGVR = schema.GroupVersionResource{Group: reportOLMGroup, Version: "v1alpha1", Resource: "subscriptions"}
	csvsGVR          = schema.GroupVersionResource{Group: reportOLMGroup, Version: "v1alpha1", Resource: "clusterserviceversions"}
	catalogsGVR      = schema.GroupVersionResource{Group: reportOLMGroup, Version: "v1alpha1", Resource: "catalogsources"}
	groupsGVR        = schema.GroupVersionResource{Group: reportOLMGroup, Version: "v1", Resource: "operatorgroups"}
)

func newReportDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		subscriptionsGVR:  "SubscriptionList",
		csvsGVR:           "ClusterServiceVersionList",
		catalogsGVR:       "CatalogSourceList",
		groupsGVR:         "OperatorGroupList",
		reportCRDResource: "CustomResourceDefinitionList",
	}, objs...)
}

func (f *reportFixture) options() (*Options, *bytes.Buffer) {
	out := &bytes.Buffer{}
	o := &Options{
		ConfigFlags: genericclioptions.NewConfigFlags(false),
		IOStreams:   genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: io.Discard},
		Timeout:     time.Minute,
		clients:     &Clients{Namespace: reportTestNS, DB: f.db, Kube: f.kube, Dynamic: f.dynamic},
	}
	return o, out
}

// run runs `report args...` and returns its zip's files by name, and its
// report.yaml.
func (f *reportFixture) run(t *testing.T, args ...string) (map[string]string, reportSummary) {
	t.Helper()
	o, out := f.options()
	file := filepath.Join(f.dir, "report.zip")
	cmd := newReportCommand(o)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(append(args, "-f", file))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("report %v: %v", args, err)
	}
	if !strings.HasPrefix(out.String(), file+": ") || !strings.Contains(out.String(), " files, ") {
		t.Errorf("stdout = %q, want the path and a summary", out.String())
	}
	files := readZip(t, file)
	var summary reportSummary
	if err := yaml.Unmarshal([]byte(files["report.yaml"]), &summary); err != nil {
		t.Fatalf("report.yaml: %v", err)
	}
	return files, summary
}

func readZip(t *testing.T, file string) map[string]string {
	t.Helper()
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string]string{}
	for _, zf := range zr.File {
		rc, err := zf.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[zf.Name] = string(data)
	}
	return files
}

func names(files map[string]string) []string {
	out := make([]string, 0, len(files))
	for n := range files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func hasNote(s reportSummary, what string) bool {
	for _, n := range s.NotCollected {
		if strings.Contains(n.What, what) {
			return true
		}
	}
	return false
}

func TestReportDatabase(t *testing.T) {
	f := newReportFixture(t)
	f.kube.PrependReactor("list", "roles", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "roles"}, "", errors.New("no RBAC"))
	})
	files, summary := f.run(t, "orders", "--logs-since", "2h")

	for _, name := range []string{
		"report.yaml", "database/orders.yaml", "backups/orders-1.yaml",
		"objects/statefulsets/orders.yaml", "objects/services/orders-rw.yaml", "objects/configmaps/orders-topology.yaml",
		"objects/leases/orders-primary.yaml", "objects/secrets/orders-credentials.yaml",
		"jobs/orders-backup-1.yaml", "pods/orders-0.yaml", "pods/orders-backup-1-x7k2p.yaml", "events.yaml",
		"logs/orders-0/bootstrap.log", "logs/orders-0/database.log", "logs/orders-0/database.previous.log", "logs/orders-0/agent.log",
		"logs/orders-backup-1-x7k2p/backup.log",
		"operator/ops/deployments/database-operator-controller-manager.yaml",
		"operator/ops/pods/database-operator-controller-manager-5d9f-abcde.yaml",
		"operator/ops/logs/database-operator-controller-manager-5d9f-abcde/manager.log",
		"operator/ops/logs/database-operator-controller-manager-5d9f-abcde/manager.previous.log",
		"operator/ops/events.yaml",
	} {
		if _, ok := files[name]; !ok {
			t.Errorf("no %s in the zip: %v", name, names(files))
		}
	}
	for _, name := range []string{
		"backups/other-1.yaml", "objects/statefulsets/other.yaml", "pods/other-0.yaml", "objects/secrets/unrelated.yaml",
		"logs/orders-0/agent.previous.log", "logs/orders-backup-1-x7k2p/backup.previous.log", "operator/NOT-FOUND.txt",
	} {
		if _, ok := files[name]; ok {
			t.Errorf("%s in the zip, want it not", name)
		}
	}

	if got := files["logs/orders-0/database.previous.log"]; got != "fake logs" {
		t.Errorf("previous log = %q", got)
	}
	if !strings.Contains(files["pods/orders-0.yaml"], "restartCount: 1") || !strings.Contains(files["pods/orders-0.yaml"], "kind: Pod") {
		t.Errorf("pods/orders-0.yaml has no kind or status:\n%s", files["pods/orders-0.yaml"])
	}
	if !strings.Contains(files["events.yaml"], "Back-off restarting failed container database") {
		t.Errorf("events.yaml:\n%s", files["events.yaml"])
	}
	for _, name := range names(files) {
		if strings.Contains(files[name], "managedFields") {
			t.Errorf("%s has managedFields", name)
		}
	}
	db := files["database/orders.yaml"]
	if !strings.Contains(db, "apiVersion: example.com/v1") || !strings.Contains(db, "kind: Database") || !strings.Contains(db, "phase: Degraded") {
		t.Errorf("database/orders.yaml:\n%s", db)
	}

	secret := map[string]any{}
	if err := yaml.Unmarshal([]byte(files["objects/secrets/orders-credentials.yaml"]), &secret); err != nil {
		t.Fatal(err)
	}
	data, _ := secret["data"].(map[string]any)
	want := map[string]any{"password": "<redacted, 24 bytes>", "username": "<redacted, 8 bytes>"}
	if len(data) != len(want) || data["password"] != want["password"] || data["username"] != want["username"] {
		t.Errorf("the Secret's data = %v, want %v", data, want)
	}
	if sd, _ := secret["stringData"].(map[string]any); sd["uri"] == nil || !strings.HasPrefix(sd["uri"].(string), "<redacted, ") {
		t.Errorf("the Secret's stringData = %v", secret["stringData"])
	}
	annotations, _, _ := unstructured.NestedStringMap(secret, "metadata", "annotations")
	if !strings.HasPrefix(annotations[reportLastApplied], "<redacted, ") {
		t.Errorf("the Secret's last-applied-configuration = %q", annotations[reportLastApplied])
	}

	if summary.Database != "orders" || summary.Namespace != reportTestNS || summary.Created == "" {
		t.Errorf("report.yaml = %+v", summary)
	}
	if got := strings.Join(summary.Command, " "); !strings.Contains(got, "report") || !strings.Contains(got, "--logs-since=2h0m0s") || !strings.HasSuffix(got, " orders") {
		t.Errorf("report.yaml's command = %q", got)
	}
	if !hasNote(summary, "roles in namespace shop") {
		t.Errorf("no note of the Forbidden Roles: %+v", summary.NotCollected)
	}
	if !hasNote(summary, `previous log of container backup of pod shop/orders-backup-1-x7k2p`) {
		t.Errorf("no note of the failed previous log: %+v", summary.NotCollected)
	}
	if len(summary.Operators) != 1 || summary.Operators[0].Namespace != reportTestOperatorNS || !strings.HasPrefix(summary.Operators[0].InstalledBy, "not OLM") {
		t.Errorf("report.yaml's operators = %+v", summary.Operators)
	}
}

// TestReportRedaction fails when any Secret value, or its base64 form,
// is anywhere in the zip: not in the Secrets written, not in the logs
// that print them.
func TestReportRedaction(t *testing.T) {
	f := newReportFixture(t)
	// Every container's log prints every Secret value, in clear and base64.
	var leak strings.Builder
	for _, v := range f.secrets {
		leak.WriteString("password=" + v + " encoded=" + base64.StdEncoding.EncodeToString([]byte(v)) + "\n")
	}
	f.kube.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		return true, &runtime.Unknown{Raw: []byte(leak.String())}, nil
	})
	for _, args := range [][]string{{"orders"}, {"--operator"}} {
		files, summary := f.run(t, args...)
		for _, name := range names(files) {
			for _, v := range f.secrets {
				for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
					if strings.Contains(files[name], form) {
						t.Errorf("report %v: %s holds a Secret's value %q", args, name, form)
					}
				}
			}
		}
		if log := files["operator/ops/logs/database-operator-controller-manager-5d9f-abcde/manager.log"]; !strings.Contains(log, "password=<redacted> encoded=<redacted>") {
			t.Errorf("report %v: the operator's log is not scrubbed:\n%s", args, log)
		}
		if want := []string{reportTestOperatorNS, reportTestNS}; strings.Join(summary.ScrubbedSecretsOf, ",") != strings.Join(want, ",") {
			t.Errorf("report %v: secretValuesScrubbedFrom = %v, want %v", args, summary.ScrubbedSecretsOf, want)
		}
	}
}

// olmObject is an OLM object for the dynamic fake.
func olmObject(gvr schema.GroupVersionResource, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvr.GroupVersion().WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func crdObject(name string, versions ...string) *unstructured.Unstructured {
	vs := []any{}
	for i, v := range versions {
		vs = append(vs, map[string]any{"name": v, "served": true, "storage": i == 0})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec":   map[string]any{"group": "example.com", "versions": vs, "conversion": map[string]any{"strategy": "Webhook"}},
		"status": map[string]any{"storedVersions": []any{versions[0]}, "conditions": []any{map[string]any{"type": "Established", "status": "True"}}},
	}}
	u.SetGroupVersionKind(reportCRDResource.GroupVersion().WithKind("CustomResourceDefinition"))
	u.SetName(name)
	return u
}

func TestReportOperator(t *testing.T) {
	t.Run("installed by OLM, found by its labels", func(t *testing.T) {
		f := newReportFixture(t)
		f.dynamic = newReportDynamic(
			olmObject(subscriptionsGVR, "Subscription", reportTestOperatorNS, "database-operator", map[string]any{"source": "database-catalog", "sourceNamespace": "olm"}),
			olmObject(csvsGVR, "ClusterServiceVersion", reportTestOperatorNS, "database-operator.v1.2.3", map[string]any{"version": "1.2.3"}),
			olmObject(catalogsGVR, "CatalogSource", "olm", "database-catalog", map[string]any{"sourceType": "grpc"}),
			olmObject(csvsGVR, "ClusterServiceVersion", "elsewhere", "another.v0.1.0", nil),
			crdObject("databases.example.com", "v1", "v1alpha1"),
			crdObject("backups.example.com", "v1"),
		)
		f.kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
			{GroupVersion: "operators.coreos.com/v1alpha1", APIResources: []metav1.APIResource{
				{Name: "subscriptions", Namespaced: true, Kind: "Subscription"},
				{Name: "clusterserviceversions", Namespaced: true, Kind: "ClusterServiceVersion"},
				{Name: "catalogsources", Namespaced: true, Kind: "CatalogSource"},
			}},
		}
		files, summary := f.run(t, "--operator")
		for _, name := range []string{
			"report.yaml", "crds.yaml", "databases.yaml",
			"operator/ops/deployments/database-operator-controller-manager.yaml",
			"operator/ops/logs/database-operator-controller-manager-5d9f-abcde/manager.log",
			"operator/ops/logs/database-operator-controller-manager-5d9f-abcde/manager.previous.log",
			"olm/ops/subscriptions/database-operator.yaml",
			"olm/ops/clusterserviceversions/database-operator.v1.2.3.yaml",
			"olm/olm/catalogsources/database-catalog.yaml",
		} {
			if _, ok := files[name]; !ok {
				t.Errorf("no %s in the zip: %v", name, names(files))
			}
		}
		for _, name := range names(files) {
			if strings.HasPrefix(name, "database/") || strings.HasPrefix(name, "pods/") || strings.HasPrefix(name, "olm/elsewhere/") {
				t.Errorf("%s in an --operator report", name)
			}
		}
		if !strings.Contains(files["olm/ops/subscriptions/database-operator.yaml"], "sourceNamespace: olm") {
			t.Errorf("the Subscription:\n%s", files["olm/ops/subscriptions/database-operator.yaml"])
		}
		var crds []reportCRD
		if err := yaml.Unmarshal([]byte(files["crds.yaml"]), &crds); err != nil {
			t.Fatal(err)
		}
		if len(crds) != 2 || crds[0].Name != "databases.example.com" || len(crds[0].Versions) != 2 ||
			!crds[0].Versions[0].Served || !crds[0].Versions[0].Storage || crds[0].Versions[1].Storage || crds[0].Established != "True" {
			t.Errorf("crds.yaml = %+v", crds)
		}
		var dbs []reportDatabase
		if err := yaml.Unmarshal([]byte(files["databases.yaml"]), &dbs); err != nil {
			t.Fatal(err)
		}
		if len(dbs) != 2 || dbs[0] != (reportDatabase{Namespace: reportTestNS, Name: "orders", Phase: "Degraded"}) {
			t.Errorf("databases.yaml = %+v", dbs)
		}
		if len(summary.Operators) != 1 || len(summary.Operators[0].OLMServed) != 3 || len(summary.NotCollected) != 0 {
			t.Errorf("report.yaml = %+v", summary)
		}
	})

	t.Run("OLM not served", func(t *testing.T) {
		f := newReportFixture(t)
		files, summary := f.run(t, "--operator", "--operator-namespace", reportTestOperatorNS)
		for _, name := range names(files) {
			if strings.HasPrefix(name, "olm/") {
				t.Errorf("%s in the zip with OLM not served", name)
			}
		}
		if _, ok := files["operator/ops/deployments/database-operator-controller-manager.yaml"]; !ok {
			t.Errorf("no Deployment: %v", names(files))
		}
		// The CRDs are not in this fake: a note each, no error.
		if len(summary.Operators) != 1 || len(summary.Operators[0].OLMServed) != 0 || !hasNote(summary, "CustomResourceDefinition databases.example.com") {
			t.Errorf("report.yaml = %+v", summary)
		}
		for _, n := range summary.NotCollected {
			if strings.Contains(n.What, reportOLMGroup) {
				t.Errorf("a note about OLM: %+v", n)
			}
		}
	})

	t.Run("not found", func(t *testing.T) {
		f := newReportFixture(t)
		f.kube.PrependReactor("list", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() == metav1.NamespaceAll {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "", errors.New("no RBAC"))
			}
			return false, nil, nil
		})
		files, summary := f.run(t, "--operator")
		if !strings.Contains(files["operator/NOT-FOUND.txt"], "No Deployment labelled") {
			t.Errorf("operator/NOT-FOUND.txt = %q (files %v)", files["operator/NOT-FOUND.txt"], names(files))
		}
		if !hasNote(summary, "the operator's Deployment in every namespace") || !hasNote(summary, "the operator") {
			t.Errorf("notes = %+v", summary.NotCollected)
		}
	})
}

func TestReportBadInput(t *testing.T) {
	for _, args := range [][]string{{"report"}, {"report", "a", "b"}, {"report", "orders", "--operator"}, {"report", "orders", "--logs-since", "-1h"}} {
		var stderr bytes.Buffer
		if code := Main(args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &stderr}); code != ExitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, stderr.String(), ExitUsage)
		}
	}

	f := newReportFixture(t)
	o, _ := f.options()
	cmd := newReportCommand(o)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	file := filepath.Join(f.dir, "x.zip")
	cmd.SetArgs([]string{"x", "-f", file})
	err := cmd.Execute()
	if err == nil || err.Error() != `no Database "x" in namespace "shop"` {
		t.Errorf("report x: %v", err)
	}
	var usage usageError
	if errors.As(err, &usage) {
		t.Errorf("report x: a usage error, want a failure")
	}
	if entries, _ := os.ReadDir(f.dir); len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

func TestReportDefaultFile(t *testing.T) {
	f := newReportFixture(t)
	t.Chdir(f.dir)
	o, out := f.options()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		r    reportOptions
		args []string
		want string
	}{
		{reportOptions{Options: o}, []string{"orders"}, "report-orders-20260102T020405.zip"},
		{reportOptions{Options: o, operator: true}, nil, "report-operator-20260102T020405.zip"},
	} {
		c.r.now = func() time.Time { return at }
		if err := c.r.run(t.Context(), c.args, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(c.want); err != nil {
			t.Errorf("%v: %v (stdout %q)", c.args, err, out.String())
		}
	}
	entries, _ := os.ReadDir(".")
	if len(entries) != 2 {
		t.Errorf("files: %v, want the two zips only", entries)
	}
}
