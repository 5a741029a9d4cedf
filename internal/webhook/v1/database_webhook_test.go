package v1

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

func db(mutate ...func(*dbv1.Database)) *dbv1.Database {
	d := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", UID: "u1", Generation: 1},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMariaDB, Version: "10.11", Replicas: 3,
			Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")}, DeletionPolicy: dbv1.DeletionPolicyRetain},
		Status: dbv1.DatabaseStatus{Replicas: 3, ReadyReplicas: 3, CurrentPrimary: "orders-0"},
	}
	for _, m := range mutate {
		m(d)
	}
	return d
}

func request(op admissionv1.Operation, dryRun bool) context.Context {
	return requestAs(op, dryRun, "v1")
}

// requestAs is a request written through API version (the webhook sees
// every write as v1).
func requestAs(op admissionv1.Operation, dryRun bool, version string) context.Context {
	kind := &metav1.GroupVersionKind{Group: dbv1.GroupVersion.Group, Version: version, Kind: "Database"}
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, DryRun: &dryRun, UserInfo: authenticationv1.UserInfo{Username: "bob"}, RequestKind: kind}})
}

func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestValidatorRules(t *testing.T) {
	tests := []struct {
		name     string
		old, new *dbv1.Database
		dryRun   bool
		version  string // the API version written through ("": v1)
		err      string // "" admits
		warning  string
		events   []string
	}{
		{name: "create", new: db()},
		{name: "no change", old: db(), new: db()},
		{name: "switchover to an instance that exists", old: db(), new: db(func(d *dbv1.Database) { d.Spec.Primary = "orders-2" })},
		{name: "switchover to an instance not there yet", old: db(func(d *dbv1.Database) { d.Status.Replicas = 1 }),
			new: db(func(d *dbv1.Database) { d.Spec.Primary = "orders-2" }),
			err: `spec.primary: Invalid value: "orders-2": instance orders-2 does not exist yet (1 instances exist)`},
		{name: "switchover during a failover", old: db(func(d *dbv1.Database) { d.Status.PrimaryUnhealthySince = &metav1.Time{} }),
			new: db(func(d *dbv1.Database) { d.Spec.Primary = "orders-1" }),
			err: "spec.primary: Forbidden: a failover of orders-0 is in progress"},
		{name: "scale-down", old: db(), new: db(func(d *dbv1.Database) { d.Spec.Replicas = 1 }),
			warning: "scaling down from 3 to 1 removes instance(s) orders-1, orders-2",
			events:  []string{"Normal AuditScaleDown spec.replicas changed from 3 to 1 (by bob)"}},
		{name: "scaling below the primary (a v1alpha1 write skips that CEL rule)", old: db(func(d *dbv1.Database) { d.Spec.Primary, d.Status.CurrentPrimary = "orders-2", "orders-2" }),
			new:     db(func(d *dbv1.Database) { d.Spec.Primary, d.Spec.Replicas = "orders-2", 2 }),
			err:     `spec.primary: Invalid value: "orders-2": spec.primary must name one of this Database's instances, orders-0 to orders-1`,
			warning: "scaling down from 3 to 2"},
		// Through v1alpha1, every v1 rule of the CRD holds (its schema and
		// CEL rules, run here); through v1 the API server ran them.
		{name: "v1alpha1: bootstrap added later", version: "v1alpha1", old: db(), new: db(func(d *dbv1.Database) {
			d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "b1"}}
		}), err: "bootstrap only applies when a Database is created and cannot be added, changed or removed"},
		{name: "v1alpha1: bad schedule", version: "v1alpha1", new: db(func(d *dbv1.Database) { d.Spec.Backup = &dbv1.BackupPolicy{Schedule: "0 24 * * *"} }),
			err: "schedule 0 24 * * * is not a valid cron expression"},
		{name: "v1alpha1: a negative lag bound", version: "v1alpha1", new: db(func(d *dbv1.Database) { d.Spec.Failover.MaxLag = ptr.To[int64](-1) }),
			err: "spec.failover.maxLag: Invalid value: -1: spec.failover.maxLag in body should be greater than or equal to 0"},
		{name: "v1alpha1: as many synchronous replicas as instances", version: "v1alpha1", new: db(func(d *dbv1.Database) {
			d.Spec.Engine, d.Spec.Version, d.Spec.Replicas = dbv1.EnginePostgreSQL, "15", 2
			d.Spec.Replication = dbv1.ReplicationSpec{Mode: dbv1.ReplicationSynchronous, SynchronousReplicas: ptr.To[int32](2)}
		}), err: "synchronous replication waits for replication.synchronousReplicas", warning: "every commit waits"},
		{name: "v1alpha1: a plain-HTTP backup target", version: "v1alpha1", new: db(func(d *dbv1.Database) {
			d.Spec.Backup = &dbv1.BackupPolicy{Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "http://s3.example", Bucket: "b",
				CredentialsSecret: dbv1.S3Credentials{Name: "s3"}}}}
		}), err: "http://"},
		{name: "v1alpha1: a parameter name that would add a line to my.cnf", version: "v1alpha1", new: db(func(d *dbv1.Database) {
			d.Spec.Engine, d.Spec.Version = dbv1.EngineMySQL, "8.4"
			d.Spec.Parameters = map[string]string{"x\n[client]\npassword": "1"}
		}), err: "parameter names are letters, digits"},
		{name: "v1alpha1: a name that is no DNS-1035 label", version: "v1alpha1", new: db(func(d *dbv1.Database) { d.Name = "Orders" }),
			err: "metadata.name must be a DNS-1035 label"},
		{name: "v1alpha1: an unchanged spec admitted before is not judged again", version: "v1alpha1",
			old: db(func(d *dbv1.Database) { d.Spec.Failover.MaxLag = ptr.To[int64](-1) }),
			new: db(func(d *dbv1.Database) {
				d.Spec.Failover.MaxLag, d.Spec.DeletionPolicy = ptr.To[int64](-1), dbv1.DeletionPolicyRetain
			})},
		{name: "scale-down dry run", old: db(), new: db(func(d *dbv1.Database) { d.Spec.Replicas = 2 }), dryRun: true,
			warning: "scaling down from 3 to 2"},
		{name: "scale-down during a failover", old: db(func(d *dbv1.Database) { d.Status.PrimaryUnhealthySince = &metav1.Time{} }),
			new:     db(func(d *dbv1.Database) { d.Spec.Replicas = 2 }),
			err:     "spec.replicas: Forbidden: cannot scale from 3 to 2 while a failover of orders-0 is in progress: 3 instances are ready",
			warning: "scaling down from 3 to 2"},
		{name: "scale-down during a failover, not below the ready ones", old: db(func(d *dbv1.Database) {
			d.Status.PrimaryUnhealthySince, d.Status.ReadyReplicas = &metav1.Time{}, 2
		}),
			new: db(func(d *dbv1.Database) { d.Spec.Replicas = 2 }), warning: "scaling down from 3 to 2",
			events: []string{"Normal AuditScaleDown spec.replicas changed from 3 to 2 (by bob)"}},
		{name: "scale-down during a switchover", old: db(func(d *dbv1.Database) { d.Spec.Primary = "orders-1" }),
			new: db(func(d *dbv1.Database) { d.Spec.Primary, d.Spec.Replicas = "orders-1", 2 }),
			err: "while a switchover to orders-1 is in progress", warning: "scaling down from 3 to 2"},
		{name: "major version", old: db(), new: db(func(d *dbv1.Database) { d.Spec.Version = "11.4" }),
			warning: "mariadb 10.11 -> 11.4 is a major version change",
			events:  []string{"Normal AuditVersionChange spec.version changed from 10.11 to 11.4 (by bob)"}},
		{name: "minor version", old: db(func(d *dbv1.Database) { d.Spec.Version = "11.4" }), new: db(func(d *dbv1.Database) { d.Spec.Version = "11.8" }),
			events: []string{"Normal AuditVersionChange spec.version changed from 11.4 to 11.8 (by bob)"}},
		{name: "deletion protection removed", old: db(), new: db(func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete }),
			warning: "deleting this Database now deletes its volumes",
			events:  []string{"Normal AuditDeletionPolicy spec.deletionPolicy changed from Retain to Delete: deletion protection removed (by bob)"}},
		{name: "synchronous, one replica may be down", new: db(func(d *dbv1.Database) { d.Spec.Replication.Mode = dbv1.ReplicationSynchronous })},
		{name: "synchronous with every replica", new: db(func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Replication.Mode = 2, dbv1.ReplicationSynchronous
		}), warning: "every commit waits for all 1 replicas, so the primary takes no write while any replica is down"},
		{name: "parameters the server knows", new: db(func(d *dbv1.Database) {
			d.Spec.Parameters = map[string]string{"max-connections": "300", "long_query_time": "2"}
		})},
		{name: "a parameter the server does not know", new: db(func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"max_conections": "300"} }),
			err: `spec.parameters[max_conections]: Invalid value: "300": max_conections is not a setting mariadb knows`},
		{name: "a parameter the operator owns", new: db(func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"read-only": "OFF"} }),
			err: `spec.parameters[read-only]: Invalid value: "OFF": read_only is set by the operator (replication and failover)`},
		{name: "a parameter value over two lines", new: db(func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"long_query_time": "2\nread_only = OFF"} }),
			err: "a value is at most 1024 characters, on one line, without control characters"},
		{name: "a fixed parameter", new: db(func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"version": "1"} }),
			err: "version is fixed when the server is built or initialized and cannot be set"},
		{name: "one option spelled twice", new: db(func(d *dbv1.Database) {
			d.Spec.Parameters = map[string]string{"max-connections": "300", "max_connections": "400"}
		}), err: `spec.parameters[max_connections]: Duplicate value: "max-connections and max_connections are one setting (max_connections)"`},
		{name: "a parameter admitted before stays admitted", old: db(func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"gone": "1"} }),
			new: db(func(d *dbv1.Database) { d.Spec.Parameters, d.Spec.Replicas = map[string]string{"gone": "1"}, 3 })},
		{name: "deletion protection restored", old: db(func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete }), new: db()},
		{name: "a limit below its request", new: db(func(d *dbv1.Database) {
			d.Spec.Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("2Gi")}}
		}), err: `spec.resources.limits[cpu]: Invalid value: "500m": below the request 1: raise the limit or lower the request`},
		{name: "an allowed image", old: db(), new: db(func(d *dbv1.Database) { d.Spec.Image = "approved/mariadb:10.11" }),
			events: []string{`Normal AuditImageChange spec.image changed from "" to "approved/mariadb:10.11" (by bob)`}},
		{name: "an image outside the allowed prefixes", new: db(func(d *dbv1.Database) { d.Spec.Image = "elsewhere/mariadb:10.11" }),
			err: "spec.image: Forbidden: elsewhere/mariadb:10.11 is not under an allowed image prefix (approved/)"},
		{name: "an image admitted before is not judged again", old: db(func(d *dbv1.Database) { d.Spec.Image = "elsewhere/mariadb:10.11" }),
			new: db(func(d *dbv1.Database) { d.Spec.Image, d.Spec.Replicas = "elsewhere/mariadb:10.11", 4 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			v := &DatabaseValidator{Recorder: rec, Rules: append(DefaultRules(), ImagePolicy([]string{"approved/"}))}
			op := admissionv1.Update
			if tt.old == nil {
				op = admissionv1.Create
			}
			version := tt.version
			if version == "" {
				version = "v1"
			}
			warnings, err := v.validate(requestAs(op, tt.dryRun, version), tt.old, tt.new)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("error %v, want %q", err, tt.err)
			}
			if got := strings.Join(warnings, "\n"); (tt.warning == "") != (got == "") || !strings.Contains(got, tt.warning) {
				t.Errorf("warnings %q, want %q", got, tt.warning)
			}
			if got := drain(rec); strings.Join(got, "\n") != strings.Join(tt.events, "\n") {
				t.Errorf("events %q, want %q", got, tt.events)
			}
		})
	}
}

