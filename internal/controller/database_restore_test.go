package controller

import (
	"context"
	"errors"
	"testing"

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
