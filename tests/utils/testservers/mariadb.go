package testservers

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// MariaDB is a MariaDB server (Debian's, 10.11) on 127.0.0.1 with binary
// logging and GTID strict mode, started by the chart's mysql-start.sh as a
// pod's container would be: the script initializes a primary, clones a
// replica (dump with its GTID position, then replication), or rebuilds an
// instance on request, then execs the server.
type MariaDB struct {
	server
	Pod      string
	ServerID int
	ordinal  int
	topo     *Topology
}

// MariaDB accounts in these test servers: root (all privileges, the
// operator's) and app (data only, as an application would have).
const (
	MariaDBRootPassword = "test-Password-1"
	MariaDBAppPassword  = "app-Password-1"
)

// StartMariaDBCluster starts instance 0 of a Database called name as the
// primary (with the app account) and n-1 more as its replicas, each through
// the start script, sharing one topology. Server ids are 1..n.
func StartMariaDBCluster(t testing.TB, name string, n int) []*MariaDB {
	t.Helper()
	topo := NewTopology(t)
	out := []*MariaDB{startMariaDBPrimary(t, topo, podName(name, 0))}
	for i := 1; i < n; i++ {
		out = append(out, StartMariaDB(t, topo, podName(name, i)))
	}
	return out
}

// StartMariaDBPrimary starts a new primary ("maria-0") with its own topology.
func StartMariaDBPrimary(t testing.TB) *MariaDB {
	return startMariaDBPrimary(t, NewTopology(t), "maria-0")
}

// StartReplica starts the next instance of this server's topology: its
// start script clones the primary and replicates from it.
func (m *MariaDB) StartReplica(t testing.TB) *MariaDB {
	return StartMariaDB(t, m.topo, podName(databaseName(m.Pod), len(m.topo.Ports())))
}

