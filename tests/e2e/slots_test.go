package e2e

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// slotState is a replication slot's "active|wal_status" on the primary
// ("" when there is no such slot).
func slotState(t testing.TB, root *sql.DB, slot string) string {
	t.Helper()
	var active bool
	var status string
	err := root.QueryRow("SELECT active, wal_status FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%t|%s", active, status)
}

// TestLostSlotRebuildsReplica: a PostgreSQL replica is down while its
// primary writes more WAL than the replica's slot may keep (a quarter of
// the volume: 256 MB here). The primary does not keep WAL for it beyond
// that bound (a dead replica cannot fill the disk): the slot is lost. The
// operator sees it, says so, and has the replica rebuilt (its old data
// set aside); once back it streams through a new slot and holds every row.
func TestLostSlotRebuildsReplica(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	d := dialects[0]
	if d.engine != dbv1.EnginePostgreSQL {
		t.Fatal("dialects[0] is not PostgreSQL")
	}
	db, open, primary, _ := replicatedPair(t, d, "slots")
	ns := db.Namespace
	prim, repl := db.Name+"-0", db.Name+"-1"
	slot := strings.ReplaceAll(repl, "-", "_")
	root := d.superuser(t, db, podIP(t, ns, prim))
	eventually(t, time.Minute, "the replica streaming through its slot", func() string {
		if got := slotState(t, root, slot); got != "true|reserved" {
			return fmt.Sprintf("slot %s: %q", slot, got)
		}
		return ""
	})
	if err := node.Down(ns, repl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Up(ns, repl) })
	insert(t, primary, 11, 20, "while the replica is down")
	// 40 WAL segments of 16 MB: past max_slot_wal_keep_size and wal_keep_size.
	for range 40 {
		for _, stmt := range []string{"CREATE TABLE IF NOT EXISTS filler (n int)", "INSERT INTO filler VALUES (1)", "SELECT pg_switch_wal()"} {
			if err := execTimeout(root, stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := execTimeout(root, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the slot lost", func() string {
		got := slotState(t, root, slot)
		if !strings.HasSuffix(got, "|lost") && got != "" { // "": already dropped by the operator
			return fmt.Sprintf("slot %s: %q", slot, got)
		}
		return ""
	})
	waitEventWithin(t, ns, db.Name, "Warning ReplicaCannotCatchUp", 2*time.Minute)

	// The machine comes back; the operator may already have restarted the
	// pod for its rebuild (a new pod, which was never down): no error then.
	_ = node.Up(ns, repl)
	waitRunning(t, db, 2, 3*time.Minute)
	replica := open(podIP(t, ns, repl))
	eventually(t, time.Minute, "the rebuilt replica has every row", func() string { return d.state(replica, 20, true) })
	eventually(t, time.Minute, "the rebuilt replica streaming through a new slot", func() string {
		if got := slotState(t, root, slot); got != "true|reserved" {
			return fmt.Sprintf("slot %s: %q", slot, got)
		}
		return ""
	})
	if aside, _ := filepath.Glob(filepath.Join(claimDir(t, ns, "data-"+repl), "*rebuild*")); len(aside) == 0 {
		t.Errorf("the replica's old data was not set aside on its volume")
	}
}
