package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "example.com/database-operator/api/v1"
)

// The Backup to restore decides the restore's course: one not there yet is
// waited for, one that failed fails the restore for good, and an API error
// is retried: it says nothing of the backup (it used to fail the restore
// for good, asking the user to recreate the Database).
func TestRestoreSourceOutcomes(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name       string
		backup     *dbv1.Backup
		apiErr     error
		wantReason string // "" : the phase fails with the error, to be retried
	}{
		{name: "missing Backup", wantReason: dbv1.ReasonWaitingForBackup},
		{name: "running Backup", backup: &dbv1.Backup{Status: dbv1.BackupStatus{Phase: dbv1.BackupRunning}}, wantReason: dbv1.ReasonWaitingForBackup},
		{name: "failed Backup", backup: &dbv1.Backup{Status: dbv1.BackupStatus{Phase: dbv1.BackupFailed, Message: "disk full"}}, wantReason: dbv1.ReasonRestoreFailed},
		{name: "API error", apiErr: errors.New("etcdserver: request timed out")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: "nightly"}}
			})
			objs := []client.Object{db}
			if tt.backup != nil {
				tt.backup.ObjectMeta = metav1.ObjectMeta{Namespace: db.Namespace, Name: "nightly"}
				objs = append(objs, tt.backup)
			}
			var writes int
			r, c := newFakeReconciler(t, &writes, objs...)
			r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
					if _, ok := o.(*dbv1.Backup); ok && tt.apiErr != nil {
						return tt.apiErr
					}
					return c.Get(ctx, key, o, opts...)
				},
			})
			obs := &observed{}
			err := r.reconcileRestore(ctx, db, obs)
			if tt.wantReason == "" {
				if !errors.Is(err, tt.apiErr) {
					t.Errorf("error %v, want the API error to be retried", err)
				}
				if obs.restored != nil && obs.restored.Reason == dbv1.ReasonRestoreFailed {
					t.Errorf("an API error failed the restore for good: %s", obs.restored.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if obs.restored == nil || obs.restored.Reason != tt.wantReason {
				t.Fatalf("Restored %+v, want reason %s", obs.restored, tt.wantReason)
			}
			if tt.wantReason == dbv1.ReasonWaitingForBackup && obs.requeue == 0 {
				t.Error("waiting for the Backup without asking to look again")
			}
		})
	}
}

// A MariaDB Backup with a binary log archive is restored with the archive
// replayed after its dump: to the recovery target, else to the archive's
// end. A target the Backup cannot reach is refused before any Job.
func TestBinlogReplayArgs(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	taken := metav1.NewTime(now.Add(-time.Hour))
	archived := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b1"}, Status: dbv1.BackupStatus{ArchivePath: "shop/orders/_binlog/uid-1", CompletedAt: &taken}}
	plain := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b0"}, Status: dbv1.BackupStatus{CompletedAt: &taken}}
	for _, tt := range []struct {
		name            string
		engine          dbv1.Engine
		target          *dbv1.RecoveryTarget
		backup          *dbv1.Backup
		want, refusalIs string
	}{
		{name: "a dump without an archive, as taken", engine: dbv1.EngineMariaDB, backup: plain},
		{name: "the archive to its end", engine: dbv1.EngineMariaDB, backup: archived, want: "--binlog-archive=shop/orders/_binlog/uid-1"},
		{name: "to a moment", engine: dbv1.EngineMariaDB, backup: archived, target: &dbv1.RecoveryTarget{Time: "2026-12-07T11:30:00.25+00:00"},
			want: "--binlog-archive=shop/orders/_binlog/uid-1 --target-time=2026-12-07T11:30:00.25Z"},
		{name: "to a GTID", engine: dbv1.EngineMariaDB, backup: archived, target: &dbv1.RecoveryTarget{GTID: "0-1001-57"},
			want: "--binlog-archive=shop/orders/_binlog/uid-1 --target-gtid=0-1001-57"},
		{name: "a target without an archive", engine: dbv1.EngineMariaDB, backup: plain, target: &dbv1.RecoveryTarget{GTID: "0-1001-57"}, refusalIs: "has no binary log archive"},
		{name: "a moment before the backup", engine: dbv1.EngineMariaDB, backup: archived, target: &dbv1.RecoveryTarget{Time: "2026-12-07T10:00:00Z"}, refusalIs: "before Backup b1 completed"},
		{name: "a moment to come", engine: dbv1.EngineMariaDB, backup: archived, target: &dbv1.RecoveryTarget{Time: "2026-12-07T13:00:00Z"}, refusalIs: "in the future"},
		{name: "a source path", engine: dbv1.EngineMariaDB, target: &dbv1.RecoveryTarget{GTID: "0-1001-57"}, refusalIs: "needs bootstrap.backup"},
		{name: "PostgreSQL recovers in its own phase", engine: dbv1.EnginePostgreSQL, backup: archived},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := &dbv1.Database{Spec: dbv1.DatabaseSpec{Engine: tt.engine, Bootstrap: &dbv1.BootstrapSpec{RecoveryTarget: tt.target}}}
			args, refusal := binlogReplayArgs(db, tt.backup, now)
			if got := strings.Join(args, " "); got != tt.want || !strings.Contains(refusal, tt.refusalIs) || (tt.refusalIs == "") != (refusal == "") {
				t.Errorf("args %q refusal %q, want %q refusal with %q", got, refusal, tt.want, tt.refusalIs)
			}
		})
	}
}

// A MariaDB Database that archives records its binary log archive in each
// Backup to its own target, physical (the default) or logical: the copy's
// or the dump's GTID position is where a replay starts.
func TestRecordMethodBinlogArchive(t *testing.T) {
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "uid-1"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMariaDB, Backup: &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}}}
	var st dbv1.BackupStatus
	recordMethod(&st, &dbv1.Backup{}, db)
	if st.Method != dbv1.BackupPhysical || st.ArchivePath != "shop/orders/_binlog/uid-1" {
		t.Errorf("recorded %s %q", st.Method, st.ArchivePath)
	}
	st = dbv1.BackupStatus{}
	recordMethod(&st, &dbv1.Backup{Spec: dbv1.BackupSpec{Method: dbv1.BackupLogical}}, db)
	if st.Method != dbv1.BackupLogical || st.ArchivePath != "shop/orders/_binlog/uid-1" {
		t.Errorf("recorded %s %q for a dump", st.Method, st.ArchivePath)
	}
	st = dbv1.BackupStatus{}
	recordMethod(&st, &dbv1.Backup{Spec: dbv1.BackupSpec{Target: &dbv1.BackupTarget{}}}, db)
	if st.ArchivePath != "" {
		t.Errorf("a Backup to another target records the archive %q", st.ArchivePath)
	}
}
