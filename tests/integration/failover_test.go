package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresFailover: a three-instance PostgreSQL Database whose pods
// (simulated by kwok) map to real PostgreSQL servers. The primary's server
// is killed and its pod marked not ready; the operator promotes a replica,
// the read-write Service follows it, writes succeed there, every
// acknowledged row is present, and the other replica follows the new primary.
func TestPostgresFailover(t *testing.T) {
	ns, db, primary, replicas := postgresDatabase(t, "pg")
	for range 50 {
		if err := pgExec(t, primary, "INSERT INTO orders (note) VALUES ('acknowledged')"); err != nil {
			t.Fatal(err)
		}
	}

	// The primary is lost: its server dies and its pod turns unready.
	primary.Kill()
	setPodReady(t, ns, "pg-0", false)

	got := waitFailover(t, db, "pg-0")
	newName := got.Status.CurrentPrimary
	if got.Status.LastFailover.From != "pg-0" || got.Status.LastFailover.To != newName || got.Status.LastFailover.Reason == "" {
		t.Errorf("failover record %+v", got.Status.LastFailover)
	}
	newIdx := slices.Index([]string{"pg-1", "pg-2"}, newName)
	if newIdx < 0 {
		t.Fatalf("promoted %q", newName)
	}
	newPrimary, other := replicas[newIdx], replicas[1-newIdx]

	eventually(t, 30*time.Second, "pg-rw routes to the new primary", func() string {
		if eps := endpointPods(t, ns, "pg-rw"); !slices.Equal(eps, []string{newName}) {
			return fmt.Sprintf("pg-rw endpoints %v", eps)
		}
		return ""
	})
	if err := pgExec(t, newPrimary, "INSERT INTO orders (note) VALUES ('after failover')"); err != nil {
		t.Fatalf("write on the new primary: %v", err)
	}
	if n := pgCount(t, newPrimary); n != 51 {
		t.Errorf("new primary has %d rows, want 50 acknowledged + 1", n)
	}
	eventually(t, 30*time.Second, "the other replica follows the new primary", func() string {
		if n := pgCount(t, other); n != 51 {
			return fmt.Sprintf("%d rows on the other replica", n)
		}
		return ""
	})
	waitRunningAtLeast(t, db, 2)
}

func setPodReady(t testing.TB, ns, name string, ready bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			pod.Status.Conditions[i].Status = status
			pod.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = ready
	}
	if err := testEnv.client.Status().Patch(context.Background(), pod, patch); err != nil {
		t.Fatal(err)
	}
}

// waitRunningAtLeast waits until the Database serves writes again with at
// least n ready instances (a lost primary stays unready).
func waitRunningAtLeast(t testing.TB, db *dbv1.Database, n int32) {
	t.Helper()
	eventually(t, 30*time.Second, "serving again", func() string {
		got := &dbv1.Database{}
		if err := testEnv.client.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		if got.Status.ReadyReplicas < n || got.Status.CurrentPrimary == "" {
			return fmt.Sprintf("%d ready, primary %q, phase %s", got.Status.ReadyReplicas, got.Status.CurrentPrimary, got.Status.Phase)
		}
		return ""
	})
}

// TestMariaDBFailover: the same loss of the primary with real MariaDB
// servers in GTID replication: the furthest replica is promoted, the other
// follows it, no acknowledged row is lost.
func TestMariaDBFailover(t *testing.T) {
	ns, db, servers := mariaDBWithServers(t, "maria")
	mariaWrite(t, servers[0], 50, "acknowledged")
	waitReplicaRows(t, 50, servers[1:]...)

	servers[0].Kill()
	setPodReady(t, ns, "maria-0", false)
	got := waitFailover(t, db, "maria-0")
	idx := slices.Index([]string{"maria-1", "maria-2"}, got.Status.CurrentPrimary)
	if idx < 0 {
		t.Fatalf("promoted %q", got.Status.CurrentPrimary)
	}
	newPrimary, other := servers[1+idx], servers[2-idx]
	if err := mariaExec(t, newPrimary, "INSERT INTO shop.orders (note) VALUES ('after failover')"); err != nil {
		t.Fatalf("write on the new primary: %v", err)
	}
	eventually(t, 30*time.Second, "every row on the new primary and the other replica", func() string {
		if a, b := mariaCount(t, newPrimary), mariaCount(t, other); a != 51 || b != 51 {
			return fmt.Sprintf("new primary %d rows, other replica %d", a, b)
		}
		return ""
	})
	eventually(t, 30*time.Second, "maria-rw routes to the new primary", func() string {
		if eps := endpointPods(t, ns, "maria-rw"); !slices.Equal(eps, []string{got.Status.CurrentPrimary}) {
			return fmt.Sprintf("maria-rw endpoints %v", eps)
		}
		return ""
	})
}

