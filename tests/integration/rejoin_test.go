package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresFormerPrimaryRejoins: after a failover the old primary comes
// back as it was (a node back from a partition: writable, its topology
// stale). The operator fences it at once, so it takes no application
// write, and restarts its pod; the new pod's start script, reading the
// operator's topology, rewinds it (pg_rewind) and it streams from the new
// primary as a replica.
func TestPostgresFormerPrimaryRejoins(t *testing.T) {
	ns, db, old, replicas := postgresDatabase(t, "pgre")
	for range 20 {
		if err := pgExec(t, old, "INSERT INTO orders (note) VALUES ('acknowledged')"); err != nil {
			t.Fatal(err)
		}
	}
	old.Kill()
	setPodReady(t, ns, "pgre-0", false)
	newName := waitFailover(t, db, "pgre-0").Status.CurrentPrimary
	newPrimary := replicas[slices.Index([]string{"pgre-1", "pgre-2"}, newName)]
	if err := pgExec(t, newPrimary, "INSERT INTO orders (note) VALUES ('after failover')"); err != nil {
		t.Fatal(err)
	}

	old.Restart(t) // stale topology: it starts as a primary
	uid := podUID(t, ns, "pgre-0")
	setPodReady(t, ns, "pgre-0", true)
	waitPodReplaced(t, ns, "pgre-0", uid)
	if err := pgExec(t, old, "INSERT INTO orders (note) VALUES ('split brain')"); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a write on the returning old primary: %v, want it refused (fenced)", err)
	}
	// The kubelet's part: the old container stops, the new one starts with
	// the topology ConfigMap mounted.
	old.Kill()
	syncTopology(t, ns, "pgre", old.Topology())
	old.Restart(t)
	if !strings.Contains(old.Log(), "rewinding onto "+newName) {
		t.Errorf("the start script did not rewind onto %s:\n%s", newName, old.Log())
	}

	eventually(t, 60*time.Second, "pgre-0 back as a replica with every row", func() string {
		if n := pgCount(t, old); n != 21 {
			return fmt.Sprintf("%d rows on the former primary", n)
		}
		if got := podRole(t, ns, "pgre-0"); got != "replica" {
			return "pgre-0 labelled " + got
		}
		return ""
	})
	if err := pgExec(t, newPrimary, "INSERT INTO orders (note) VALUES ('streams')"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pgre-0 streams from the new primary", func() string {
		if n := pgCount(t, old); n != 22 {
			return fmt.Sprintf("%d rows on the former primary", n)
		}
		return ""
	})
	wantEvents(t, db, "FormerPrimaryFenced", "InstanceRestarted")
}

