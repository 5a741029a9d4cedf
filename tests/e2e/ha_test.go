package e2e

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// The high-availability tests: failover, rejoin, divergence and switchover
// on real servers started from the chart's pods. Faults are the node's
// (tests/utils/processnode: Down, SIGSTOP through exec), clients reach the
// servers through the Services' DNS names or the pods' addresses, and
// nothing tells the operator what happened: it finds out as it would in a
// cluster.

// dialect is what the tests run on one engine, through database/sql. The
// tests write as an application does: with the application account of
// <name>-app, to the orders table of its database.
type dialect struct {
	engine  dbv1.Engine
	version string
	port    int
	// readOnly answers 1 when the server refuses writes.
	readOnly string
}

var dialects = []dialect{
	{dbv1.EnginePostgreSQL, "15", 5432,
		"SELECT CASE WHEN pg_is_in_recovery() OR current_setting('default_transaction_read_only') = 'on' THEN 1 ELSE 0 END"},
	{dbv1.EngineMariaDB, "10.11", 3306, "SELECT @@read_only"},
}

func (d dialect) name() string { return string(d.engine) }

// open is a pool of at most one connection to host as user, to database,
// with short timeouts: a test must see a server that stopped answering,
// not wait on it.
func (d dialect) open(t testing.TB, host, user, password, database string) *sql.DB {
	t.Helper()
	var c *sql.DB
	if d.engine == dbv1.EnginePostgreSQL {
		cfg, err := pgx.ParseConfig("")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = host, uint16(d.port), user, password, database
		cfg.ConnectTimeout = 3 * time.Second
		cfg.TLSConfig, cfg.Fallbacks = pgTLS(), nil
		c = stdlib.OpenDB(*cfg)
		t.Cleanup(func() { _ = c.Close() })
	} else {
		cfg := mariaDBConfig(host, user, password)
		cfg.DBName = database
		cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 3*time.Second, 5*time.Second, 5*time.Second
		c = openMariaDB(t, cfg)
	}
	c.SetMaxOpenConns(1)
	return c
}

// superuser is a client for host as the operator's superuser, for what
// only it may do (stop a replica's replication).
func (d dialect) superuser(t testing.TB, db *dbv1.Database, host string) *sql.DB {
	t.Helper()
	user, password := credentials(t, db)
	return d.open(t, host, user, password, "")
}

// replicatingAs says how primary's replicas stream ("" when every one of
// the want of them streams as the replication account, never as the
// superuser): PostgreSQL asked on the primary, MySQL and MariaDB on each
// replica.
func (d dialect) replicatingAs(t testing.TB, db *dbv1.Database, primary string, want int) string {
	t.Helper()
	ns := db.Namespace
	if d.engine == dbv1.EnginePostgreSQL {
		c := d.superuser(t, db, podIP(t, ns, primary))
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var users []string
		rows, err := c.QueryContext(ctx, "SELECT usename FROM pg_stat_replication WHERE state = 'streaming' ORDER BY usename")
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		for rows.Next() {
			var u string
			if err := rows.Scan(&u); err != nil {
				return err.Error()
			}
			users = append(users, u)
		}
		if len(users) != want || slices.ContainsFunc(users, func(u string) bool { return u != engine.ReplicationUser }) {
			return fmt.Sprintf("replicas stream as %v, want %d as %s", users, want, engine.ReplicationUser)
		}
		return ""
	}
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + db.Name})
	if err != nil {
		return err.Error()
	}
	var users []string
	for _, p := range pods.Items {
		if p.Name == primary || p.Status.PodIP == "" {
			continue
		}
		c := d.superuser(t, db, p.Status.PodIP)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		u, err := testservers.MasterUser(ctx, c)
		cancel()
		c.Close()
		if err != nil {
			return p.Name + ": " + err.Error()
		}
		users = append(users, u)
	}
	if len(users) != want || slices.ContainsFunc(users, func(u string) bool { return u != engine.ReplicationUser }) {
		return fmt.Sprintf("replicas replicate as %v, want %d as %s", users, want, engine.ReplicationUser)
	}
	return ""
}

// appCredentials waits for the application account (its Secret, and the
// operator's record that the account is set on the primary).
func appCredentials(t testing.TB, db *dbv1.Database) (user, password, database string) {
	t.Helper()
	data := accountSecret(t, db, "app")
	return data["username"], data["password"], data["database"]
}