// mariaDBWithServers starts three real MariaDB servers through the chart's
// start script (instance 0 initializes as primary, the others clone it and
// replicate), maps pods <name>-0..2 to them, and creates a Running
// three-instance Database over them with a one-second failover delay and a
// shop.orders table.
func mariaDBWithServers(t testing.TB, name string) (string, *dbv1.Database, []*testservers.MariaDB) {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	servers := testservers.StartMariaDBCluster(t, name, 3)
	for _, s := range servers {
		testEnv.servers.set(ns, s.Pod, s.Port)
	}
	createCredentials(t, ns, name, "root", testservers.MariaDBRootPassword)
	db := database(ns, name, dbv1.EngineMariaDB, 3, func(db *dbv1.Database) { db.Spec.Failover.DelaySeconds = ptr.To[int32](1) })
	if err := testEnv.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, db, 3)
	for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)"} {
		if err := mariaExec(t, servers[0], stmt); err != nil {
			t.Fatal(err)
		}
	}
	return ns, db, servers
}

// postgresDatabase starts a real PostgreSQL primary with two streaming
// replicas through the chart's start script, maps pods <name>-0..2 to
// them, and creates a Running three-instance Database over them (failover
// delay one second) with an orders table.
func postgresDatabase(t testing.TB, name string) (string, *dbv1.Database, *testservers.Postgres, []*testservers.Postgres) {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	servers := testservers.StartPostgresCluster(t, name, 3)
	for _, s := range servers {
		testEnv.servers.set(ns, s.Pod, s.Port)
	}
	// The credentials the servers use, as the Secret the operator adopts.
	createCredentials(t, ns, name, "postgres", servers[0].Password)
	db := database(ns, name, dbv1.EnginePostgreSQL, 3, func(db *dbv1.Database) { db.Spec.Failover.DelaySeconds = ptr.To[int32](1) })
	if err := testEnv.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, db, 3)
	if err := pgExec(t, servers[0], "CREATE TABLE orders (id serial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	return ns, db, servers[0], servers[1:]
}

// createCredentials creates the credentials Secret the test servers use,
// labelled so that the operator adopts it as the Database's own.
func createCredentials(t testing.TB, ns, name, user, password string) {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-credentials", Labels: map[string]string{
			"app.kubernetes.io/name": "database", "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "database-operator"}},
		StringData: map[string]string{"username": user, "password": password},
	}
	if err := testEnv.client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// TestFailoverLagBound: with spec.failover.maxLag, replicas that fell too
// far behind the primary's last seen position are not promoted: the
// Database stays without a primary, and says why, until the bound is
// raised; then the furthest replica is promoted.
func TestFailoverLagBound(t *testing.T) {
	ctx := context.Background()
	ns, db, servers := mariaDBWithServers(t, "lag")
	updateSpec(t, db, func(db *dbv1.Database) { db.Spec.Failover.MaxLag = ptr.To[int64](5) })
	mariaWrite(t, servers[0], 10, "replicated")
	waitReplicaRows(t, 10, servers[1:]...)
	// The replicas stop receiving; the primary takes 20 more transactions,
	// and the operator samples its position (every 5 s while it is healthy).
	for _, r := range servers[1:] {
		if err := r.RootExec(ctx, "STOP SLAVE IO_THREAD"); err != nil {
			t.Fatal(err)
		}
	}
	mariaWrite(t, servers[0], 20, "not replicated")
	time.Sleep(7 * time.Second)
	servers[0].Kill()
	setPodReady(t, ns, "lag-0", false)

	got := &dbv1.Database{}
	eventually(t, 30*time.Second, "failover refused: every replica beyond maxLag", func() string {
		if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, "Degraded")
		if c == nil || !strings.Contains(c.Message, "beyond spec.failover.maxLag 5") {
			return fmt.Sprintf("conditions %+v", got.Status.Conditions)
		}
		return ""
	})
	if got.Status.CurrentPrimary != "lag-0" || got.Status.LastFailover != nil {
		t.Fatalf("a lagging replica was promoted: primary %s, %+v", got.Status.CurrentPrimary, got.Status.LastFailover)
	}
	// While the failover is pending, the operator tells OLM not to upgrade it.
	busy := ns + "/lag: failover of lag-0"
	eventually(t, 10*time.Second, "Upgradeable=False naming the failover", func() string {
		if c := upgradeable(t); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, busy) {
			return fmt.Sprintf("Upgradeable %+v", c)
		}
		return ""
	})

	updateSpec(t, db, func(db *dbv1.Database) { db.Spec.Failover.MaxLag = ptr.To[int64](1000) })
	newName := waitFailover(t, db, "lag-0").Status.CurrentPrimary
	newPrimary := servers[slices.Index([]string{"lag-0", "lag-1", "lag-2"}, newName)]
	if n := mariaCount(t, newPrimary); n != 10 {
		t.Errorf("new primary has %d rows, want the 10 it received", n)
	}
	eventually(t, 10*time.Second, "Upgradeable no longer held by this failover", func() string {
		if c := upgradeable(t); c == nil || strings.Contains(c.Message, busy) {
			return fmt.Sprintf("Upgradeable %+v", c)
		}
		return ""
	})
}

// upgradeable is the Upgradeable condition the operator reports to OLM.
func upgradeable(t testing.TB) *metav1.Condition {
	t.Helper()
	oc := &apiv2.OperatorCondition{}
	if err := testEnv.client.Get(context.Background(), testEnv.operatorCondition, oc); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(oc.Spec.Conditions, apiv2.Upgradeable)
}
