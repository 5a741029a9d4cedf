package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// superuserSQL runs statements as PostgreSQL's superuser inside a pod
// (local connections are trusted) and returns the output.
func superuserSQL(t testing.TB, ns, pod string, stmts ...string) string {
	t.Helper()
	return dialects[0].superuserSQL(t, ns, pod, stmts...)
}

// superuserSQL runs statements as the engine's superuser inside a pod and
// returns the output.
func (d dialect) superuserSQL(t testing.TB, ns, pod string, stmts ...string) string {
	t.Helper()
	args := `psql -U "$POSTGRES_USER" -d postgres -qAt`
	if d.engine != dbv1.EnginePostgreSQL {
		args = `MYSQL_PWD="$ROOT_PASSWORD" mariadb -uroot -h127.0.0.1 -N -B`
	}
	for _, s := range stmts {
		if d.engine == dbv1.EnginePostgreSQL {
			args += fmt.Sprintf(" -c %q", s)
		} else {
			args += fmt.Sprintf(" -e %q", s)
		}
	}
	out, err := node.Exec(ns, pod, "database", []string{"sh", "-c", args})
	if err != nil {
		t.Fatalf("%s in %s: %v: %s", stmts, pod, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestLostSlotRebuildsReplica: a PostgreSQL replica is down while its
// primary writes more WAL than the replica's slot may keep (a quarter of
// the volume: 256 MB here). The primary does not keep WAL for it beyond
// that bound (a dead replica cannot fill the disk): the slot is lost. The
// operator sees it, says so, and has the replica rebuilt (its old data
// set aside); once back it streams through a new slot and holds every row.
func TestLostSlotRebuildsReplica(t *testing.T) {
	d := dialects[0]
	if d.engine != dbv1.EnginePostgreSQL {
		t.Fatal("dialects[0] is not PostgreSQL")
	}
	db, open, primary, _ := replicatedPair(t, d, "slots")
	ns := db.Namespace
	prim, repl := db.Name+"-0", db.Name+"-1"
	slot := strings.ReplaceAll(repl, "-", "_")
	eventually(t, time.Minute, "the replica streaming through its slot", func() string {
		got := superuserSQL(t, ns, prim, fmt.Sprintf("SELECT active, wal_status FROM pg_replication_slots WHERE slot_name = '%s'", slot))
		if got != "t|reserved" {
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
		superuserSQL(t, ns, prim, "CREATE TABLE IF NOT EXISTS filler (n int)", "INSERT INTO filler VALUES (1)", "SELECT pg_switch_wal()")
	}
	superuserSQL(t, ns, prim, "CHECKPOINT")
	eventually(t, 30*time.Second, "the slot lost", func() string {
		got := superuserSQL(t, ns, prim, fmt.Sprintf("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '%s'", slot))
		if got != "lost" && got != "" { // "": already dropped by the operator
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
		got := superuserSQL(t, ns, prim, fmt.Sprintf("SELECT active, wal_status FROM pg_replication_slots WHERE slot_name = '%s'", slot))
		if got != "t|reserved" {
			return fmt.Sprintf("slot %s: %q", slot, got)
		}
		return ""
	})
	if aside, _ := filepath.Glob(filepath.Join(claimDir(t, ns, "data-"+repl), "*rebuild*")); len(aside) == 0 {
		t.Errorf("the replica's old data was not set aside on its volume")
	}
}