// accountSecret waits until the operator has set the account of Secret
// <name>-<suffix> on the server and returns the Secret's data.
func accountSecret(t testing.TB, db *dbv1.Database, suffix string) map[string]string {
	t.Helper()
	data := map[string]string{}
	eventually(t, time.Minute, "the "+suffix+" account set", func() string {
		s, err := cs.CoreV1().Secrets(db.Namespace).Get(context.Background(), db.Name+"-"+suffix, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if s.Annotations["database.example.com/applied-password-sha256"] == "" {
			return "not set on the server yet"
		}
		for k, v := range s.Data {
			data[k] = string(v)
		}
		return ""
	})
	return data
}

// haDatabase creates a Running Database of n instances with a one-second
// failover delay and the orders table, and returns it with a client, as
// the application account, for a pod's (or Service's) address.
func haDatabase(t testing.TB, d dialect, name string, n int32, mutate ...func(*dbv1.Database)) (*dbv1.Database, func(host string) *sql.DB) {
	t.Helper()
	db := createDatabase(t, name, d.engine, d.version, n, append([]func(*dbv1.Database){func(db *dbv1.Database) {
		db.Spec.Failover.DelaySeconds = ptr.To[int32](1)
	}}, mutate...)...)
	waitRunning(t, db, n, 5*time.Minute)
	user, password, database := appCredentials(t, db)
	open := func(host string) *sql.DB { return d.open(t, host, user, password, database) }
	rw := open(resolveOne(t, db.Name+"-rw", db.Namespace))
	if err := execTimeout(rw, "CREATE TABLE orders (id INT PRIMARY KEY, note TEXT)"); err != nil {
		t.Fatalf("creating the table as the application: %v", err)
	}
	return db, open
}

// replicatedPair is a two-instance haDatabase whose primary (<name>-0) took
// 10 "acknowledged" rows that its replica (<name>-1) has, with clients of
// both as the application.
func replicatedPair(t testing.TB, d dialect, name string) (db *dbv1.Database, open func(string) *sql.DB, primary, replica *sql.DB) {
	t.Helper()
	db, open = haDatabase(t, d, name, 2)
	primary, replica = open(podIP(t, db.Namespace, db.Name+"-0")), open(podIP(t, db.Namespace, db.Name+"-1"))
	insert(t, primary, 1, 10, "acknowledged")
	eventually(t, 30*time.Second, "the replica has every row", func() string { return d.state(replica, 10, true) })
	return db, open, primary, replica
}

func execTimeout(c *sql.DB, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.ExecContext(ctx, stmt)
	return err
}

// insert writes rows ids from..to, each acknowledged before the next.
func insert(t testing.TB, c *sql.DB, from, to int, note string) {
	t.Helper()
	for id := from; id <= to; id++ {
		if err := execTimeout(c, fmt.Sprintf("INSERT INTO orders VALUES (%d, '%s')", id, note)); err != nil {
			t.Fatalf("writing row %d: %v", id, err)
		}
	}
}

// notes is the set of notes of the rows a server holds.
func notes(c *sql.DB) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.QueryContext(ctx, "SELECT note FROM orders")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n]++
	}
	return out, rows.Err()
}

// state is what a server holds and whether it refuses writes, for
// eventually: "" when it has rows rows and readOnly.
func (d dialect) state(c *sql.DB, rows int, readOnly bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n, ro int
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		return err.Error()
	}
	if err := c.QueryRowContext(ctx, d.readOnly).Scan(&ro); err != nil {
		return err.Error()
	}
	if n != rows || (ro == 1) != readOnly {
		return fmt.Sprintf("%d rows (want %d), read-only %v (want %v)", n, rows, ro == 1, readOnly)
	}
	return ""
}

func podIP(t testing.TB, ns, name string) string {
	t.Helper()
	var ip string
	eventually(t, 2*time.Minute, name+"'s address", func() string {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		ip = p.Status.PodIP
		if ip == "" {
			return "no address yet"
		}
		return ""
	})
	return ip
}

// atPod runs check on pod's server, reached at the pod's address of the
// moment over a connection of its own. The operator may restart a pod
// (rewind, rebuild) after the test saw the Database Running, and the
// restarted pod has another address: a connection opened before would
// keep dialling the old one.
func atPod(t testing.TB, open func(string) *sql.DB, ns, pod string, check func(*sql.DB) string) string {
	t.Helper()
	c := open(podIP(t, ns, pod))
	defer c.Close()
	return check(c)
}

func podRole(ns, name string) string {
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return p.Labels["database.example.com/role"]
}

// endpointPods are the pods a Service routes to (its ready endpoints).
func endpointPods(t testing.TB, ns, svc string) []string {
	t.Helper()
	list, err := cs.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.Conditions.Ready != nil && *e.Conditions.Ready {
				pods = append(pods, e.TargetRef.Name)
			}
		}
	}
	slices.Sort(pods)
	return pods
}

// waitFailover waits until a replica has replaced from as the primary.
func waitFailover(t testing.TB, db *dbv1.Database, from string, timeout time.Duration) *dbv1.Database {
	t.Helper()
	got := &dbv1.Database{}
	eventually(t, timeout, "a replica promoted", func() string {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		if got.Status.LastFailover == nil || got.Status.CurrentPrimary == from || got.Status.CurrentPrimary == "" {
			return fmt.Sprintf("primary %q, last failover %+v, conditions %+v", got.Status.CurrentPrimary, got.Status.LastFailover, got.Status.Conditions)
		}
		return ""
	})
	return got
}

