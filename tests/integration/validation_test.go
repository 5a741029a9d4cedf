package integration

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"bad cron: six fields", func(s map[string]any) { s["backup"] = map[string]any{"schedule": "0 3 * * * *"} }, "schedule 0 3 * * * * is not a valid cron expression: give five fields"},
		{"bad cron: minute 60", func(s map[string]any) { s["backup"] = map[string]any{"schedule": "60 3 * * *"} }, "is not a valid cron expression"},
		{"bad cron: words", func(s map[string]any) { s["backup"] = map[string]any{"schedule": "every night"} }, "is not a valid cron expression"},
		{"negative keepLast", func(s map[string]any) {
			s["backup"] = map[string]any{"retention": map[string]any{"keepLast": int64(-1)}}
		}, "spec.backup.retention.keepLast: Invalid value: -1: spec.backup.retention.keepLast in body should be greater than or equal to 1"},
		{"negative maxAge", func(s map[string]any) { s["backup"] = map[string]any{"retention": map[string]any{"maxAge": "-3d"}} }, "maxAge -3d is not a positive duration"},
		{"maxAge without unit", func(s map[string]any) { s["backup"] = map[string]any{"retention": map[string]any{"maxAge": "30"}} }, "maxAge 30 is not a positive duration"},
		{"two backup targets", func(s map[string]any) {
			s["backup"] = map[string]any{"target": map[string]any{"volume": map[string]any{}, "s3": map[string]any{
				"endpoint": "s3.example.com", "bucket": "backups", "credentialsSecret": map[string]any{"name": "s3"}}}}
		}, "choose one backup target: volume or s3, not both"},
		{"s3 without credentials", func(s map[string]any) {
			s["backup"] = map[string]any{"target": map[string]any{"s3": map[string]any{"endpoint": "s3.example.com", "bucket": "backups"}}}
		}, "spec.backup.target.s3.credentialsSecret: Required value"},
		{"short backup deadline", func(s map[string]any) { s["backup"] = map[string]any{"deadlineSeconds": int64(5)} }, "spec.backup.deadlineSeconds"},
		{"synchronous with one instance", func(s map[string]any) { s["replication"] = map[string]any{"mode": "Synchronous"} },
			"synchronous replication waits for replication.synchronousReplicas (default 1) replicas per commit, so replicas must be above it"},
		{"synchronous for as many replicas as instances", func(s map[string]any) {
			s["replicas"], s["replication"] = int64(3), map[string]any{"mode": "Synchronous", "synchronousReplicas": int64(3)}
		}, "so replicas must be above it"},
		{"synchronousReplicas while asynchronous", func(s map[string]any) {
			s["replicas"], s["replication"] = int64(3), map[string]any{"synchronousReplicas": int64(1)}
		}, "synchronousReplicas applies only to mode Synchronous"},
		{"MariaDB waits for one replica", func(s map[string]any) {
			s["engine"], s["replicas"], s["replication"] = "mariadb", int64(3), map[string]any{"mode": "Synchronous", "synchronousReplicas": int64(2)}
		}, "replication.synchronousReplicas must be 1"},
		{"a parameter name that is not one", func(s map[string]any) { s["parameters"] = map[string]any{"work mem": "8MB"} },
			"parameter names are letters, digits"},
		{"unknown replication mode", func(s map[string]any) { s["replication"] = map[string]any{"mode": "Quorum"} }, `spec.replication.mode: Unsupported value: "Quorum"`},
		{"bootstrap from two sources", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "source": map[string]any{"target": map[string]any{}, "path": "ns/db/b1"}}
		}, "bootstrap needs exactly one of backup"},
		{"bootstrap from nothing", func(s map[string]any) { s["bootstrap"] = map[string]any{} }, "bootstrap needs exactly one of backup"},
		{"a plain http backup endpoint", func(s map[string]any) {
			s["backup"] = map[string]any{"target": map[string]any{"s3": map[string]any{
				"endpoint": "HTTP://s3.example.com", "bucket": "backups", "credentialsSecret": map[string]any{"name": "s3"}}}}
		}, "endpoint is plain http://: the credentials and every dump would cross the network unencrypted"},
		{"a limit below its request", func(s map[string]any) {
			s["resources"] = map[string]any{"requests": map[string]any{"memory": "2Gi"}, "limits": map[string]any{"memory": "1Gi"}}
		}, `spec.resources.limits[memory]: Invalid value: "1Gi": below the request 2Gi`},
		{"a WAL position target for MariaDB", func(s map[string]any) {
			s["engine"], s["version"] = "mariadb", "11.4"
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"lsn": "0/3000000"}}
		}, "a MariaDB recovery stops at a time or a gtid position: lsn and name are PostgreSQL's"},
		{"a recovery target for MySQL", func(s map[string]any) {
			s["engine"], s["version"] = "mysql", "8.4"
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"time": "2026-12-07T00:01:26Z"}}
		}, "MySQL restores a backup as it was taken"},
		{"a GTID target for PostgreSQL", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"gtid": "0-1001-57"}}
		}, "a GTID recovery target is MariaDB's"},
		{"a GTID that is none", func(s map[string]any) {
			s["engine"], s["version"] = "mariadb", "11.4"
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"gtid": "0-1001"}}
		}, "spec.bootstrap.recoveryTarget.gtid: Invalid value"},
		{"a recovery target from a source path", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"source": map[string]any{"target": map[string]any{}, "path": "ns/db/b1"}, "recoveryTarget": map[string]any{"lsn": "0/3000000"}}
		}, "a recovery target needs bootstrap.backup"},
		{"two recovery targets", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"lsn": "0/3000000", "name": "before-migration"}}
		}, "a recovery target is one of time, lsn, name or gtid"},
		{"a recovery time that is none", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"time": "yesterday noon"}}
		}, "spec.bootstrap.recoveryTarget.time"},
		{"a malformed LSN", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"backup": map[string]any{"name": "b1"}, "recoveryTarget": map[string]any{"lsn": "0-3000000"}}
		}, "spec.bootstrap.recoveryTarget.lsn"},
		{"bootstrap path escaping", func(s map[string]any) {
			s["bootstrap"] = map[string]any{"source": map[string]any{"target": map[string]any{}, "path": "../other/b1"}}
		}, "path must be relative to the target and must not contain '..'"},
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
	mysql := database(ns, "mysql", dbv1.EngineMySQL, 1, func(db *dbv1.Database) { db.Spec.Version = "8.4" })
	for _, db := range []*dbv1.Database{pg, maria, mysql} {
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
		{"mariadb downgrade", maria, func(db *dbv1.Database) { db.Spec.Version = "10.11" }, "MariaDB version cannot be downgraded"},
		{"too many replicas", maria, func(db *dbv1.Database) { db.Spec.Replicas = 12 }, "should be less than or equal to 10"},
		{"archiving asked of MySQL", mysql, func(db *dbv1.Database) {
			db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
		}, "MySQL's binary log archiving is not available"},
		{"drills asked of MariaDB", maria, func(db *dbv1.Database) {
			db.Spec.Backup = &dbv1.BackupPolicy{Verify: &dbv1.VerifyPolicy{Schedule: "@weekly"}}
		}, "restore drills (backup.verify) restore physical PostgreSQL backups only so far"},
		{"a drill schedule that is none", pg, func(db *dbv1.Database) {
			db.Spec.Backup = &dbv1.BackupPolicy{Verify: &dbv1.VerifyPolicy{Schedule: "every sunday"}}
		}, "schedule every sunday is not a valid cron expression"},
		{"an archive timeout too short", pg, func(db *dbv1.Database) {
			db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true, TimeoutSeconds: ptr.To[int32](1)}}
		}, "timeoutSeconds in body should be greater than or equal to 10"},
		{"bootstrap added later", maria, func(db *dbv1.Database) {
			db.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "b1"}}
		}, "bootstrap only applies when a Database is created"},
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

	// An update without the version (a manifest re-applied that never named
	// one) keeps the version set: the defaulting webhook fills it back in.
	updateSpec(t, pg, func(db *dbv1.Database) { db.Spec.Version = "" })
	kept := &dbv1.Database{}
	if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(pg), kept); err != nil || kept.Spec.Version != "15" {
		t.Errorf("version after an update without it: %q (%v), want 15", kept.Spec.Version, err)
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
// of a StatefulSet and its Services are named after it; names that would
// not fit, or that a Service cannot take, are refused up front.
func TestNameLengthIsBounded(t *testing.T) {
	ns := newNamespace(t)
	for _, name := range []string{"orders.v2", "1orders"} {
		err := testEnv.client.Create(context.Background(), database(ns, name, dbv1.EnginePostgreSQL, 1))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name must be a DNS-1035 label") {
			t.Errorf("name %q: %v", name, err)
		}
	}
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

// TestInvalidBackupsAreRejected: a Backup names its Database, fits a Job
// name, and never changes once created.
func TestInvalidBackupsAreRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	noDB := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}
	if err := testEnv.client.Create(ctx, noDB); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.database.name") {
		t.Errorf("a Backup without a Database: %v", err)
	}
	long := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: strings.Repeat("b", 64)}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "db"}}}
	if err := testEnv.client.Create(ctx, long); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at most 63 characters") {
		t.Errorf("a 64-character Backup name: %v", err)
	}
	// (Database "db" does not exist: the Backup is accepted, then fails with DatabaseNotFound.)
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}, Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "db"}}}
	if err := testEnv.client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Database.Name = "other"
		return testEnv.client.Update(ctx, b)
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "a Backup's spec cannot change") {
		t.Errorf("changing a Backup's spec: %v", err)
	}
	got := waitBackup(t, ns, "b")
	if got.Status.Phase != dbv1.BackupFailed || got.Status.Reason != "DatabaseNotFound" || !strings.Contains(got.Status.Message, `Database "db" does not exist`) {
		t.Errorf("Backup of a missing Database: %+v", got.Status)
	}
}
