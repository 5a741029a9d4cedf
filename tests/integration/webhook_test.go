package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	dbv1alpha1 "example.com/database-operator/api/v1alpha1"
	"example.com/database-operator/internal/controller"
	"example.com/database-operator/internal/parameters"
	webhookv1 "example.com/database-operator/internal/webhook/v1"
	"example.com/database-operator/tests/utils/localcluster"
)

// warnings collects the admission (and deprecation) warnings the API
// server returns to a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// userClient returns a client acting as the given user (impersonated, in
// system:masters so that it may do anything) and its warnings.
func userClient(t testing.TB, user string) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	var as rest.ImpersonationConfig
	if user != "" {
		as = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	}
	return clientAs(t, as, w), w
}

// clientAs returns a client acting as the impersonated user (the test's
// own identity when as is empty), its warnings going to w (when set).
func clientAs(t testing.TB, as rest.ImpersonationConfig, w rest.WarningHandler) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testEnv.cluster.Config)
	cfg.Impersonate = as
	if w != nil {
		cfg.WarningHandler = w
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// conflictBackoff outlasts the operator's own writes to a new Database
// (status, then its Secrets' reconciles), which the four quick tries of
// retry.DefaultBackoff did not once in CI.
var conflictBackoff = wait.Backoff{Steps: 20, Duration: 20 * time.Millisecond, Factor: 1.5, Jitter: 0.1, Cap: time.Second}

func update(ctx context.Context, cl client.Client, db *dbv1.Database, mutate func(*dbv1.Database), opts ...client.UpdateOption) error {
	return retry.RetryOnConflict(conflictBackoff, func() error {
		got := &dbv1.Database{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			return err
		}
		mutate(got)
		return cl.Update(ctx, got, opts...)
	})
}

// TestConversionBothWays: a Database written as v1alpha1 reads as v1 and
// reconciles; one written as v1 reads as v1alpha1 with what v1alpha1 cannot
// hold carried along, and a v1alpha1 client's edit loses none of it.
func TestConversionBothWays(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cl, warn := userClient(t, "")

	keep := false
	alpha := &dbv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alpha"},
		Spec: dbv1alpha1.DatabaseSpec{Engine: "mariadb", Version: "11.4", Instances: 2,
			StorageSize: resource.MustParse("2Gi"), Size: dbv1alpha1.SizeMedium, KeepVolumes: &keep},
	}
	if err := cl.Create(ctx, alpha); err != nil {
		t.Fatal(err)
	}
	if w := warn.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "v1alpha1 Database is deprecated") }) {
		t.Errorf("no deprecation warning for v1alpha1: %q", w)
	}
	asV1 := &dbv1.Database{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(alpha), asV1); err != nil {
		t.Fatal(err)
	}
	want := dbv1.DatabaseSpec{Engine: dbv1.EngineMariaDB, Version: "11.4", Replicas: 2,
		Storage: dbv1.StorageSpec{Size: resource.MustParse("2Gi")}, DeletionPolicy: dbv1.DeletionPolicyDelete,
		Resources: dbv1alpha1.SizeMedium.Resources(),
		// Defaulted by the mutating webhook, which sees v1.
		Failover:    dbv1.FailoverSpec{Enabled: ptr.To(true), DelaySeconds: ptr.To(int32(10))},
		Replication: dbv1.ReplicationSpec{Mode: dbv1.ReplicationAsynchronous}}
	if !equality.Semantic.DeepEqual(asV1.Spec, want) {
		t.Errorf("v1alpha1 read as v1:\n got %+v\nwant %+v", asV1.Spec, want)
	}
	if _, ok := asV1.Annotations[dbv1alpha1.V1FieldsAnnotation]; ok {
		t.Error("the conversion annotation shows on v1")
	}
	running := waitRunning(t, asV1, 2)
	// The v1alpha1 view of the status the operator wrote in v1.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(alpha), alpha); err != nil {
		t.Fatal(err)
	}
	if alpha.Status.Phase != "Running" || alpha.Status.ReadyInstances != 2 || alpha.Status.Primary != running.Status.CurrentPrimary ||
		alpha.Status.ReadWriteEndpoint != running.Status.Endpoints.ReadWrite {
		t.Errorf("v1alpha1 status %+v from v1 status %+v", alpha.Status, running.Status)
	}

	// v1 -> v1alpha1: fields v1alpha1 lacks travel in the annotation.
	v1db := database(ns, "hub", dbv1.EnginePostgreSQL, 3, func(db *dbv1.Database) {
		db.Spec.Version = "16"
		db.Spec.Failover = dbv1.FailoverSpec{Enabled: ptr.To(false), DelaySeconds: ptr.To(int32(30)), MaxLag: ptr.To(int64(1 << 20))}
		db.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}}
		db.Spec.Primary = "hub-0"
	})
	if err := cl.Create(ctx, v1db); err != nil {
		t.Fatal(err)
	}
	created := &dbv1.Database{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(v1db), created); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1alpha1")
	u.SetKind("Database")
	if err := cl.Get(ctx, client.ObjectKeyFromObject(v1db), u); err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	if spec["instances"] != int64(3) || spec["storageSize"] != "1Gi" || spec["size"] != nil || spec["keepVolumes"] != true {
		t.Errorf("v1 read as v1alpha1: spec %v", spec)
	}
	carried := u.GetAnnotations()[dbv1alpha1.V1FieldsAnnotation]
	for _, s := range []string{`"maxLag":1048576`, `"delaySeconds":30`, `"primary":"hub-0"`, `"memory":"3Gi"`} {
		if !strings.Contains(carried, s) {
			t.Errorf("annotation %s lacks %s: %s", dbv1alpha1.V1FieldsAnnotation, s, carried)
		}
	}
	// A v1alpha1 client grows the storage; nothing else changes in v1.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(v1db), u); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, "4Gi", "spec", "storageSize"); err != nil {
			return err
		}
		return cl.Update(ctx, u)
	})
	if err != nil {
		t.Fatal(err)
	}
	after := &dbv1.Database{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(v1db), after); err != nil {
		t.Fatal(err)
	}
	wantSpec := created.Spec.DeepCopy()
	wantSpec.Storage.Size = resource.MustParse("4Gi")
	if !equality.Semantic.DeepEqual(after.Spec, *wantSpec) {
		t.Errorf("after a v1alpha1 update:\n got %+v\nwant %+v", after.Spec, *wantSpec)
	}
	if len(after.Annotations) != 0 {
		t.Errorf("annotations on v1: %v", after.Annotations)
	}
}