// TestAuditOncePerChange: the same admitted change retried (a conflict with
// a status write) is recorded once; the next change to the same field is
// recorded again.
func TestAuditOncePerChange(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	v := &DatabaseValidator{Recorder: rec, Rules: DefaultRules()}
	ctx := request(admissionv1.Update, false)
	down := db(func(d *dbv1.Database) { d.Spec.Replicas, d.Generation = 2, 2 })
	for range 3 {
		if _, err := v.validate(ctx, db(), down); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.validate(ctx, db(func(d *dbv1.Database) { d.Generation = 3 }), db(func(d *dbv1.Database) { d.Spec.Replicas, d.Generation = 2, 4 })); err != nil {
		t.Fatal(err)
	}
	if got := drain(rec); len(got) != 2 {
		t.Errorf("events %q, want two", got)
	}
}

// TestMetadataOnlyUpdatesPass: a Database admitted under older rules that
// now refuse it can still have its finalizer removed (and so be deleted)
// and be labelled; a change of its spec is judged.
func TestMetadataOnlyUpdatesPass(t *testing.T) {
	v := &DatabaseValidator{Rules: DefaultRules()}
	old := db(func(d *dbv1.Database) {
		d.Finalizers = []string{"example.com/finalizer"}
		// Admitted before the rule existed.
		d.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		d.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	})
	unlabelled := old.DeepCopy()
	unlabelled.Finalizers, unlabelled.Labels = nil, map[string]string{"team": "a"}
	if _, err := v.ValidateUpdate(request(admissionv1.Update, false), old, unlabelled); err != nil {
		t.Errorf("a metadata-only update was refused: %v", err)
	}
	scaled := old.DeepCopy()
	scaled.Spec.Replicas = 4
	if _, err := v.ValidateUpdate(request(admissionv1.Update, false), old, scaled); err == nil || !strings.Contains(err.Error(), "below the request 2") {
		t.Errorf("a spec change was not judged: %v", err)
	}
}

func TestCheckImagePrefixes(t *testing.T) {
	if err := CheckImagePrefixes([]string{"mirror.example/", "mirror.example/db/"}); err != nil {
		t.Error(err)
	}
	if err := CheckImagePrefixes([]string{"mirror.example"}); err == nil || !strings.Contains(err.Error(), "must end in '/'") {
		t.Errorf("a prefix without a boundary: %v", err)
	}
}

// TestExtraRules: rules added after the built-in ones run too.
func TestExtraRules(t *testing.T) {
	refuse := func(_ context.Context, _, _ *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
		return nil, field.ErrorList{field.Required(field.NewPath("spec", "backup"), "name a Secret that exists")}, nil
	}
	v := &DatabaseValidator{Rules: append(DefaultRules(), refuse)}
	if _, err := v.ValidateCreate(context.Background(), db()); err == nil || !strings.Contains(err.Error(), "name a Secret that exists") {
		t.Errorf("extra rule: %v", err)
	}
}

func TestDefaulter(t *testing.T) {
	raw := func(d *dbv1.Database) runtime.RawExtension {
		b, _ := json.Marshal(d)
		return runtime.RawExtension{Raw: b}
	}
	updateCtx := func(old *dbv1.Database) context.Context {
		return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Update, OldObject: raw(old)}})
	}
	for _, tt := range []struct {
		name    string
		ctx     context.Context
		in      *dbv1.Database
		version string
	}{
		{"create postgresql", context.Background(), db(func(d *dbv1.Database) { d.Spec.Engine, d.Spec.Version = dbv1.EnginePostgreSQL, "" }), "17"},
		{"create keeps a set version", context.Background(), db(), "10.11"},
		{"update of an object written without the webhook keeps what runs",
			updateCtx(db(func(d *dbv1.Database) {
				d.Spec.Engine, d.Spec.Version, d.Status.Version = dbv1.EnginePostgreSQL, "", "15"
			})),
			db(func(d *dbv1.Database) { d.Spec.Engine, d.Spec.Version = dbv1.EnginePostgreSQL, "" }), "15"},
		{"update without the set version keeps it (a manifest re-applied)", updateCtx(db()), db(func(d *dbv1.Database) { d.Spec.Version = "" }), "10.11"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := (&DatabaseDefaulter{}).Default(tt.ctx, tt.in); err != nil {
				t.Fatal(err)
			}
			if tt.in.Spec.Version != tt.version {
				t.Errorf("version %q, want %q", tt.in.Spec.Version, tt.version)
			}
			if !*tt.in.Spec.Failover.Enabled || *tt.in.Spec.Failover.DelaySeconds != 10 || tt.in.Spec.Resources.Requests.Memory().String() != "256Mi" {
				t.Errorf("defaults %+v", tt.in.Spec)
			}
		})
	}
	kept := db(func(d *dbv1.Database) {
		d.Spec.Failover.Enabled, d.Spec.Failover.DelaySeconds = ptr.To(false), ptr.To(int32(0))
	})
	if err := (&DatabaseDefaulter{}).Default(context.Background(), kept); err != nil || *kept.Spec.Failover.Enabled || *kept.Spec.Failover.DelaySeconds != 0 {
		t.Errorf("user's failover overridden: %+v %v", kept.Spec.Failover, err)
	}
}

