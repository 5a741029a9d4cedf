package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/controller"
	"example.com/database-operator/tests/utils/olmrbac"
)

// TestSingleNamespaceLifecycle: the operator installed for one namespace
// (SingleNamespace: its own namespace apart from the one it manages), as
// its service account with exactly the Roles OLM makes from the bundle's
// permissions there and the bundle's cluster permissions, keeps a
// Database through its whole life on real pods: created, written, its
// primary's machine lost and a replica promoted, backed up, restored into
// a new Database, deleted. (Every other test here runs the operator with
// the bundle's RBAC for all namespaces.)
func TestSingleNamespaceLifecycle(t *testing.T) {
	ctx := context.Background()
	d := dialects[1] // MariaDB: its backups restore into a new Database here
	// The operator for all namespaces steps aside: two operators must not
	// manage one Database.
	op.kill()
	t.Cleanup(func() {
		if err := op.restart(); err != nil {
			t.Errorf("restarting the operator: %v", err)
		}
	})
	db := createDatabase(t, "single", d.engine, d.version, 2, func(db *dbv1.Database) {
		db.Spec.Failover.DelaySeconds = ptr.To[int32](1)
	})
	ns := db.Namespace
	own := ns + "-op"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}})
	})
	bundle, err := olmrbac.Load(olmrbac.CSVPath)
	if err != nil {
		t.Fatal(err)
	}
	user, err := bundle.Grant(ctx, k8s, own, []string{ns})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	single := newOperator(cfg, op.scheme, controller.Options{Values: controller.ValueOptions{OperatorImage: operatorImage, OperatorNamespace: own, NoNetworkPolicy: true}})
	single.namespaces = []string{ns}
	if err := single.start(ctx); err != nil {
		t.Fatal(err)
	}
	defer single.kill()

	t.Run("created and written", func(t *testing.T) {
		waitRunning(t, db, 2, 5*time.Minute)
	})
	user2, password, database := appCredentials(t, db)
	open := func(host string) *sql.DB { return d.open(t, host, user2, password, database) }
	rw := open(resolveOne(t, db.Name+"-rw", ns))
	if err := execTimeout(rw, "CREATE TABLE orders (id INT PRIMARY KEY, note TEXT)"); err != nil {
		t.Fatal(err)
	}
	insert(t, rw, 1, 20, "acknowledged")
	replica := open(podIP(t, ns, db.Name+"-1"))
	eventually(t, 30*time.Second, "the replica has every row", func() string { return d.state(replica, 20, true) })

	t.Run("failover", func(t *testing.T) {
		old := db.Name + "-0"
		if err := node.Down(ns, old); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = node.Up(ns, old) }()
		got := waitFailover(t, db, old, 2*time.Minute)
		insert(t, open(resolveOne(t, db.Name+"-rw", ns)), 21, 21, "after failover")
		if err := node.Up(ns, old); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, db, 2, 3*time.Minute)
		t.Logf("%s promoted; the former primary rejoined", got.Status.CurrentPrimary)
	})

	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "full"}, Spec: dbv1.BackupSpec{
		Database: dbv1.LocalObjectReference{Name: db.Name}, Target: &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{}}}}
	t.Run("backup", func(t *testing.T) {
		if err := k8s.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Minute, "the backup done", func() string {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return err.Error()
			}
			if b.Status.Phase != dbv1.BackupCompleted {
				return fmt.Sprintf("phase %q: %s", b.Status.Phase, b.Status.Message)
			}
			return ""
		})
	})

	restored := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "restored"},
		Spec: dbv1.DatabaseSpec{Engine: d.engine, Version: d.version, Replicas: 1,
			Storage: dbv1.StorageSpec{Size: resource.MustParse("1Gi")}, DeletionPolicy: dbv1.DeletionPolicyDelete,
			Bootstrap: &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: b.Name}}}}
	t.Run("restore", func(t *testing.T) {
		if err := k8s.Create(ctx, restored); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, restored, 1, 5*time.Minute)
		ruser, rpassword, rdatabase := appCredentials(t, restored)
		c := d.open(t, resolveOne(t, restored.Name+"-rw", ns), ruser, rpassword, rdatabase)
		eventually(t, 30*time.Second, "the restored rows", func() string { return d.state(c, 21, false) })
	})

	t.Run("deleted", func(t *testing.T) {
		for _, o := range []*dbv1.Database{restored, db} {
			if err := k8s.Delete(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range []*dbv1.Database{restored, db} {
			eventually(t, 2*time.Minute, o.Name+" gone", func() string {
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), &dbv1.Database{}); err == nil {
					return "still there"
				} else if client.IgnoreNotFound(err) != nil {
					return err.Error()
				}
				return ""
			})
		}
	})
}