// TestWebhookDefaults: what a user leaves out is filled in (and so shown in
// spec, not only in status).
func TestWebhookDefaults(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, tc := range []struct {
		engine, version string
	}{{"postgresql", "17"}, {"mysql", "8.4"}, {"mariadb", "11.4"}} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Database",
			"metadata": map[string]any{"name": "d-" + tc.engine, "namespace": ns},
			"spec":     map[string]any{"engine": tc.engine, "storage": map[string]any{"size": "1Gi"}},
		}}
		if err := testEnv.client.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		got := &dbv1.Database{}
		if err := testEnv.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: u.GetName()}, got); err != nil {
			t.Fatal(err)
		}
		want := dbv1.DatabaseSpec{Engine: dbv1.Engine(tc.engine), Version: tc.version, Replicas: 1,
			Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")}, DeletionPolicy: dbv1.DeletionPolicyRetain,
			Resources: webhookv1.DefaultResources(),
			Failover:  dbv1.FailoverSpec{Enabled: ptr.To(true), DelaySeconds: ptr.To(int32(10))}}
		if !equality.Semantic.DeepEqual(got.Spec, want) {
			t.Errorf("%s defaults:\n got %+v\nwant %+v", tc.engine, got.Spec, want)
		}
	}
	// What the user set stays as set.
	set := database(ns, "set", dbv1.EngineMariaDB, 1, func(db *dbv1.Database) {
		db.Spec.Version = "10.11"
		db.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		db.Spec.Failover.Enabled = ptr.To(false)
	})
	if err := testEnv.client.Create(ctx, set); err != nil {
		t.Fatal(err)
	}
	if err := get(t, set); err != nil {
		t.Fatal(err)
	}
	if set.Spec.Version != "10.11" || *set.Spec.Failover.Enabled || set.Spec.Resources.Requests != nil {
		t.Errorf("user values overridden: %+v", set.Spec)
	}
}

