package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "example.com/database-operator/api/v1"
)

// setting reads one of the server's settings as the application sees it
// (a new session: a reload shows there).
func (d dialect) setting(c *sql.DB, name string) (string, error) {
	q := "SELECT current_setting('" + name + "')"
	if d.engine == dbv1.EngineMariaDB {
		q = "SELECT @@GLOBAL." + name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var v string
	err := c.QueryRowContext(ctx, q).Scan(&v)
	return v, err
}

// TestParameters: spec.parameters reach the servers. Set at creation,
// they are in the configuration the servers start with; a change a
// running server takes is applied to every instance with no restart (the
// pods stay the same pods); a change the server reads only at start rolls
// the instances, the primary moved away by a switchover first: no
// failover, every acknowledged write kept.
func TestParameters(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	cases := map[dbv1.Engine]struct {
		atCreation, reload, restart [3]string // name, value, as the server shows it
	}{
		dbv1.EnginePostgreSQL: {
			atCreation: [3]string{"work_mem", "8MB", "8MB"},
			reload:     [3]string{"log_min_duration_statement", "250", "250ms"},
			restart:    [3]string{"max_prepared_transactions", "5", "5"},
		},
		dbv1.EngineMariaDB: {
			atCreation: [3]string{"max-connections", "300", "300"},
			reload:     [3]string{"long_query_time", "2.5", "2.5"},
			restart:    [3]string{"innodb_autoinc_lock_mode", "2", "2"},
		},
	}
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			c := cases[d.engine]
			db, open := haDatabase(t, d, "params", 2, func(db *dbv1.Database) {
				db.Spec.Parameters = map[string]string{c.atCreation[0]: c.atCreation[1]}
			})
			ns := db.Namespace
			pods := []string{db.Name + "-0", db.Name + "-1"}
			uids := map[string]types.UID{}
			for _, pod := range pods {
				p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				uids[pod] = p.UID
			}
			shows := func(name, want string) func() string {
				return func() string {
					for _, pod := range pods {
						if msg := atPod(t, open, ns, pod, func(c *sql.DB) string {
							if v, err := d.setting(c, name); err != nil || v != want {
								return fmt.Sprintf("%s: %s = %q (%v), want %q", pod, name, v, err, want)
							}
							return ""
						}); msg != "" {
							return msg
						}
					}
					return ""
				}
			}
			engineName := map[dbv1.Engine]string{dbv1.EnginePostgreSQL: c.atCreation[0], dbv1.EngineMariaDB: "max_connections"}[d.engine]
			eventually(t, 30*time.Second, "the parameter set at creation on every server", shows(engineName, c.atCreation[2]))

			updateDatabase(t, db, func(db *dbv1.Database) { db.Spec.Parameters[c.reload[0]] = c.reload[1] })
			eventually(t, time.Minute, "the reloaded parameter on every server", shows(c.reload[0], c.reload[2]))
			waitEvent(t, ns, db.Name, "Normal ParametersApplied")
			for _, pod := range pods {
				p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
				if err != nil || p.UID != uids[pod] || p.Status.ContainerStatuses[0].RestartCount != 0 {
					t.Errorf("%s restarted for a parameter its server reloads (%v)", pod, err)
				}
			}

			writes := watchWrites(t, d, db, open, 0)
			updateDatabase(t, db, func(db *dbv1.Database) { db.Spec.Parameters[c.restart[0]] = c.restart[1] })
			eventually(t, 4*time.Minute, "the restart parameter on every server", shows(c.restart[0], c.restart[2]))
			waitRunning(t, db, 2, 3*time.Minute)
			time.Sleep(2 * time.Second) // writes through -rw on the primary that serves now
			got := k8sDatabase(t, db)
			res := writes.stop("")
			writes.lost(&res, open(podIP(t, ns, got.Status.CurrentPrimary)), "")
			if got.Status.LastFailover != nil {
				t.Errorf("a parameter change failed over: %+v", got.Status.LastFailover)
			}
			wantEvents(t, db, "RolloutSwitchover", "SwitchoverCompleted")
		})
	}
}