// wantEvents fails unless the Database has Events with each reason.
func wantEvents(t testing.TB, db *dbv1.Database, reasons ...string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("Events %v", reasons), func() string {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(db.Namespace)); err != nil {
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

// TestFailover: a three-instance Database loses its primary's machine (the
// node stops the pod's containers and does not restart them). The operator
// promotes a replica that has every acknowledged row, -rw routes to it,
// writes succeed there and the other replica follows it. When the machine
// comes back, the former primary's pod starts as a replica of the new
// primary (PostgreSQL rewinds it) and streams from it.
func TestFailover(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open := haDatabase(t, d, "fo", 3)
			ns := db.Namespace
			rw := open(resolveOne(t, db.Name+"-rw", ns))
			insert(t, rw, 1, 50, "acknowledged")
			// Replication is asynchronous: this test is about the failover,
			// so the replicas have every row first (issue 12 bounds the loss).
			servers := map[string]*sql.DB{}
			for _, pod := range []string{db.Name + "-0", db.Name + "-1", db.Name + "-2"} {
				servers[pod] = open(podIP(t, ns, pod))
			}
			for _, pod := range []string{db.Name + "-1", db.Name + "-2"} {
				eventually(t, 30*time.Second, pod+" has every row", func() string { return d.state(servers[pod], 50, true) })
			}

			old := db.Name + "-0"
			if err := node.Down(ns, old); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = node.Up(ns, old) })
			lost := time.Now()
			got := waitFailover(t, db, old, 2*time.Minute)
			newName := got.Status.CurrentPrimary
			t.Logf("%s promoted %s after the primary was lost", newName, time.Since(lost).Round(time.Second))
			if f := got.Status.LastFailover; f.From != old || f.To != newName || f.Reason == "" {
				t.Errorf("failover record %+v", f)
			}
			other := db.Name + "-1"
			if newName == other {
				other = db.Name + "-2"
			}
			eventually(t, 30*time.Second, "-rw routes to the new primary", func() string {
				if eps := endpointPods(t, ns, db.Name+"-rw"); !slices.Equal(eps, []string{newName}) {
					return fmt.Sprintf("-rw endpoints %v", eps)
				}
				return ""
			})
			insert(t, open(resolveOne(t, db.Name+"-rw", ns)), 51, 51, "after failover")
			if s := d.state(servers[newName], 51, false); s != "" {
				t.Errorf("new primary %s: %s", newName, s)
			}
			eventually(t, 30*time.Second, "the other replica follows the new primary", func() string { return d.state(servers[other], 51, true) })

			// The machine comes back: its pod starts from the topology the
			// operator keeps, as a replica of the new primary.
			if err := node.Up(ns, old); err != nil {
				t.Fatal(err)
			}
			waitRunning(t, db, 3, 3*time.Minute)
			eventually(t, time.Minute, "the former primary a read-only replica with every row", func() string {
				if s := atPod(t, open, ns, old, func(c *sql.DB) string { return d.state(c, 51, true) }); s != "" {
					return s
				}
				if r := podRole(ns, old); r != "replica" {
					return old + " labelled " + r
				}
				return ""
			})
			insert(t, open(resolveOne(t, db.Name+"-rw", ns)), 52, 52, "streams")
			eventually(t, 30*time.Second, "the former primary streams from the new one", func() string {
				return atPod(t, open, ns, old, func(c *sql.DB) string { return d.state(c, 52, true) })
			})
			// The replicas the failover re-pointed, and the former primary
			// that came back, stream as the replication account.
			eventually(t, 30*time.Second, "every replica streaming as the replication account", func() string {
				return d.replicatingAs(t, db, newName, 2)
			})
			wantEvents(t, db, "PrimaryUnhealthy", "FailoverStarted", "FailoverCompleted")
			rotateAppPassword(t, d, db, old)
		})
	}
}

