package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
			repointed := func() int {
				return len(slices.DeleteFunc(eventsAbout(t, ns, db.Name), func(e string) bool { return !strings.HasPrefix(e, "Normal ReplicaRepointed") }))
			}
			repointedBefore := repointed()
			for _, stmt := range stop {
				if err := execTimeout(root, stmt); err != nil {
					t.Fatal(err)
				}
			}
			stopped := time.Now()
			// Out of -ro within its readiness bound (10 s without
			// replicating), unless the operator re-pointed it first (it
			// can, within a second, when the replica streams from nobody):
			// then it never served stale reads for long either.
			var repointedFirst bool
			eventually(t, time.Minute, repl+" out of -ro, or re-pointed first", func() string {
				if inRO(false)() == "" {
					return ""
				}
				if repointed() > repointedBefore {
					repointedFirst = true
					return ""
				}
				return repl + " still in -ro, not re-pointed"
			})
			if repointedFirst {
				t.Logf("%s re-pointed %s after its replication stopped, before its readiness took it out of -ro", repl, time.Since(stopped).Round(time.Second))
			} else {
				t.Logf("%s left -ro %s after its replication stopped", repl, time.Since(stopped).Round(time.Second))
			}
			waitEventWithin(t, ns, db.Name, "Normal ReplicaRepointed", 2*time.Minute)
			insert(t, primary, 11, 20, "after the replica was re-pointed")
			replica := open(podIP(t, ns, repl))
			eventually(t, time.Minute, "the re-pointed replica has every row", func() string { return d.state(replica, 20, true) })
			eventually(t, time.Minute, repl+" back in -ro", inRO(true))
			replicationHealthInStatus(t, d, db, repl)
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

// replicationHealthInStatus: a replica that receives but no longer applies
// (replay paused, the SQL thread stopped) keeps its pod ready and nothing
// heals it; the status must still say so: status.instances shows it
// Stopped with the reason, ReplicationHealthy is False naming it, and Ready
// no longer claims health. Resumed, all is healthy again.
func replicationHealthInStatus(t *testing.T, d dialect, db *dbv1.Database, repl string) {
	t.Helper()
	pause, resume := "STOP SLAVE SQL_THREAD", "START SLAVE SQL_THREAD"
	if d.engine == dbv1.EnginePostgreSQL {
		pause, resume = "SELECT pg_wal_replay_pause()", "SELECT pg_wal_replay_resume()"
	}
	health := func(want metav1.ConditionStatus, state dbv1.ReplicationState) func() string {
		return func() string {
			got := &dbv1.Database{}
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
				return err.Error()
			}
			c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionReplicationHealthy)
			if c == nil || c.Status != want {
				return fmt.Sprintf("ReplicationHealthy %+v", c)
			}
			for _, in := range got.Status.Instances {
				if in.Name == repl && in.Replication == state {
					if want == metav1.ConditionFalse {
						ready := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionReady)
						if !strings.Contains(c.Message, repl) || in.LastError == "" || ready == nil || ready.Status != metav1.ConditionFalse || got.Status.Phase != dbv1.PhaseDegraded {
							return fmt.Sprintf("ReplicationHealthy %q, %s's last error %q, Ready %+v, phase %s: want the replica named, its error, Ready False, Degraded",
								c.Message, repl, in.LastError, ready, got.Status.Phase)
						}
						t.Logf("ReplicationHealthy: %s; Ready: %s", c.Message, ready.Message)
					}
					return ""
				}
			}
			return fmt.Sprintf("instances %+v: want %s %s", got.Status.Instances, repl, state)
		}
	}
	eventually(t, time.Minute, "replication healthy in status", health(metav1.ConditionTrue, dbv1.ReplicationStreaming))
	root := d.superuser(t, db, podIP(t, db.Namespace, repl))
	if err := execTimeout(root, pause); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	eventually(t, 90*time.Second, repl+" Stopped in status", health(metav1.ConditionFalse, dbv1.ReplicationStopped))
	t.Logf("the status said %s stopped applying %s after it did", repl, time.Since(paused).Round(time.Second))
	if err := execTimeout(root, resume); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "replication healthy again", health(metav1.ConditionTrue, dbv1.ReplicationStreaming))
}
