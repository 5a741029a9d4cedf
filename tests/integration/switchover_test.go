package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/testservers"
)

// TestMariaDBSwitchover: with a writer running against whichever instance
// status names primary, the user moves the primary to maria-2. Every write
// the writer saw acknowledged is on the new primary, writes resume there,
// and the old primary follows it.
func TestMariaDBSwitchover(t *testing.T) {
	ctx := context.Background()
	_, db, servers := mariaDBWithServers(t, "maria")
	byPod := map[string]*testservers.MariaDB{"maria-0": servers[0], "maria-1": servers[1], "maria-2": servers[2]}

	var mu sync.Mutex
	var acked []string
	afterSwitch := 0
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
			if err := mariaExec(t, byPod[got.Status.CurrentPrimary], "INSERT INTO shop.orders (note) VALUES ('"+note+"')"); err == nil {
				mu.Lock()
				acked = append(acked, note)
				if got.Status.CurrentPrimary == "maria-2" {
					afterSwitch++
				}
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	time.Sleep(500 * time.Millisecond)
	updateSpec(t, db, func(db *dbv1.Database) { db.Spec.Primary = "maria-2" })
	eventually(t, 60*time.Second, "maria-2 primary, with writes acknowledged there", func() string {
		got := &dbv1.Database{}
		if err := testEnv.client.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		if got.Status.CurrentPrimary != "maria-2" || afterSwitch < 10 {
			return fmt.Sprintf("primary %s, %d writes on it", got.Status.CurrentPrimary, afterSwitch)
		}
		return ""
	})
	close(stop)
	<-done

	notes := mariaNotes(t, servers[2])
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
	eventually(t, 30*time.Second, "the old primary follows the new one", func() string {
		if a, b := mariaCount(t, servers[0]), mariaCount(t, servers[2]); a != b {
			return fmt.Sprintf("old primary %d rows, new primary %d", a, b)
		}
		return ""
	})

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
