package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/testservers"
)

// TestMariaDBSwitchover: with a writer running against whichever instance
// status names primary, the user moves the primary to maria-2. Every write
// the writer saw acknowledged is on the new primary, writes resume there,
// and the old primary follows it.
func TestMariaDBSwitchover(t *testing.T) {
	_, db, servers := mariaDBWithServers(t, "maria")
	byPod := map[string]*testservers.MariaDB{}
	for _, s := range servers {
		byPod[s.Pod] = s
	}
	switchoverUnderWrites(t, db, "maria-2", func(pod, note string) error {
		return mariaExec(t, byPod[pod], "INSERT INTO shop.orders (note) VALUES ('"+note+"')")
	}, func(pod string) map[string]bool { return mariaNotes(t, byPod[pod]) })
	eventually(t, 30*time.Second, "the old primary follows the new one", func() string {
		if a, b := mariaCount(t, servers[0]), mariaCount(t, servers[2]); a != b {
			return fmt.Sprintf("old primary %d rows, new primary %d", a, b)
		}
		return ""
	})
}

// TestPostgresSwitchover: the same planned move on PostgreSQL. The old
// primary cannot follow without a restart: the operator restarts its pod
// and the start script rewinds it into a standby of the new primary.
func TestPostgresSwitchover(t *testing.T) {
	ns, db, primary, replicas := postgresDatabase(t, "pgsw")
	byPod := map[string]*testservers.Postgres{primary.Pod: primary}
	for _, s := range replicas {
		byPod[s.Pod] = s
	}
	uid := podUID(t, ns, "pgsw-0")
	switchoverUnderWrites(t, db, "pgsw-2", func(pod, note string) error {
		return pgExec(t, byPod[pod], "INSERT INTO orders (note) VALUES ('"+note+"')")
	}, func(pod string) map[string]bool { return pgNotes(t, byPod[pod]) })

	waitPodReplaced(t, ns, "pgsw-0", uid)
	primary.Stop()
	syncTopology(t, ns, "pgsw", primary.Topology())
	primary.Restart(t)
	eventually(t, 30*time.Second, "the old primary streams from the new one", func() string {
		if a, b := pgCount(t, primary), pgCount(t, byPod["pgsw-2"]); a != b {
			return fmt.Sprintf("old primary %d rows, new primary %d", a, b)
		}
		if got := podRole(t, ns, "pgsw-0"); got != "replica" {
			return "pgsw-0 labelled " + got
		}
		return ""
	})
}

// switchoverUnderWrites runs a writer against whichever instance status
// names primary, moves the primary to target through spec.primary, and
// checks that every write the writer saw acknowledged is on the target and
// that writes resumed there.
func switchoverUnderWrites(t *testing.T, db *dbv1.Database, target string, write func(pod, note string) error, notesOf func(pod string) map[string]bool) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var acked []string
	afterSwitch := 0
	var asked, firstOnTarget time.Time
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			got := &dbv1.Database{}
			if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
				continue
			}
			note := fmt.Sprintf("w-%d", i)
			if err := write(got.Status.CurrentPrimary, note); err == nil {
				mu.Lock()
				acked = append(acked, note)
				if got.Status.CurrentPrimary == target {
					if afterSwitch == 0 {
						firstOnTarget = time.Now()
					}
					afterSwitch++
				}
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	asked = time.Now()
	mu.Unlock()
	updateSpec(t, db, func(db *dbv1.Database) { db.Spec.Primary = target })
	eventually(t, 60*time.Second, target+" primary, with writes acknowledged there", func() string {
		got := &dbv1.Database{}
		if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		if got.Status.CurrentPrimary != target || afterSwitch < 10 {
			return fmt.Sprintf("primary %s, %d writes on it", got.Status.CurrentPrimary, afterSwitch)
		}
		return ""
	})
	close(stop)
	<-done

	notes := notesOf(target)
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for _, n := range acked {
		if !notes[n] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes are missing on the new primary", lost, len(acked))
	}
	t.Logf("%d writes acknowledged, %d of them on %s, none lost; %s from the spec change to the first write on %s",
		len(acked), afterSwitch, target, firstOnTarget.Sub(asked).Round(time.Millisecond), target)
}

func mariaNotes(t testing.TB, m *testservers.MariaDB) map[string]bool {
	t.Helper()
	sqlDB, err := m.DB(context.Background(), "app", testservers.MariaDBAppPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	rows, err := sqlDB.Query("SELECT note FROM shop.orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[n] = true
	}
	return out
}

func pgNotes(t testing.TB, p *testservers.Postgres) map[string]bool {
	t.Helper()
	ctx := context.Background()
	c, err := p.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT note FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[n] = true
	}
	return out
}
