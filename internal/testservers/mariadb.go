package testservers

import (
	"context"
	"database/sql"
	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB is a MariaDB server (Debian's, 10.11) on 127.0.0.1 with binary
// logging and GTID strict mode, ready to be a primary or a replica.
type MariaDB struct {
	server
	ServerID int
}

// MariaDB accounts in these test servers: root (all privileges, the
// operator's) and app (data only, as an application would have).
const (
	MariaDBRootPassword = "test-Password-1"
	MariaDBAppPassword  = "app-Password-1"
)

// StartMariaDB initializes and starts a server with the given server id.
func StartMariaDB(t testing.TB, serverID int) *MariaDB {
	t.Helper()
	installer := lookPath(t, []string{"mariadb-install-db", "mysql_install_db"}, "mariadb-server")
	m := &MariaDB{ServerID: serverID}
	m.Dir = scratchDir(t, nil)
	data := filepath.Join(m.Dir, "data")
	args := []string{"--no-defaults", "--user=root", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}
	cmd := exec.Command(installer, args...)
	if eat, err := exec.LookPath("eatmydata"); err == nil { // skips fsync: 0.5 s instead of 4
		cmd = exec.Command(eat, append([]string{installer}, args...)...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	m.Restart(t)
	// Accounts over TCP (skip-name-resolve: 'localhost' matches only the
	// socket), kept out of the binary log so that every server starts with
	// an empty GTID position and replicas do not look diverged.
	db, err := m.socketDB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{
		"SET sql_log_bin = 0",
		fmt.Sprintf("CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '%s'", MariaDBRootPassword),
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
		fmt.Sprintf("CREATE OR REPLACE USER 'app'@'127.0.0.1' IDENTIFIED BY '%s'", MariaDBAppPassword),
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON *.* TO 'app'@'127.0.0.1'",
		"RESET MASTER",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return m
}

// Restart starts a stopped or killed server again on its port.
func (m *MariaDB) Restart(t testing.TB) {
	t.Helper()
	if m.Port == 0 {
		m.Port = freePort(t)
	}
	server := lookPath(t, []string{"mariadbd", "mysqld"}, "mariadb-server")
	m.start(t, nil, server, "--no-defaults", "--user=root", "--datadir="+filepath.Join(m.Dir, "data"),
		"--socket="+m.socket(), "--port="+strconv.Itoa(m.Port), "--bind-address=127.0.0.1",
		"--pid-file="+filepath.Join(m.Dir, "mariadb.pid"), "--skip-name-resolve",
		"--server-id="+strconv.Itoa(m.ServerID), "--log-bin=binlog", "--log-slave-updates=ON",
		"--binlog-format=ROW", "--gtid-strict-mode=ON", "--innodb-buffer-pool-size=32M",
		"--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0", "--skip-log-error")
	t.Cleanup(m.Stop)
	waitUntil(t, &m.server, "MariaDB", 60*time.Second, func() error {
		db, err := m.socketDB()
		if err != nil {
			return err
		}
		defer db.Close()
		return db.Ping()
	})
}

func (m *MariaDB) socket() string { return filepath.Join(m.Dir, "mariadb.sock") }

func (m *MariaDB) socketDB() (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "unix", m.socket(), "root"
	if _, err := os.Stat(m.socket()); err != nil {
		return nil, err
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

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

// AppExec runs one statement as the application account.
func (m *MariaDB) AppExec(ctx context.Context, stmt string) error {
	db, err := m.DB(ctx, "app", MariaDBAppPassword)
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
