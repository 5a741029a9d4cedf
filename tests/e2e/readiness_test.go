package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
)

// TestStoppedReplicaLeavesReadOnly: a replica whose replication is stopped
// (by hand, as a broken stream would) serves stale reads; its agent's
// readiness takes it out of the -ro Service once it has not replicated
// for 10 s, and the operator, seeing an unready replica that does not
// stream, re-points it; it then holds the primary's new rows and is back
// in -ro.
func TestStoppedReplicaLeavesReadOnly(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open, primary, _ := replicatedPair(t, d, "stale")
			ns, repl := db.Namespace, db.Name+"-1"
			inRO := func(want bool) func() string {
				return func() string {
					if got := slices.Contains(endpointPods(t, ns, db.Name+"-ro"), repl); got != want {
						return fmt.Sprintf("%s in -ro: %v", repl, got)
					}
					return ""
				}
			}
			eventually(t, time.Minute, repl+" in -ro", inRO(true))
			monitoringSeesReplication(t, d, db)
			stop := map[dbv1.Engine][]string{
				dbv1.EnginePostgreSQL: {"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"},
				dbv1.EngineMariaDB:    {"STOP SLAVE"},
			}[d.engine]
			root := d.superuser(t, db, podIP(t, ns, repl))
			for _, stmt := range stop {
				if err := execTimeout(root, stmt); err != nil {
					t.Fatal(err)
				}
			}
			stopped := time.Now()
			eventually(t, time.Minute, repl+" out of -ro", inRO(false))
			t.Logf("%s left -ro %s after its replication stopped", repl, time.Since(stopped).Round(time.Second))
			waitEventWithin(t, ns, db.Name, "Normal ReplicaRepointed", 2*time.Minute)
			insert(t, primary, 11, 20, "after the replica was re-pointed")
			replica := open(podIP(t, ns, repl))
			eventually(t, time.Minute, "the re-pointed replica has every row", func() string { return d.state(replica, 20, true) })
			eventually(t, time.Minute, repl+" back in -ro", inRO(true))
		})
	}
}

// monitoringSeesReplication: the monitoring account (Secret
// <name>-monitoring) logs in to the primary and sees its replica stream,
// which takes the monitoring rights (another account's replication
// connection is hidden without them).
func monitoringSeesReplication(t *testing.T, d dialect, db *dbv1.Database) {
	t.Helper()
	mon := accountSecret(t, db, "monitoring")
	database, query := "", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'"
	if d.engine == dbv1.EnginePostgreSQL {
		database, query = "postgres", "SELECT count(*) FROM pg_stat_replication WHERE client_addr IS NOT NULL"
	}
	c := d.open(t, podIP(t, db.Namespace, db.Name+"-0"), mon["username"], mon["password"], database)
	eventually(t, 30*time.Second, "the monitoring account sees the replica stream", func() string {
		var n int
		if err := c.QueryRow(query).Scan(&n); err != nil || n != 1 {
			return fmt.Sprintf("%d streams seen (%v)", n, err)
		}
		return ""
	})
}