// TestSparseDefaulter: the patch touches only defaulted fields, and a
// request the schema will refuse is let through untouched.
func TestSparseDefaulter(t *testing.T) {
	h := &sparseDefaulter{defaulter: &DatabaseDefaulter{}}
	handle := func(obj string) admission.Response {
		return h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(obj)}}})
	}
	r := handle(`{"apiVersion":"example.com/v1","kind":"Database","metadata":{"name":"a"},"spec":{"engine":"mysql","storage":{"size":"1Gi"}}}`)
	var paths []string
	for _, p := range r.Patches {
		paths = append(paths, p.Operation+" "+p.Path)
	}
	slices.Sort(paths)
	if got := strings.Join(paths, ","); !r.Allowed || got != "add /spec/failover,add /spec/resources,add /spec/version" {
		t.Errorf("patch %s (allowed %v)", got, r.Allowed)
	}
	for _, obj := range []string{
		`{"spec":{"engine":"mysql","storage":{"size":"ten gigs"}}}`, // the schema says what is wrong
		`{"metadata":{"name":"a"}}`,
	} {
		if r := handle(obj); !r.Allowed || len(r.Patches) != 0 {
			t.Errorf("%s: allowed %v, patches %v", obj, r.Allowed, r.Patches)
		}
	}
	// No engine: no version to pick; nothing about the engine is invented.
	r = handle(`{"spec":{"storage":{"size":"1Gi"}}}`)
	for _, p := range r.Patches {
		if strings.Contains(p.Path, "engine") || strings.Contains(p.Path, "version") || strings.Contains(p.Path, "storage") {
			t.Errorf("patched %s %s", p.Operation, p.Path)
		}
	}
}