// TestWebhookRefusals: stateful rules of the validating webhook, and the
// CRD's rules on the older version, each refused with a message saying what
// to do instead; nothing changes and no audit Event is recorded.
func TestWebhookRefusals(t *testing.T) {
	ctx := context.Background()
	db := runningDatabase(t, "busy", dbv1.EnginePostgreSQL, 1)
	ns := db.Namespace
	cl, _ := userClient(t, "mallory")

	// Grow to three and, in the same update, ask for the third instance as
	// primary: the CRD allows it (ordinal below replicas), but it does not
	// exist yet.
	err := update(ctx, cl, db, func(d *dbv1.Database) { d.Spec.Replicas, d.Spec.Primary = 3, "busy-2" })
	wantInvalid(t, err, "spec.primary", "instance busy-2 does not exist yet (1 instances exist): wait until status.replicas is above 2")

	updateSpec(t, db, func(d *dbv1.Database) { d.Spec.Replicas = 3 })
	db = waitRunning(t, db, 3)
	if db.Status.CurrentPrimary == "" {
		t.Fatal("no current primary")
	}
	// A switchover the operator cannot finish (kwok runs no server): it
	// stays in progress while the test runs.
	target := "busy-1"
	if db.Status.CurrentPrimary == target {
		target = "busy-0"
	}
	updateSpec(t, db, func(d *dbv1.Database) { d.Spec.Primary = target })
	t.Cleanup(func() { updateSpec(t, db, func(d *dbv1.Database) { d.Spec.Primary = db.Status.CurrentPrimary }) })

	before := &dbv1.Database{}
	if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), before); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, message string
		mutate              func(*dbv1.Database)
	}{
		{"scale below the ready replicas during a switchover", "spec.replicas",
			"cannot scale from 3 to 2 while a switchover to " + target + " is in progress: 3 instances are ready and the failover may need any of them; wait until the Ready condition is True, then scale down",
			func(d *dbv1.Database) { d.Spec.Replicas = 2 }},
		{"a parameter the server does not know", "spec.parameters[max_conections]", "max_conections is not a setting postgresql knows",
			func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"max_conections": "300"} }},
		{"a parameter the operator owns", "spec.parameters[synchronous_commit]", "synchronous_commit is set by the operator (replication and failover)",
			func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"synchronous_commit": "off"} }},
		{"a parameter value that adds a line", "spec.parameters[work_mem]", "a value is at most 1024 characters, on one line, without control characters",
			func(d *dbv1.Database) {
				d.Spec.Parameters = map[string]string{"work_mem": "8MB\nlisten_addresses = '*'"}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := update(ctx, cl, db, tt.mutate)
			wantInvalid(t, err, tt.path, tt.message)
		})
	}
	t.Run("kubectl scale below the ready replicas during a switchover", func(t *testing.T) {
		wantInvalid(t, scaleTo(ctx, cl, db, 2), "spec.replicas", "cannot scale from 3 to 2 while a switchover to "+target+" is in progress")
	})

	// The older version obeys the same CRD rules.
	alpha := &dbv1alpha1.Database{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(db), alpha); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, message string
		mutate        func(*dbv1alpha1.Database)
	}{
		{"v1alpha1 engine change", "engine is immutable; create a new Database to change engines", func(d *dbv1alpha1.Database) { d.Spec.Engine, d.Spec.Version = "mysql", "8.4" }},
		{"v1alpha1 storage shrink", "storage size may grow but never shrink", func(d *dbv1alpha1.Database) { d.Spec.StorageSize = resource.MustParse("100Mi") }},
		{"v1alpha1 postgresql major change", "PostgreSQL major version cannot change in place", func(d *dbv1alpha1.Database) { d.Spec.Version = "16" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			changed := alpha.DeepCopy()
			tt.mutate(changed)
			err := cl.Update(ctx, changed)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %v\nwant Invalid containing %q", err, tt.message)
			}
		})
	}
	for _, tt := range []struct {
		name, message string
		spec          map[string]any
	}{
		{"v1alpha1 unsupported version", "version 9.6 is not supported for engine postgresql", map[string]any{"engine": "postgresql", "version": "9.6", "storageSize": "1Gi"}},
		{"v1alpha1 zero storage", "storage size must be greater than zero", map[string]any{"engine": "postgresql", "storageSize": "0"}},
		{"v1alpha1 unknown size", `spec.size: Unsupported value: "huge"`, map[string]any{"engine": "postgresql", "storageSize": "1Gi", "size": "huge"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "Database",
				"metadata": map[string]any{"name": "bad", "namespace": ns}, "spec": tt.spec}}
			err := cl.Create(ctx, u)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %v\nwant Invalid containing %q", err, tt.message)
			}
		})
	}

	after := &dbv1.Database{}
	if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), after); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(before.Spec, after.Spec) {
		t.Errorf("refused updates changed the spec:\n%+v\n%+v", before.Spec, after.Spec)
	}
	if n := auditEvents(t, db, "mallory"); len(n) != 0 {
		t.Errorf("refused requests were audited: %q", n)
	}
}