// rotateAppPassword writes a new password into the application Secret, as
// a user rotating it does: the operator sets it on the primary (after a
// failover, the new one), it reaches the replica by replication, the
// Secret's uri follows, and the old password stops working.
func rotateAppPassword(t testing.TB, d dialect, db *dbv1.Database, replica string) {
	t.Helper()
	ctx := context.Background()
	user, oldPassword, database := appCredentials(t, db)
	newPassword := "rotated-" + db.Namespace
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := cs.CoreV1().Secrets(db.Namespace).Get(ctx, db.Name+"-app", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data["password"] = []byte(newPassword)
		_, err = cs.CoreV1().Secrets(db.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(newPassword))
	eventually(t, time.Minute, "the new password set on the server", func() string {
		s, err := cs.CoreV1().Secrets(db.Namespace).Get(ctx, db.Name+"-app", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if s.Annotations["database.example.com/applied-password-sha256"] != hex.EncodeToString(sum[:]) {
			return "applied-password annotation not updated"
		}
		if u, err := url.Parse(string(s.Data["uri"])); err != nil || u.User == nil {
			return fmt.Sprintf("uri unreadable: %v", err)
		} else if p, _ := u.User.Password(); p != newPassword {
			return "the uri still holds the old password"
		}
		return ""
	})
	rw := resolveOne(t, db.Name+"-rw", db.Namespace)
	for host, what := range map[string]string{rw: "the primary", podIP(t, db.Namespace, replica): "replica " + replica} {
		eventually(t, 30*time.Second, "the new password accepted by "+what, func() string {
			if err := d.open(t, host, user, newPassword, database).Ping(); err != nil {
				return err.Error()
			}
			return ""
		})
		if err := d.open(t, host, user, oldPassword, database).Ping(); err == nil {
			t.Errorf("%s still accepts the old application password", what)
		}
	}
	wantEvents(t, db, "AppPasswordRotated")
}

// TestFormerPrimaryReturns: the primary holds a write its replica never
// received, and its machine is cut off from everyone; its agent stops the
// server when it cannot renew the primary Lease, the replica is promoted
// once the Lease has expired and takes writes; then the old machine comes
// back. Its agent starts the server fenced, as it was; the operator
// records what it holds and restarts its pod, whose start script rewinds
// it onto the new primary (PostgreSQL) or, as it holds a write the new
// primary never had, sets its data aside and clones the new primary
// (MariaDB: the write is taken with replication stopped, so it diverges
// for sure). No
// acknowledged write that reached the new primary is lost, the diverged
// data is kept on the volume, and Events say what happened.
func TestFormerPrimaryReturns(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open, primary, _ := replicatedPair(t, d, "back")
			ns := db.Namespace
			old, repl := db.Name+"-0", db.Name+"-1"
			root := d.superuser(t, db, podIP(t, ns, repl))
			var oldPod *corev1.Pod // the former primary's pod before the partition

			// The primary takes a write the replica never receives.
			if !t.Run("the primary takes a write the replica never receives", func(t *testing.T) {
				if d.engine == dbv1.EngineMariaDB {
					if err := execTimeout(root, "STOP SLAVE IO_THREAD"); err != nil {
						t.Fatal(err)
					}
					insert(t, primary, 11, 11, "errant")
				} else {
					// No WAL receiver until the operator points it somewhere.
					for _, stmt := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
						if err := execTimeout(root, stmt); err != nil {
							t.Fatal(err)
						}
					}
					eventually(t, 30*time.Second, "the replica's WAL receiver stopped", func() string {
						var n int
						if err := root.QueryRow("SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n); err != nil {
							return err.Error()
						}
						if n != 0 {
							return "still receiving"
						}
						return ""
					})
					insert(t, primary, 11, 11, "errant")
				}
			}) {
				return
			}

			// The primary's machine is cut off from everyone: its agent
			// cannot renew the Lease and stops the server; once the Lease
			// has expired the replica is promoted.
			if !t.Run("failover to "+repl, func(t *testing.T) {
				var err error
				oldPod, err = cs.CoreV1().Pods(ns).Get(context.Background(), old, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := node.Partition(ns, old); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = node.Heal(ns, old) })
				hung := time.Now()
				if d.engine == dbv1.EngineMariaDB {
					// The replica reconnects, as a live one would, only once
					// the primary hangs: started before, it would fetch the
					// errant write in the milliseconds before the signal (a CI
					// run did).
					if err := execTimeout(root, "START SLAVE IO_THREAD"); err != nil {
						t.Fatal(err)
					}
				}
				waitFailover(t, db, old, 2*time.Minute)
				// Back: its agent reads the Lease, which names the new primary,
				// and starts the server fenced, as it was, for the operator to
				// record what it holds before anything discards it.
				if err := node.Heal(ns, old); err != nil {
					t.Fatal(err)
				}
				t.Logf("promoted %s after the partition", time.Since(hung).Round(time.Second))
				insert(t, open(resolveOne(t, db.Name+"-rw", ns)), 12, 12, "after failover")
			}) {
				return
			}

			if !t.Run("the former primary restarted by the operator", func(t *testing.T) {
				eventually(t, 2*time.Minute, old+" restarted by the operator", func() string {
					p, err := cs.CoreV1().Pods(ns).Get(context.Background(), old, metav1.GetOptions{})
					if err != nil {
						return err.Error()
					}
					if p.UID == oldPod.UID {
						return "same pod"
					}
					return ""
				})
				waitRunning(t, db, 2, 3*time.Minute)
			}) {
				return
			}

			if !t.Run("the former primary a read-only replica of the new one", func(t *testing.T) {
				want := 11 // 10 acknowledged and replicated, 1 after the failover
				eventually(t, 2*time.Minute, "the former primary a read-only replica of the new one", func() string {
					if s := atPod(t, open, ns, old, func(c *sql.DB) string { return d.state(c, want, true) }); s != "" {
						return s
					}
					if r := podRole(ns, old); r != "replica" {
						return old + " labelled " + r
					}
					return ""
				})
				atPod(t, open, ns, old, func(c *sql.DB) string {
					if n, err := notes(c); err != nil || n["errant"] != 0 || n["after failover"] != 1 {
						t.Errorf("rows on the former primary: %v (%v)", n, err)
					}
					return ""
				})
			}) {
				return
			}

			t.Run("the diverged data kept on the volume", func(t *testing.T) {
				claim := claimDir(t, ns, "data-"+old)
				aside, _ := filepath.Glob(filepath.Join(claim, "*rebuild*"))
				log, _ := node.Logs(ns, old, "database", false)
				if d.engine == dbv1.EngineMariaDB {
					if len(aside) != 1 {
						t.Errorf("diverged data set aside on %s: %v, want one directory", claim, aside)
					}
					wantEvents(t, db, "InstanceDiverged", "InstanceRestarted")
				} else {
					if len(aside) != 0 {
						t.Errorf("data set aside on the former primary (a rewind was enough): %v", aside)
					}
					if !strings.Contains(string(log), "rewinding onto "+repl) || strings.Contains(string(log), "pg_rewind failed") {
						t.Errorf("the former primary was not rewound:\n%s", tail(string(log), 3000))
					}
					// The rewind discarded the errant write; its WAL is kept.
					if wal, _ := filepath.Glob(filepath.Join(claim, "diverged-wal-*", "0000*")); len(wal) == 0 {
						t.Errorf("the diverged WAL was not kept aside on %s:\n%s", claim, tail(string(log), 3000))
					}
					wantEvents(t, db, "DivergedWritesSetAside", "InstanceRestarted")
				}
			})
		})
	}
}

