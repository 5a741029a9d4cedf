package controller

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
)

// TestPruneDeletesOnlyRecordsOfDeletedBackups: retention named b1 and b2 as
// deleted at the Database's current target; b2's record is of a backup at
// the target the Database used before, whose data is still there, so it is
// kept; b3 was not named.
func TestPruneDeletesOnlyRecordsOfDeletedBackups(t *testing.T) {
	now := &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "backups-now"}}
	before := &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "backups-before"}}
	record := func(name string, target *dbv1.BackupTarget) *dbv1.Backup {
		return &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:   dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}},
			Status: dbv1.BackupStatus{Path: backup.Path("ns", "orders", name), Target: target}}
	}
	var writes int
	dr, c := newFakeReconciler(t, &writes, record("b1", now), record("b2", before), record("b3", now))
	r := &BackupReconciler{Client: c, APIReader: c, Scheme: dr.Scheme}
	if err := r.prune(context.Background(), record("b4", now), now, []string{"b1", "b2"}); err != nil {
		t.Fatal(err)
	}
	for name, kept := range map[string]bool{"b1": false, "b2": true, "b3": true} {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &dbv1.Backup{})
		if kept != (err == nil) || (!kept && !apierrors.IsNotFound(err)) {
			t.Errorf("Backup %s: kept %v, err %v", name, kept, err)
		}
	}
}

// TestBackupArgsPruneTheArchive: a backup at the Database's own target,
// which its archive (WAL, or MariaDB's binary log) shares, carries the
// archive to its retention; one at a target of its own, or of a Database
// that does not archive, does not.
func TestBackupArgsPruneTheArchive(t *testing.T) {
	keep := int32(2)
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "uid-1"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgreSQL, Backup: &dbv1.BackupPolicy{
			Retention: dbv1.BackupRetention{KeepLast: &keep}, Archive: &dbv1.ArchivePolicy{Enabled: true}}}}
	own := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "b1"}}
	elsewhere := own.DeepCopy()
	elsewhere.Spec.Target = &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "other"}}
	noArchive := db.DeepCopy()
	noArchive.Spec.Backup.Archive = nil
	maria := db.DeepCopy()
	maria.Spec.Engine = dbv1.EngineMariaDB
	for _, c := range []struct {
		name string
		b    *dbv1.Backup
		db   *dbv1.Database
		want string
	}{{"own target", own, db, "--archive=shop/orders/_wal/uid-1"}, {"a target of its own", elsewhere, db, ""},
		{"no archive", own, noArchive, ""}, {"MariaDB", own, maria, "--archive=shop/orders/_binlog/uid-1"}} {
		args := strings.Join(backupArgs(c.b, c.db, "orders-1", &dbv1.BackupStatus{}), " ")
		if got := strings.Contains(args, "--archive="); got != (c.want != "") || !strings.Contains(args, c.want) {
			t.Errorf("%s: %s, want %q", c.name, args, c.want)
		}
	}
}