// TestMariaDBDivergedFormerPrimaryRebuilt: the primary takes a write its
// replicas never receive, then dies; a replica is promoted and takes writes.
// The old primary comes back holding that errant transaction. The operator
// fences it, explains the divergence in an Event and asks for a rebuild:
// the new pod's start script sets the old data aside on the volume and
// clones the new primary; the errant row is gone from the served data.
func TestMariaDBDivergedFormerPrimaryRebuilt(t *testing.T) {
	ctx := context.Background()
	ns, db, servers := mariaDBWithServers(t, "mdiv")
	mariaWrite(t, servers[0], 10, "acknowledged")
	waitReplicaRows(t, 10, servers[1:]...)
	for _, r := range servers[1:] {
		if err := r.RootExec(ctx, "STOP SLAVE IO_THREAD"); err != nil {
			t.Fatal(err)
		}
	}
	if err := mariaExec(t, servers[0], "INSERT INTO shop.orders (note) VALUES ('errant')"); err != nil {
		t.Fatal(err)
	}
	servers[0].Kill()
	for _, r := range servers[1:] {
		if err := r.RootExec(ctx, "START SLAVE IO_THREAD"); err != nil {
			t.Fatal(err)
		}
	}
	setPodReady(t, ns, "mdiv-0", false)
	newName := waitFailover(t, db, "mdiv-0").Status.CurrentPrimary
	newPrimary := servers[slices.Index([]string{"mdiv-0", "mdiv-1", "mdiv-2"}, newName)]
	if err := mariaExec(t, newPrimary, "INSERT INTO shop.orders (note) VALUES ('after failover')"); err != nil {
		t.Fatal(err)
	}

	old := servers[0]
	old.Restart(t) // stale topology: it starts writable, holding the errant row
	uid := podUID(t, ns, "mdiv-0")
	setPodReady(t, ns, "mdiv-0", true)
	waitPodReplaced(t, ns, "mdiv-0", uid)
	old.Kill()
	syncTopology(t, ns, "mdiv", old.Topology())
	old.Restart(t)
	if aside, _ := filepath.Glob(old.Data() + ".rebuild-*"); len(aside) != 1 {
		t.Errorf("diverged data set aside: %v, want one directory\n%s", aside, old.Log())
	}
	eventually(t, 60*time.Second, "mdiv-0 rebuilt as a replica of "+newName, func() string {
		notes := mariaNotes(t, old)
		if len(notes) != 2 || !notes["after failover"] || notes["errant"] {
			return fmt.Sprintf("notes on the rebuilt instance: %v", notes)
		}
		if got := podRole(t, ns, "mdiv-0"); got != "replica" {
			return "mdiv-0 labelled " + got
		}
		return ""
	})
	if n := mariaCount(t, old); n != 11 {
		t.Errorf("rebuilt instance has %d rows, want 11 (10 acknowledged + 1 after the failover)", n)
	}
	wantEvents(t, db, "FormerPrimaryFenced", "InstanceDiverged", "InstanceRestarted")
}

// waitFailover waits until a replica has replaced from as the primary and
// returns the Database as it then stands.
func waitFailover(t testing.TB, db *dbv1.Database, from string) *dbv1.Database {
	t.Helper()
	got := &dbv1.Database{}
	eventually(t, 60*time.Second, "a replica promoted", func() string {
		if err := testEnv.client.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		if got.Status.LastFailover == nil || got.Status.CurrentPrimary == from {
			return fmt.Sprintf("primary %s, last failover %+v, conditions %+v", got.Status.CurrentPrimary, got.Status.LastFailover, got.Status.Conditions)
		}
		return ""
	})
	return got
}

func podUID(t testing.TB, ns, name string) types.UID {
	t.Helper()
	pod := &corev1.Pod{}
	if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return pod.UID
}

func podRole(t testing.TB, ns, name string) string {
	t.Helper()
	pod := &corev1.Pod{}
	if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		return err.Error()
	}
	return pod.Labels["database.example.com/role"]
}

// waitPodReplaced waits until the operator has restarted the pod: the
// StatefulSet has recreated it under a new UID.
func waitPodReplaced(t testing.TB, ns, name string, uid types.UID) {
	t.Helper()
	eventually(t, 60*time.Second, name+" restarted by the operator", func() string {
		pod := &corev1.Pod{}
		if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
			return err.Error()
		}
		if pod.UID == uid {
			return "same pod"
		}
		return ""
	})
}

// syncTopology copies the operator's topology ConfigMap into the directory
// a test server's start script reads, as a ConfigMap volume would.
func syncTopology(t testing.TB, ns, name string, topo *testservers.Topology) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := testEnv.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-topology"}, cm); err != nil {
		t.Fatal(err)
	}
	topo.Write(t, cm.Data)
}

// wantEvents fails unless the Database has Events with each reason.
func wantEvents(t testing.TB, db *dbv1.Database, reasons ...string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("Events %v", reasons), func() string {
		list := &eventsv1.EventList{}
		if err := testEnv.client.List(context.Background(), list, client.InNamespace(db.Namespace)); err != nil {
			return err.Error()
		}
		seen := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Name == db.Name {
				seen[e.Reason] = true
			}
		}
		for _, r := range reasons {
			if !seen[r] {
				return fmt.Sprintf("no %s Event (have %v)", r, seen)
			}
		}
		return ""
	})
}