// TestOperatorKilledAfterPromotion: the primary's machine is cut off; the operator
// promotes the replica and is killed at its next write (the old primary's
// role label never reaches the API server), so the topology names the
// promoted server while status still names the old one. The promoted
// server takes writes; the old machine comes back, and its agent (which
// stopped the server when it could not renew the Lease) starts it fenced. A new operator must keep
// the promoted server, which the writes went to, never the old one; every
// write the promoted server acknowledged is kept.
func TestOperatorKilledAfterPromotion(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open, primary, replica := replicatedPair(t, d, "kill")
			ns := db.Namespace
			old, next := db.Name+"-0", db.Name+"-1"

			killed := op.killAt(func(r *http.Request) bool {
				return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/namespaces/"+ns+"/pods/"+old)
			})
			t.Cleanup(func() {
				op.disarm()
				if err := op.restart(); err != nil {
					t.Errorf("restarting the operator: %v", err)
				}
			})
			if err := node.Partition(ns, old); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = node.Heal(ns, old) })
			select {
			case <-killed:
			case <-time.After(2 * time.Minute):
				t.Fatal("no write after a promotion within 2 minutes: the operator did not fail over")
			}
			insert(t, replica, 11, 20, "on the promoted server")
			if err := node.Heal(ns, old); err != nil {
				t.Fatal(err)
			}
			// Its agent, whose Lease ran out, stopped it and starts it
			// again fenced: it takes no write (before the agent it came back
			// writable here: two primaries).
			time.Sleep(2 * time.Second)
			if err := execTimeout(primary, "INSERT INTO orders VALUES (1000, 'second primary')"); err == nil {
				t.Error("the old primary took a write after the promotion: two writable primaries")
			}

			if err := op.restart(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Minute, "the promoted server recorded as the primary", func() string { return primaryBehindRW(t, db, next) })
			insert(t, open(resolveOne(t, db.Name+"-rw", ns)), 21, 21, "after the restart")
			if n, err := notes(replica); err != nil || n["acknowledged"] != 10 || n["on the promoted server"] != 10 || n["after the restart"] != 1 {
				t.Errorf("rows on the primary %s: %v (%v)", next, n, err)
			}
			waitRunning(t, db, 2, 3*time.Minute)
			eventually(t, 2*time.Minute, "the old primary a read-only replica of the promoted one", func() string {
				return atPod(t, open, ns, old, func(c *sql.DB) string { return d.state(c, 21, true) })
			})
			wantEvents(t, db, "PrimaryRecordRepaired")
		})
	}
}

