package integration

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// TestInvalidCreatesAreRejected: the API server itself (schema and CEL)
// refuses bad specs, each with a message that says what is wrong.
func TestInvalidCreatesAreRejected(t *testing.T) {
	ns := newNamespace(t)
	valid := func() map[string]any {
		return map[string]any{"engine": "postgresql", "replicas": int64(1), "storage": map[string]any{"size": "1Gi"}}
	}
	tests := []struct {
		name    string
		mutate  func(spec map[string]any)
		message string
	}{
		{"unknown engine", func(s map[string]any) { s["engine"] = "oracle" }, `spec.engine: Unsupported value: "oracle"`},
		{"missing engine", func(s map[string]any) { delete(s, "engine") }, "spec.engine: Required value"},
		{"zero replicas", func(s map[string]any) { s["replicas"] = int64(0) }, "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"},
		{"eleven replicas", func(s map[string]any) { s["replicas"] = int64(11) }, "should be less than or equal to 10"},
		{"unsupported postgresql version", func(s map[string]any) { s["version"] = "9.6" }, "version 9.6 is not supported for engine postgresql"},
		{"version of another engine", func(s map[string]any) { s["engine"], s["version"] = "mariadb", "8.4" }, "version 8.4 is not supported for engine mariadb"},
		{"zero storage", func(s map[string]any) { s["storage"] = map[string]any{"size": "0"} }, "storage size must be greater than zero"},
		{"missing storage", func(s map[string]any) { delete(s, "storage") }, "spec.storage: Required value"},
		{"malformed storage size", func(s map[string]any) { s["storage"] = map[string]any{"size": "ten gigs"} }, "spec.storage.size"},
		{"unknown deletion policy", func(s map[string]any) { s["deletionPolicy"] = "Keep" }, `spec.deletionPolicy: Unsupported value: "Keep"`},
		{"empty storage class", func(s map[string]any) { s["storage"] = map[string]any{"size": "1Gi", "storageClassName": ""} }, "spec.storage.storageClassName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := valid()
			tt.mutate(spec)
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.com/v1", "kind": "Database",
				"metadata": map[string]any{"name": "bad", "namespace": ns},
				"spec":     spec,
			}}
			err := testEnv.client.Create(context.Background(), u)
			if err == nil {
				_ = testEnv.client.Delete(context.Background(), u)
				t.Fatalf("created %v", spec)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q\nwant an Invalid error containing %q", err, tt.message)
			}
		})
	}
}

// TestInvalidUpdatesAreRejected: transition rules refuse changes that would
// hurt the data, and the stored object stays as it was.
func TestInvalidUpdatesAreRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	pg := database(ns, "pg", dbv1.EnginePostgreSQL, 1, func(db *dbv1.Database) {
		db.Spec.Version = "15"
		db.Spec.Storage.StorageClassName = ptr.To("kwok-volume")
	})
	maria := database(ns, "maria", dbv1.EngineMariaDB, 1, func(db *dbv1.Database) { db.Spec.Version = "11.4" })
	for _, db := range []*dbv1.Database{pg, maria} {
		if err := testEnv.client.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		db      *dbv1.Database
		mutate  func(*dbv1.Database)
		message string
	}{
		{"engine change", pg, func(db *dbv1.Database) { db.Spec.Engine = dbv1.EngineMySQL; db.Spec.Version = "8.4" }, "engine is immutable"},
		{"storage shrink", pg, func(db *dbv1.Database) { db.Spec.Storage.Size = resource.MustParse("512Mi") }, "storage size may grow but never shrink"},
		{"storage class change", pg, func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = ptr.To("fast") }, "storageClassName is immutable"},
		{"storage class removal", pg, func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = nil }, "storageClassName is immutable"},
		{"postgresql major upgrade", pg, func(db *dbv1.Database) { db.Spec.Version = "16" }, "PostgreSQL major version cannot change in place"},
		{"version removal", pg, func(db *dbv1.Database) { db.Spec.Version = "" }, "version cannot be removed once set"},
		{"mariadb downgrade", maria, func(db *dbv1.Database) { db.Spec.Version = "10.11" }, "MariaDB version cannot be downgraded"},
		{"too many replicas", maria, func(db *dbv1.Database) { db.Spec.Replicas = 12 }, "should be less than or equal to 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := &dbv1.Database{}
			// The operator writes too (finalizer, status): retry on conflicts.
			err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(tt.db), before); err != nil {
					return err
				}
				changed := before.DeepCopy()
				tt.mutate(changed)
				return testEnv.client.Update(ctx, changed)
			})
			if err == nil {
				t.Fatal("update accepted")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q\nwant an Invalid error containing %q", err, tt.message)
			}
			after := &dbv1.Database{}
			if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(tt.db), after); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(before.Spec, after.Spec) {
				t.Errorf("the refused update changed the stored spec:\n%+v\n%+v", before.Spec, after.Spec)
			}
		})
	}

	// Legal changes on the same objects still go through.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		got := &dbv1.Database{}
		if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(maria), got); err != nil {
			return err
		}
		got.Spec.Version = "11.8"
		got.Spec.Storage.Size = resource.MustParse("2Gi")
		return testEnv.client.Update(ctx, got)
	})
	if err != nil {
		t.Errorf("a MariaDB upgrade with storage growth was refused: %v", err)
	}
}

// TestNameLengthIsBounded: a Database's instances are <name>-<ordinal> pods
// of a StatefulSet; names that would not fit are refused up front.
func TestNameLengthIsBounded(t *testing.T) {
	ns := newNamespace(t)
	long := database(ns, strings.Repeat("a", 53), dbv1.EnginePostgreSQL, 1)
	err := testEnv.client.Create(context.Background(), long)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at most 52 characters") {
		t.Errorf("a 53-character name: %v", err)
	}
	fits := database(ns, strings.Repeat("a", 52), dbv1.EnginePostgreSQL, 1)
	if err := testEnv.client.Create(context.Background(), fits); err != nil {
		t.Errorf("a 52-character name: %v", err)
	}
}