// scaleTo scales through the scale subresource, as `kubectl scale` does.
func scaleTo(ctx context.Context, cl client.Client, db *dbv1.Database, replicas int32) error {
	return retry.RetryOnConflict(conflictBackoff, func() error {
		scale := &autoscalingv1.Scale{}
		if err := cl.SubResource("scale").Get(ctx, db, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = replicas
		return cl.SubResource("scale").Update(ctx, db, client.WithSubResourceBody(scale))
	})
}

func wantInvalid(t *testing.T, err error, path, message string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error %v, want Invalid", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), message) {
		t.Errorf("error %q\nwant %s: %q", err, path, message)
	}
}

// auditEvents returns the notes of the audit Events on db naming user.
func auditEvents(t testing.TB, db *dbv1.Database, user string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := testEnv.client.List(context.Background(), list, client.InNamespace(db.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == db.Name && strings.HasPrefix(e.Reason, "Audit") && strings.HasSuffix(e.Note, "(by "+user+")") {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	slices.Sort(out)
	return out
}

// TestWarningsAndAudit: risky but legal changes are admitted with a warning,
// and recorded in an Event naming the user who made them; a dry run is
// warned about but not recorded.
func TestWarningsAndAudit(t *testing.T) {
	ctx := context.Background()
	db := runningDatabase(t, "risky", dbv1.EngineMariaDB, 3, func(d *dbv1.Database) { d.Spec.Version = "10.11" })
	cl, warn := userClient(t, "alice@example.com")
	warn.take()

	// Dry run: warned, not recorded, not stored.
	if err := update(ctx, cl, db, func(d *dbv1.Database) { d.Spec.Replicas = 1 }, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	wantWarning(t, warn, "scaling down from 3 to 1 removes instance(s) risky-1, risky-2; their volumes are kept")

	steps := []struct {
		mutate  func(*dbv1.Database)
		warning string
	}{
		{func(d *dbv1.Database) { d.Spec.Replicas = 2 }, "scaling down from 3 to 2 removes instance(s) risky-2; their volumes are kept"},
		{nil, "scaling down from 2 to 1 removes instance(s) risky-1"}, // kubectl scale
		{func(d *dbv1.Database) { d.Spec.Version = "11.4" }, "mariadb 10.11 -> 11.4 is a major version change"},
		{func(d *dbv1.Database) { d.Spec.Version = "11.8" }, ""}, // minor: audited, no warning
		{func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete }, "deletionPolicy Delete: deleting this Database now deletes its volumes and all data; set it back to Retain to keep them"},
	}
	for _, s := range steps {
		var err error
		if s.mutate == nil {
			err = scaleTo(ctx, cl, db, 1)
		} else {
			err = update(ctx, cl, db, s.mutate)
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.warning == "" {
			if w := warn.take(); len(w) != 0 {
				t.Errorf("unexpected warnings %q", w)
			}
			continue
		}
		wantWarning(t, warn, s.warning)
	}
	want := []string{
		"AuditDeletionPolicy: spec.deletionPolicy changed from Retain to Delete: deletion protection removed (by alice@example.com)",
		"AuditScaleDown: spec.replicas changed from 2 to 1 (by alice@example.com)",
		"AuditScaleDown: spec.replicas changed from 3 to 2 (by alice@example.com)",
		"AuditVersionChange: spec.version changed from 10.11 to 11.4 (by alice@example.com)",
		"AuditVersionChange: spec.version changed from 11.4 to 11.8 (by alice@example.com)",
	}
	var got []string
	eventually(t, 10*time.Second, "audit Events", func() string {
		if got = auditEvents(t, db, "alice@example.com"); !slices.Equal(got, want) {
			return fmt.Sprintf("%q", got)
		}
		return ""
	})
}

func wantWarning(t *testing.T, w *warnings, want string) {
	t.Helper()
	got := w.take()
	if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }) {
		t.Errorf("warnings %q, want one containing %q", got, want)
	}
}

// TestStoredBeforeStorageSwitch: an object stored while v1alpha1 was the
// storage version (as an older release of the CRD had it) still reads, as
// v1, and reconciles after the CRD moves storage to v1.
func TestStoredBeforeStorageSwitch(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	ext, err := apiextclient.NewForConfig(testEnv.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	setStorage := func(version string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd, err := crds.Get(ctx, "databases.example.com", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for i := range crd.Spec.Versions {
				crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == version
			}
			_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setStorage("v1alpha1")
	t.Cleanup(func() { setStorage("v1") })
	// The API server picks up the CRD change asynchronously: write until an
	// object lands stored as v1alpha1 (its storedVersions then list it).
	old := &dbv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"},
		Spec:       dbv1alpha1.DatabaseSpec{Engine: "postgresql", Instances: 1, StorageSize: resource.MustParse("1Gi"), Size: dbv1alpha1.SizeSmall},
	}
	eventually(t, 10*time.Second, "v1alpha1 in the CRD's storedVersions", func() string {
		crd, err := crds.Get(ctx, "databases.example.com", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if !slices.Contains(crd.Status.StoredVersions, "v1alpha1") {
			return fmt.Sprintf("storedVersions %v", crd.Status.StoredVersions)
		}
		return ""
	})
	// The API server's handler takes the CRD change asynchronously: write
	// until an object lands in etcd as v1alpha1. Each attempt under a new
	// name: one created again under the same name would find the claim its
	// deleted namesake kept (deletionPolicy Retain), and wait for the
	// operator to choose a primary among kept volumes, which simulated
	// pods never answer.
	template, attempt := old.DeepCopy(), 0
	eventually(t, 30*time.Second, "an object stored as v1alpha1", func() string {
		attempt++
		// From the template each time: a created object carries a
		// resourceVersion that a second create refuses.
		o := template.DeepCopy()
		o.Name = fmt.Sprintf("legacy-%d", attempt)
		if err := testEnv.client.Create(ctx, o); err != nil {
			return err.Error()
		}
		old = o
		if v := storedAPIVersion(t, ns, o.Name); v != "example.com/v1alpha1" {
			_ = testEnv.client.Delete(ctx, o)
			return "stored as " + v
		}
		return ""
	})
	setStorage("v1")

	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: old.Name}}
	got := waitRunning(t, db, 1)
	if got.Spec.Engine != dbv1.EnginePostgreSQL || got.Spec.Version != "17" || !equality.Semantic.DeepEqual(got.Spec.Resources, dbv1alpha1.SizeSmall.Resources()) {
		t.Errorf("read as v1: %+v", got.Spec)
	}
	// And it still takes a v1 update, which stores it as v1.
	updateSpec(t, got, func(d *dbv1.Database) { d.Spec.Storage.Size = resource.MustParse("2Gi") })
	eventually(t, 10*time.Second, "the object stored as v1", func() string {
		if v := storedAPIVersion(t, ns, old.Name); v != "example.com/v1" {
			return "stored as " + v
		}
		return ""
	})
}

// storedAPIVersion reads a Database's apiVersion as etcd holds it, through
// etcd's JSON gateway.
func storedAPIVersion(t testing.TB, ns, name string) string {
	t.Helper()
	key := base64.StdEncoding.EncodeToString([]byte("/registry/example.com/databases/" + ns + "/" + name))
	resp, err := http.Post(testEnv.cluster.EtcdURL+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		KVs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.KVs) == 0 {
		return "(not stored)"
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal(out.KVs[0].Value, &meta); err != nil {
		t.Fatalf("stored value: %v", err)
	}
	return meta.APIVersion
}

// TestWebhookCertificateReload: the webhook server serves a renewed
// certificate without a restart (controller-runtime's certwatcher), and
// the API server keeps calling it.
func TestWebhookCertificateReload(t *testing.T) {
	we := testWebhooks
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(we.caPEM)
	serial := func() string {
		conn, err := tls.Dial("tcp", we.addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			return "error: " + err.Error()
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	if strings.HasPrefix(before, "error") {
		t.Fatal(before)
	}
	if _, err := localcluster.IssueServing(filepath.Join(testEnv.cluster.Dir, "pki"), we.certDir); err != nil {
		t.Fatal(err)
	}
	var after string
	eventually(t, 30*time.Second, "the renewed certificate served", func() string {
		if after = serial(); after == before || strings.HasPrefix(after, "error") {
			return "serial " + after
		}
		return ""
	})
	t.Logf("serial %s -> %s", before, after)
	// The API server still reaches the webhooks (a create is defaulted).
	db := database(newNamespace(t), "after-renewal", dbv1.EngineMySQL, 1)
	if err := testEnv.client.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if err := get(t, db); err != nil || db.Spec.Version != "8.4" {
		t.Errorf("after renewal: version %q, %v", db.Spec.Version, err)
	}
}

// TestV1alpha1WritesKeepV1Rules: a v1alpha1 request is checked against the
// v1alpha1 schema, which cannot see the v1 fields carried in the conversion
// annotation; the validating webhook (which sees v1) holds the v1 rules for
// it: scaling below spec.primary through v1alpha1 is refused as through v1.
func TestV1alpha1WritesKeepV1Rules(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cl, _ := userClient(t, "")
	db := database(ns, "lower", dbv1.EnginePostgreSQL, 3, func(d *dbv1.Database) { d.Spec.Primary = "lower-2" })
	if err := cl.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1alpha1")
	u.SetKind("Database")
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(db), u); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, int64(2), "spec", "instances"); err != nil {
			return err
		}
		return cl.Update(ctx, u)
	})
	wantInvalid(t, err, "spec.primary", "spec.primary must name one of this Database's instances, lower-0 to lower-1")
	got := &dbv1.Database{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil || got.Spec.Replicas != 3 {
		t.Errorf("after the refused v1alpha1 update: replicas %d (%v)", got.Spec.Replicas, err)
	}
}

// TestBadSpecsRefusedThroughBothVersions: each spec v1 refuses is refused
// when written through v1alpha1 too, where what v1alpha1 cannot hold
// travels in the conversion annotation its own schema does not look into
// (a hidden spec). v1's rules live once, in its CRD: the API server runs
// them on a v1 write, the validating webhook on a v1alpha1 one. A setting
// that can lose acknowledged writes is refused both ways as well.
func TestBadSpecsRefusedThroughBothVersions(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cl, _ := userClient(t, "")
	for _, tt := range []struct {
		name, want string
		mutate     func(*dbv1.Database)
	}{
		{"a name that is no DNS-1035 label", "metadata.name must be a DNS-1035 label", func(d *dbv1.Database) { d.Name = "9lives" }},
		{"a negative lag bound", "should be greater than or equal to 0", func(d *dbv1.Database) { d.Spec.Failover.MaxLag = ptr.To[int64](-1) }},
		{"as many synchronous replicas as instances", "replicas must be above it", func(d *dbv1.Database) {
			d.Spec.Replicas = 2
			d.Spec.Replication = dbv1.ReplicationSpec{Mode: dbv1.ReplicationSynchronous, SynchronousReplicas: ptr.To[int32](2)}
		}},
		{"a plain-HTTP backup target", "http://", func(d *dbv1.Database) {
			d.Spec.Backup = &dbv1.BackupPolicy{Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "http://s3.example", Bucket: "b",
				CredentialsSecret: dbv1.S3Credentials{Name: "s3"}}}}
		}},
		{"a MySQL setting name that adds lines to its configuration", "parameter names are letters, digits", func(d *dbv1.Database) {
			d.Spec.Engine, d.Spec.Version = dbv1.EngineMySQL, "8.4"
			d.Spec.Parameters = map[string]string{"x\n[client]\npassword": "1"}
		}},
		{"a setting that loses acknowledged writes", "fsync = off is refused", func(d *dbv1.Database) {
			d.Spec.Parameters = map[string]string{"fsync": "off"}
		}},
		{"a setting that opens the server without authentication", "skip_grant_tables is refused", func(d *dbv1.Database) {
			d.Spec.Engine, d.Spec.Version = dbv1.EngineMariaDB, "10.11"
			d.Spec.Parameters = map[string]string{"skip-grant-tables": "ON"}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v1db := database(ns, "hidden", dbv1.EnginePostgreSQL, 3, tt.mutate)
			if err := cl.Create(ctx, v1db); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("through v1: %v, want refused with %q", err, tt.want)
				_ = cl.Delete(ctx, v1db)
			}
			alpha := &dbv1alpha1.Database{}
			if err := alpha.ConvertFrom(database(ns, "hidden", dbv1.EnginePostgreSQL, 3, tt.mutate)); err != nil {
				t.Fatal(err)
			}
			alpha.APIVersion, alpha.Kind = dbv1alpha1.GroupVersion.String(), "Database"
			if err := cl.Create(ctx, alpha); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("through v1alpha1: %v, want refused with %q", err, tt.want)
				_ = cl.Delete(ctx, alpha)
			}
		})
	}
}