// primaryBehindRW says why name is not yet the primary status records and
// the one pod behind -rw ("" once it is).
func primaryBehindRW(t testing.TB, db *dbv1.Database, name string) string {
	got := &dbv1.Database{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
		return err.Error()
	}
	if got.Status.CurrentPrimary != name {
		return "currentPrimary " + got.Status.CurrentPrimary
	}
	if eps := endpointPods(t, db.Namespace, db.Name+"-rw"); !slices.Equal(eps, []string{name}) {
		return fmt.Sprintf("-rw endpoints %v", eps)
	}
	return ""
}

// TestSwitchoverUnderWrites: a client writes through <name>-rw (resolved
// through the cluster's DNS on every write, as a reconnecting application
// would) while the user moves the primary with spec.primary. Every
// acknowledged write is on the new primary, writes resume there, and the
// old primary follows it (PostgreSQL's is restarted by the operator and
// rewound).
func TestSwitchoverUnderWrites(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) {
			db, open := haDatabase(t, d, "sw", 2)
			ns := db.Namespace
			ctx := context.Background()
			stopWriting := writeThroughRW(d, db, open)
			time.Sleep(time.Second)
			old, target := db.Name+"-0", db.Name+"-1"
			oldPod, err := cs.CoreV1().Pods(ns).Get(ctx, old, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
				t.Fatal(err)
			}
			db.Spec.Primary = target
			if err := k8s.Update(ctx, db); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Minute, "the new primary serving", func() string {
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
					return err.Error()
				}
				if db.Status.CurrentPrimary != target {
					return fmt.Sprintf("primary %q", db.Status.CurrentPrimary)
				}
				return ""
			})
			waitRunning(t, db, 2, 3*time.Minute)
			time.Sleep(2 * time.Second) // writes through -rw on the new primary
			acked := stopWriting()
			have := noAckedWriteLost(t, open(podIP(t, ns, target)), acked)
			// The old primary follows with every row.
			eventually(t, 2*time.Minute, "the old primary a read-only replica with every row", func() string {
				return atPod(t, open, ns, old, func(c *sql.DB) string { return d.state(c, len(have), true) })
			})
			if d.engine == dbv1.EnginePostgreSQL {
				cur, err := cs.CoreV1().Pods(ns).Get(ctx, old, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if cur.UID == oldPod.UID {
					t.Errorf("the old primary's pod was not restarted")
				}
				log, err := node.Logs(ns, old, "database", false)
				if err != nil || !strings.Contains(string(log), "rewinding onto "+target) || strings.Contains(string(log), "pg_rewind failed") {
					t.Errorf("the old primary was not rewound (%v):\n%s", err, tail(string(log), 2000))
				}
			}
			t.Logf("%d writes acknowledged, none lost", len(acked))
		})
	}
}

// writeThroughRW starts an application writing one row at a time through
// the -rw Service, as it resolves at each write (a new connection each
// time, as a pool after a failed write would), and returns a stop function
// that ends it and returns the ids of the writes the servers acknowledged.
func writeThroughRW(d dialect, db *dbv1.Database, open func(string) *sql.DB) (stop func() []int) {
	stopTimed := writeThroughRWTimed(d, db, open, 1)
	return func() []int { return ids(stopTimed()) }
}

// noAckedWriteLost fails the test unless primary holds every acknowledged
// write, the last one included (writes went on after the move); it
// returns the ids primary holds.
// orderIDs is every id in the orders table of db.
func orderIDs(t testing.TB, db *sql.DB) map[int]bool {
	t.Helper()
	have := map[int]bool{}
	rows, err := db.Query("SELECT id FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	return have
}

func noAckedWriteLost(t testing.TB, primary *sql.DB, acked []int) map[int]bool {
	t.Helper()
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged")
	}
	have := orderIDs(t, primary)
	var lost []int
	for _, id := range acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes are not on the primary: %v", len(lost), len(acked), lost)
	}
	if last := acked[len(acked)-1]; !have[last] {
		t.Fatalf("no write after the move")
	}
	return have
}

// TestRollingChangeSwitchesOver: a change of the pod template (here the
// CPU request) under writes through -rw restarts the replica first, then
// moves the primary to it by a switchover, then restarts the old primary:
// every pod ends on the new revision, no failover happens, and no
// acknowledged write is lost.
func TestRollingChangeSwitchesOver(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	for _, d := range dialects {
		t.Run(d.name(), func(t *testing.T) { rollingChange(t, d) })
	}
}