func startMariaDBPrimary(t testing.TB, topo *Topology, pod string) *MariaDB {
	t.Helper()
	m := StartMariaDB(t, topo, pod)
	// The application's account, over TCP (skip-name-resolve: 'localhost'
	// matches only the socket); the replicas' clones copy it.
	db, err := m.DB(context.Background(), "root", MariaDBRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{
		"SET sql_log_bin = 0",
		fmt.Sprintf("CREATE OR REPLACE USER 'app'@'127.0.0.1' IDENTIFIED BY '%s'", MariaDBAppPassword),
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON *.* TO 'app'@'127.0.0.1'",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return m
}

// StartMariaDB starts the instance pod of topo on a new port and data
// directory, and waits until it takes connections.
func StartMariaDB(t testing.TB, topo *Topology, pod string) *MariaDB {
	t.Helper()
	m := newMariaDB(t, topo, pod)
	m.Restart(t)
	return m
}

// StartMariaDBOn starts the instance pod of topo as StartMariaDB does, on
// the data directory fill makes first (a recovery's): the start script
// finds data and starts the server on it.
func StartMariaDBOn(t testing.TB, topo *Topology, pod string, fill func(datadir string)) *MariaDB {
	t.Helper()
	m := newMariaDB(t, topo, pod)
	fill(m.Data())
	m.Restart(t)
	return m
}

// MariaDBOptions are what StartMariaDBFailing adds to a server's start.
type MariaDBOptions struct {
	// Args are added to the server's.
	Args []string
	// AddressSpace, when set, bounds the server's address space (bytes).
	AddressSpace int64
}

// StartMariaDBFailing starts the instance pod of topo as StartMariaDB does
// but waits for nothing: the server is expected to fail (ExitLog).
func StartMariaDBFailing(t testing.TB, topo *Topology, pod string, opts MariaDBOptions) *MariaDB {
	t.Helper()
	m := newMariaDB(t, topo, pod)
	m.addressSpace = opts.AddressSpace
	m.launch(t, opts.Args...)
	return m
}

func newMariaDB(t testing.TB, topo *Topology, pod string) *MariaDB {
	t.Helper()
	ordinal, err := strconv.Atoi(pod[strings.LastIndex(pod, "-")+1:])
	if err != nil {
		t.Fatalf("pod %q has no ordinal", pod)
	}
	// The start script derives the server id from the ordinal, as in a pod.
	m := &MariaDB{Pod: pod, ServerID: 1000 + ordinal, ordinal: ordinal, topo: topo}
	m.Dir = scratchDir(t, nil)
	m.Port = freePort(t)
	topo.register(pod, m.Port)
	return m
}

// Topology is the topology this server's start script reads.
func (m *MariaDB) Topology() *Topology { return m.topo }

// Data is the data directory.
func (m *MariaDB) Data() string { return filepath.Join(m.Dir, "data") }

// Restart starts a stopped or killed server again on its port, through the
// start script, as a restarted pod would.
func (m *MariaDB) Restart(t testing.TB) {
	t.Helper()
	m.launch(t)
	waitUntil(t, &m.server, "MariaDB "+m.Pod, 60*time.Second, func() error {
		db, err := m.DB(context.Background(), "root", MariaDBRootPassword)
		if err != nil {
			return err
		}
		return db.Close()
	})
}

// launch starts the start script, which starts the server with args added.
func (m *MariaDB) launch(t testing.TB, extra ...string) {
	t.Helper()
	server := lookPath(t, []string{"mariadbd"}, "mariadb-server")
	lookPath(t, []string{"mariadb-dump"}, "mariadb-client")
	script := StartScript(t, m.Dir, "mysql-start.sh")
	tmp := PrivateTmp(t, m.Dir)
	env := append(m.topo.env(m.Pod), "ENGINE=mariadb", "DATADIR="+m.Data(), "POD_INDEX="+strconv.Itoa(m.ordinal),
		"ROOT_PASSWORD="+MariaDBRootPassword, "MYSQLD_OPTS=--no-defaults --user=root --tmpdir="+tmp)
	env = append(env, replicationEnv()...)
	name, args := "sh", []string{script}
	if eat, err := exec.LookPath("eatmydata"); err == nil { // no fsync: 0.5 s to initialize instead of 4
		name, args = eat, []string{"sh", script}
	}
	args = append(args, server, "--no-defaults", "--user=root", "--datadir="+m.Data(),
		"--socket="+m.socket(), "--port="+strconv.Itoa(m.Port), "--bind-address=127.0.0.1",
		"--pid-file="+filepath.Join(m.Dir, "mariadb.pid"), "--tmpdir="+tmp, "--skip-name-resolve",
		"--log-bin=binlog", "--log-slave-updates=ON",
		"--binlog-format=ROW", "--gtid-strict-mode=ON", "--innodb-buffer-pool-size=32M",
		"--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0", "--skip-log-error")
	m.start(t, nil, env, name, append(args, extra...)...)
	t.Cleanup(m.Stop)
}

// PrivateTmp makes dir/tmp for one server's temporary files. Servers
// started side by side (tests run in parallel) must not share /tmp:
// concurrent mariadb-install-db runs there collide on their internal
// temporary tables and fail or crash now and then (2 in 64 bootstraps
// here; none in 120 with a directory each). A pod has a /tmp of its own.
func PrivateTmp(t testing.TB, dir string) string {
	t.Helper()
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	return tmp
}

func (m *MariaDB) socket() string { return filepath.Join(m.Dir, "mariadb.sock") }

// DB opens a TCP connection pool as user (root or app).
func (m *MariaDB) DB(ctx context.Context, user, password string) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.Passwd = "tcp", "127.0.0.1:"+strconv.Itoa(m.Port), user, password
	cfg.Timeout = 2 * time.Second
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// RootExec runs one statement as root.
func (m *MariaDB) RootExec(ctx context.Context, stmt string) error {
	return m.exec(ctx, "root", MariaDBRootPassword, stmt)
}

// AppExec runs one statement as the application account.
func (m *MariaDB) AppExec(ctx context.Context, stmt string) error {
	return m.exec(ctx, "app", MariaDBAppPassword, stmt)
}

func (m *MariaDB) exec(ctx context.Context, user, password, stmt string) error {
	db, err := m.DB(ctx, user, password)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// Count returns the number of rows in table, or -1 when it cannot be read
// (yet): a replica may not have the table before it catches up.
func (m *MariaDB) Count(t testing.TB, table string) int {
	t.Helper()
	db, err := m.DB(context.Background(), "app", MariaDBAppPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		return -1
	}
	return n
}

// Instance opens the engine layer's view of this server as root.
func (m *MariaDB) Instance(t testing.TB) engine.Instance {
	return openInstance(t, dbv1.EngineMariaDB, m.Port, engine.Credentials{User: "root", Password: MariaDBRootPassword})
}

// MasterUser is the account a MariaDB replica replicates with (its
// SHOW SLAVE STATUS), asked over c.
func MasterUser(ctx context.Context, c *sql.DB) (string, error) {
	rows, err := c.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || !rows.Next() {
		return "", fmt.Errorf("no replica status (%w)", err)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", err
	}
	if i := slices.Index(cols, "Master_User"); i >= 0 {
		return string(vals[i]), nil
	}
	return "", fmt.Errorf("no Master_User in %v", cols)
}

// PurgeBinaryLogs purges every binary log of the server behind c but the
// one being written, again until it takes (a log still read by a
// replica's ending dump thread is kept at first), for up to 10 s.
func PurgeBinaryLogs(ctx context.Context, c *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if _, err := c.ExecContext(ctx, "PURGE BINARY LOGS BEFORE NOW() + INTERVAL 1 SECOND"); err != nil {
			return err
		}
		rows, err := c.QueryContext(ctx, "SHOW BINARY LOGS")
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d binary logs left: %w", n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