// TestEveryUnsafeSettingRefused: every setting of the unsafe table
// (internal/parameters/unsafe.go), per engine, at a value that makes it
// dangerous, is refused through v1 and v1alpha1 with the reason the table
// gives, and nothing is stored.
func TestEveryUnsafeSettingRefused(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cl, _ := userClient(t, "")
	versions := map[dbv1.Engine]string{dbv1.EnginePostgreSQL: "15", dbv1.EngineMariaDB: "10.11", dbv1.EngineMySQL: "8.4"}
	for engine, version := range versions {
		names := parameters.UnsafeNames(string(engine))
		if len(names) == 0 {
			t.Fatalf("%s: no unsafe setting in the table", engine)
		}
		for _, name := range names {
			value, why := "", ""
			for _, v := range []string{"off", "0", "ON", "IDEMPOTENT", "none", "2", "/etc/passwd"} {
				if why = parameters.Unsafe(string(engine), name, v); why != "" {
					value = v
					break
				}
			}
			if why == "" {
				t.Errorf("%s: no value of %s is refused", engine, name)
				continue
			}
			mutate := func(d *dbv1.Database) {
				d.Spec.Engine, d.Spec.Version = engine, version
				d.Spec.Parameters = map[string]string{name: value}
			}
			v1db := database(ns, "unsafe", engine, 2, mutate)
			if err := cl.Create(ctx, v1db); err == nil || !strings.Contains(err.Error(), why) {
				t.Errorf("%s %s = %s through v1: %v, want refused with %q", engine, name, value, err, why)
				_ = cl.Delete(ctx, v1db)
			}
			alpha := &dbv1alpha1.Database{}
			if err := alpha.ConvertFrom(database(ns, "unsafe", engine, 2, mutate)); err != nil {
				t.Fatal(err)
			}
			alpha.APIVersion, alpha.Kind = dbv1alpha1.GroupVersion.String(), "Database"
			if err := cl.Create(ctx, alpha); err == nil || !strings.Contains(err.Error(), why) {
				t.Errorf("%s %s = %s through v1alpha1: %v, want refused with %q", engine, name, value, err, why)
				_ = cl.Delete(ctx, alpha)
			}
		}
	}
}