// rollingChange runs TestRollingChangeSwitchesOver's scenario on a new
// Database under the write-history checker (through -rw, and on both
// pods' machines as the application) and fails t on any violation.
func rollingChange(t testing.TB, d dialect) faultRun {
	db, open := haDatabase(t, d, "roll", 2)
	defer func() { _ = k8s.Delete(context.Background(), db) }()
	ns := db.Namespace
	ctx := context.Background()
	old, next := db.Name+"-0", db.Name+"-1"
	writes := watchWrites(t, d, db, open, 40*time.Second, old, next)
	time.Sleep(time.Second)
	updateDatabase(t, db, func(db *dbv1.Database) {
		db.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	})
	writes.faultNow()
	eventually(t, 3*time.Minute, "every pod on the new revision, the primary moved", func() string {
		sts, err := cs.AppsV1().StatefulSets(ns).Get(ctx, db.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		rev := sts.Status.UpdateRevision
		for _, name := range []string{old, next} {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := p.Labels["controller-revision-hash"]; got != rev || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "150m" {
				return fmt.Sprintf("%s at revision %s, want %s", name, got, rev)
			}
		}
		if got := k8sDatabase(t, db); got.Status.CurrentPrimary != next {
			return "primary " + got.Status.CurrentPrimary
		}
		return ""
	})
	got := waitRunning(t, db, 2, 3*time.Minute)
	time.Sleep(2 * time.Second) // writes through -rw on the new primary
	res := writes.stop(old)
	writes.lost(&res, open(podIP(t, ns, next)), "")
	if got.Status.LastFailover != nil {
		t.Errorf("a rolling change failed over: %+v", got.Status.LastFailover)
	}
	wantEvents(t, db, "RolloutSwitchover", "SwitchoverCompleted", "InstanceRestarted")
	var rows int // the writers are done
	if err := open(podIP(t, ns, next)).QueryRow("SELECT count(*) FROM orders").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the old primary a read-only replica with every row", func() string {
		return atPod(t, open, ns, old, func(c *sql.DB) string { return d.state(c, rows, true) })
	})
	return res
}

// BenchmarkRollingChange repeats the rolling change under writes (`make
// bench-faults`): the time to a writable -rw is from the change to the
// first write on the new primary.
func BenchmarkRollingChange(b *testing.B) {
	benchRuns(b, "rolling change under writes (a switchover)", func(b *testing.B, d dialect) faultRun { return rollingChange(b, d) })
}

// TestRollingChangeWithPinnedPrimary: with spec.primary naming the
// primary, a rolling change moves the primary away to restart it and then
// back, once: it ends on the pinned instance, every pod updated, and no
// switchover loop (a review found the pinned, not yet updated primary was
// switched back to and away again at every reconcile).
func TestRollingChangeWithPinnedPrimary(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	d := dialects[1]
	db, _ := haDatabase(t, d, "pin", 2, func(db *dbv1.Database) { db.Spec.Primary = "pin-0" })
	ns := db.Namespace
	ctx := context.Background()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
		t.Fatal(err)
	}
	before, err := cs.AppsV1().StatefulSets(ns).Get(ctx, db.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The operator writes the Database too: a stale copy's update conflicts.
	updateDatabase(t, db, func(db *dbv1.Database) {
		db.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	})
	switchovers := func() int {
		list := &eventsv1.EventList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range list.Items {
			if e.Regarding.Name == db.Name && e.Reason == "SwitchoverCompleted" {
				n++
				if e.Series != nil && e.Series.Count > 1 {
					n += int(e.Series.Count) - 1
				}
			}
		}
		return n
	}
	eventually(t, 3*time.Minute, "every pod updated, the pinned primary back", func() string {
		sts, err := cs.AppsV1().StatefulSets(ns).Get(ctx, db.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		// Until the change reaches the StatefulSet, every pod is at its
		// (old) update revision: that is no rollout done.
		if sts.Status.UpdateRevision == before.Status.UpdateRevision || sts.Status.ObservedGeneration != sts.Generation {
			return "the change has not reached the StatefulSet"
		}
		for _, name := range []string{"pin-0", "pin-1"} {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := p.Labels["controller-revision-hash"]; got != sts.Status.UpdateRevision {
				return fmt.Sprintf("%s at revision %s, want %s", name, got, sts.Status.UpdateRevision)
			}
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
			return err.Error()
		}
		if db.Status.CurrentPrimary != "pin-0" {
			return "primary " + db.Status.CurrentPrimary
		}
		return ""
	})
	waitRunning(t, db, 2, 3*time.Minute)
	// Events are written asynchronously: a few seconds.
	eventually(t, 30*time.Second, "the two switchovers recorded", func() string {
		if n := switchovers(); n < 2 {
			return fmt.Sprintf("%d SwitchoverCompleted Events", n)
		}
		return ""
	})
	time.Sleep(15 * time.Second) // several reconciles: no switchover more
	if n := switchovers(); n != 2 {
		t.Errorf("%d switchovers: want the move away and back only", n)
	}
	if db.Status.LastFailover != nil {
		t.Errorf("a rolling change failed over: %+v", db.Status.LastFailover)
	}
}

// TestReplicaThatCannotCatchUpIsRebuilt: a MariaDB replica is away while
// its primary purges the binary logs it still needs; back, it can never
// catch up (error 1236), with nothing in the cluster changing. The operator
// notices on its own, rebuilds it from the primary (its old data set
// aside, never deleted) and says why; the replica then has every row.
func TestReplicaThatCannotCatchUpIsRebuilt(t *testing.T) {
	t.Parallel() // its own Database, faults on its own pods only: see parallel in main_test.go
	d := dialects[1]
	db, open, primary, _ := replicatedPair(t, d, "stuck")
	ns := db.Namespace
	repl := db.Name + "-1"
	replRoot := d.superuser(t, db, podIP(t, ns, repl))
	if err := execTimeout(replRoot, "STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	insert(t, primary, 11, 20, "while away")
	primRoot := d.superuser(t, db, podIP(t, ns, db.Name+"-0"))
	if err := execTimeout(primRoot, "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	// Only the log begun by the flush is left: the rows the replica lacks
	// are in none the primary still has.
	if err := testservers.PurgeBinaryLogs(context.Background(), primRoot); err != nil {
		t.Fatal(err)
	}
	if err := execTimeout(replRoot, "START SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	// Detected within the operator's replica check (30 s) and rebuilt.
	eventually(t, 2*time.Minute, "the rebuilt replica with every row", func() string {
		return atPod(t, open, ns, repl, func(c *sql.DB) string { return d.state(c, 20, true) })
	})
	wantEvents(t, db, "ReplicaCannotCatchUp", "InstanceRestarted")
	if aside, _ := filepath.Glob(filepath.Join(claimDir(t, ns, "data-"+repl), "*rebuild*")); len(aside) != 1 {
		t.Errorf("the stuck replica's data set aside: %v, want one directory", aside)
	}
}

// TestFailoverLagBound: with spec.failover.maxLag, a replica that fell too
// far behind the primary's last seen position is not promoted: the
// Database stays without a serving primary, says why, and tells OLM not to
// upgrade the operator, until the bound is raised; then the replica is
// promoted with what it has. The operator restarts in between: the bound
// rests on the position it recorded, not on its memory.
func TestFailoverLagBound(t *testing.T) {
	d := dialects[1] // the replica stops receiving through SQL
	db, open := haDatabase(t, d, "lag", 2, func(db *dbv1.Database) { db.Spec.Failover.MaxLag = ptr.To[int64](5) })
	ns := db.Namespace
	ctx := context.Background()
	old, repl := db.Name+"-0", db.Name+"-1"
	primary, replica := open(podIP(t, ns, old)), open(podIP(t, ns, repl))
	insert(t, primary, 1, 10, "replicated")
	eventually(t, 30*time.Second, "the replica has every row", func() string { return d.state(replica, 10, true) })
	if err := execTimeout(d.superuser(t, db, podIP(t, ns, repl)), "STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	// The primary takes 20 transactions the replica never receives, and
	// the operator samples its position (every 5 s while it is healthy).
	insert(t, primary, 11, 30, "not replicated")
	time.Sleep(7 * time.Second)
	// The operator restarts while the primary is lost: the new one never
	// sees it healthy and bounds the failover by the recorded position.
	op.kill()
	t.Cleanup(func() {
		if err := op.restart(); err != nil {
			t.Errorf("restarting the operator: %v", err)
		}
	})
	if err := node.Down(ns, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Up(ns, old) })
	if err := op.restart(); err != nil {
		t.Fatal(err)
	}

	got := &dbv1.Database{}
	eventually(t, time.Minute, "failover refused: the replica beyond maxLag", func() string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, "Degraded")
		if c == nil || !strings.Contains(c.Message, "beyond spec.failover.maxLag 5") {
			return fmt.Sprintf("conditions %+v", got.Status.Conditions)
		}
		return ""
	})
	if got.Status.CurrentPrimary != old || got.Status.LastFailover != nil {
		t.Fatalf("a lagging replica was promoted: primary %s, %+v", got.Status.CurrentPrimary, got.Status.LastFailover)
	}
	busy := ns + "/lag: failover of " + old
	eventually(t, 10*time.Second, "Upgradeable=False naming the failover", func() string {
		if c := upgradeable(t); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, busy) {
			return fmt.Sprintf("Upgradeable %+v", c)
		}
		return ""
	})

	if err := k8s.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
		t.Fatal(err)
	}
	db.Spec.Failover.MaxLag = ptr.To[int64](1000)
	if err := k8s.Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	if newName := waitFailover(t, db, old, time.Minute).Status.CurrentPrimary; newName != repl {
		t.Fatalf("promoted %s", newName)
	}
	if s := d.state(replica, 10, false); s != "" {
		t.Errorf("the promoted replica: %s, want the 10 rows it received", s)
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
	if err := k8s.Get(context.Background(), operatorCondition, oc); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(oc.Spec.Conditions, apiv2.Upgradeable)
}
