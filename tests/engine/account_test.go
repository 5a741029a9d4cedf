package engine_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// appWrite runs stmt as the application account on one server: a fresh
// session each time, as an application's pool would open.
// appUser names the account and its database: not "app", which the test
// servers already have for 127.0.0.1 (a more specific host than the '%'
// EnsureAccount grants, so MariaDB would log in as that one).
const appUser = "shop"

type appWrite func(ctx context.Context, password, stmt string) error

func pgApp(p *testservers.Postgres) appWrite {
	return func(ctx context.Context, password, stmt string) error {
		cfg, err := pgx.ParseConfig("")
		if err != nil {
			return err
		}
		cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(p.Port), appUser, password, appUser
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, stmt)
		return err
	}
}

func mariaApp(m *testservers.MariaDB) appWrite {
	return func(ctx context.Context, password, stmt string) error {
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = appUser, password, "tcp", fmt.Sprintf("127.0.0.1:%d", m.Port), appUser
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, stmt)
		return err
	}
}

// TestApplicationAccount: the account EnsureAccount makes logs in with its
// password (sent only as a verifier or hash), owns its database, reaches
// the replicas by replication, and is refused writes by a replica and by
// a fenced primary (it has no right that read-only modes let through).
// A new password replaces the old one everywhere.
func TestApplicationAccount(t *testing.T) {
	pg := testservers.StartPostgresPrimary(t)
	pgr := pg.StartReplica(t)
	ma := testservers.StartMariaDBPrimary(t)
	mar := ma.StartReplica(t)
	for _, c := range []struct {
		name             string
		primary, replica engine.Instance
		onPrimary        appWrite
		onReplica        appWrite
		readOnly         string // what the refusal says
		// evade is what an application may try on a fenced primary to
		// write anyway, and fenced what the refusal says.
		evade, fenced string
	}{
		{"postgresql", pg.Instance(t), pgr.Instance(t), pgApp(pg), pgApp(pgr), "read-only transaction",
			"BEGIN READ WRITE; INSERT INTO orders VALUES (3); COMMIT", "pg_hba.conf rejects connection"},
		{"mariadb", ma.Instance(t), mar.Instance(t), mariaApp(ma), mariaApp(mar), "read-only",
			"INSERT INTO orders VALUES (3)", "read-only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			acct := engine.Account{User: appUser, Password: "first-Pass'word\\1", Database: appUser}
			if err := c.primary.EnsureAccount(ctx, acct); err != nil {
				t.Fatal(err)
			}
			// Twice: it is idempotent.
			if err := c.primary.EnsureAccount(ctx, acct); err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{"CREATE TABLE orders (id INT PRIMARY KEY)", "INSERT INTO orders VALUES (1)"} {
				if err := c.onPrimary(ctx, acct.Password, stmt); err != nil {
					t.Fatalf("as the application on the primary: %s: %v", stmt, err)
				}
			}
			if err := c.onPrimary(ctx, acct.Password, "CREATE DATABASE elsewhere"); err == nil {
				t.Error("the application account created a database outside its own")
			}
			eventuallyErr(t, func() error { return c.onReplica(ctx, acct.Password, "SELECT 1") })
			if err := c.onReplica(ctx, acct.Password, "INSERT INTO orders VALUES (2)"); err == nil || !strings.Contains(err.Error(), c.readOnly) {
				t.Errorf("an application write on a replica: %v, want it refused (%s)", err, c.readOnly)
			}
			if err := c.primary.Fence(ctx); err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{"INSERT INTO orders VALUES (3)", c.evade} {
				if err := c.onPrimary(ctx, acct.Password, stmt); err == nil || !strings.Contains(err.Error(), c.fenced) {
					t.Errorf("an application's %q on a fenced primary: %v, want it refused (%s)", stmt, err, c.fenced)
				}
			}
			// Twice: it is idempotent.
			if err := c.primary.Fence(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.primary.Unfence(ctx); err != nil {
				t.Fatal(err)
			}
			eventuallyErr(t, func() error { return c.onPrimary(ctx, acct.Password, "INSERT INTO orders VALUES (3)") })
			// Rotation.
			next := acct
			next.Password = "second-Password-2"
			if err := c.primary.EnsureAccount(ctx, next); err != nil {
				t.Fatal(err)
			}
			if err := c.onPrimary(ctx, acct.Password, "SELECT 1"); err == nil {
				t.Error("the old password still logs in after rotation")
			}
			if err := c.onPrimary(ctx, next.Password, "INSERT INTO orders VALUES (4)"); err != nil {
				t.Errorf("the new password: %v", err)
			}
			eventuallyErr(t, func() error { return c.onReplica(ctx, next.Password, "SELECT 1") })
		})
	}
}

func eventuallyErr(t *testing.T, f func() error) {
	t.Helper()
	var err error
	for range 100 {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("still failing after 10 s: %v", err)
}

// TestReplicationAccount: a replica the start script clones streams as the
// replication account, never as the superuser; the account can stream and
// do nothing else (no table, no database); EnsureAccount keeps it
// (idempotent), and Follow with its credentials re-points a replica that
// then streams new rows.
func TestReplicationAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acct := engine.Account{User: engine.ReplicationUser, Password: testservers.ReplicationPassword, Replication: true}
	repl := engine.Credentials{User: acct.User, Password: acct.Password}

	t.Run("postgresql", func(t *testing.T) {
		pg := testservers.StartPostgresPrimary(t)
		r := pg.StartReplica(t)
		streamingAs := func() error {
			c, err := pg.Connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			var users []string
			rows, err := c.Query(ctx, "SELECT usename FROM pg_stat_replication WHERE state = 'streaming'")
			if err != nil {
				return err
			}
			for rows.Next() {
				var u string
				if err := rows.Scan(&u); err != nil {
					return err
				}
				users = append(users, u)
			}
			if len(users) != 1 || users[0] != engine.ReplicationUser {
				return fmt.Errorf("streaming as %v, want [%s]", users, engine.ReplicationUser)
			}
			return nil
		}
		eventuallyErr(t, streamingAs)
		c := ensureAndLogIn(ctx, t, pg, acct)
		for _, stmt := range []string{"CREATE TABLE stolen (i int)", "CREATE DATABASE elsewhere", "CREATE ROLE other"} {
			if _, err := c.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("the replication account's %q: %v, want permission denied", stmt, err)
			}
		}
		// Re-pointed with the account's credentials (the password from the
		// replica's password file), it streams again.
		if err := r.Instance(t).Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: pg.Port}, repl); err != nil {
			t.Fatal(err)
		}
		if err := pg.Exec(ctx, "CREATE TABLE after_follow (i int); INSERT INTO after_follow VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		eventuallyErr(t, func() error {
			c, err := r.Connect(ctx)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM after_follow").Scan(&n); err != nil || n != 1 {
				return fmt.Errorf("%d rows on the replica (%w)", n, err)
			}
			return streamingAs()
		})
	})

	t.Run("mariadb", func(t *testing.T) {
		ma := testservers.StartMariaDBPrimary(t)
		r := ma.StartReplica(t)
		masterUser := func() (string, error) {
			db, err := r.DB(ctx, "root", testservers.MariaDBRootPassword)
			if err != nil {
				return "", err
			}
			defer db.Close()
			return testservers.MasterUser(ctx, db)
		}
		if u, err := masterUser(); err != nil || u != engine.ReplicationUser {
			t.Fatalf("the clone replicates as %q (%v), want %s", u, err, engine.ReplicationUser)
		}
		for range 2 {
			if err := ma.Instance(t).EnsureAccount(ctx, acct); err != nil {
				t.Fatal(err)
			}
		}
		db, err := ma.DB(ctx, acct.User, acct.Password)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, stmt := range []string{"CREATE DATABASE stolen", "CREATE TABLE mysql.stolen (i int)", "SELECT * FROM mysql.global_priv"} {
			if _, err := db.ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "denied") {
				t.Errorf("the replication account's %q: %v, want it denied", stmt, err)
			}
		}
		if err := r.Instance(t).Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: ma.Port}, repl); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.after_follow (i INT PRIMARY KEY)", "INSERT INTO shop.after_follow VALUES (1)"} {
			if err := ma.RootExec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		eventuallyErr(t, func() error {
			db, err := r.DB(ctx, "root", testservers.MariaDBRootPassword)
			if err != nil {
				return err
			}
			defer db.Close()
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM shop.after_follow").Scan(&n); err != nil || n != 1 {
				return fmt.Errorf("%d rows on the replica (%w)", n, err)
			}
			if u, err := masterUser(); err != nil || u != engine.ReplicationUser {
				return fmt.Errorf("replicating as %q (%w)", u, err)
			}
			return nil
		})
	})
}

// ensureAndLogIn sets acct on pg twice (it is idempotent) and logs in
// with it to the postgres database.
func ensureAndLogIn(ctx context.Context, t *testing.T, pg *testservers.Postgres, acct engine.Account) *pgx.Conn {
	t.Helper()
	for range 2 {
		if err := pg.Instance(t).EnsureAccount(ctx, acct); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(pg.Port), acct.User, acct.Password, "postgres"
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("the %s logs in: %v", acct.User, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestMonitoringAccount: the monitoring account reads the server's state
// (replication included) and no table, and writes nothing.
func TestMonitoringAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acct := engine.Account{User: engine.MonitoringUser, Password: "watch-only", Monitoring: true}

	t.Run("postgresql", func(t *testing.T) {
		pg := testservers.StartPostgresPrimary(t)
		pg.StartReplica(t)
		if err := pg.Exec(ctx, "CREATE TABLE secrets (v text); INSERT INTO secrets VALUES ('x')"); err != nil {
			t.Fatal(err)
		}
		c := ensureAndLogIn(ctx, t, pg, acct)
		var client string
		eventuallyErr(t, func() error {
			// Without pg_monitor, another role's client_addr reads as NULL.
			return c.QueryRow(ctx, "SELECT client_addr::text FROM pg_stat_replication").Scan(&client)
		})
		for _, stmt := range []string{"SELECT * FROM secrets", "CREATE TABLE mine (i int)", "INSERT INTO secrets VALUES ('y')"} {
			if _, err := c.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("the monitoring account's %q: %v, want permission denied", stmt, err)
			}
		}
	})

	t.Run("mariadb", func(t *testing.T) {
		ma := testservers.StartMariaDBPrimary(t)
		r := ma.StartReplica(t)
		root, err := ma.DB(ctx, "root", testservers.MariaDBRootPassword)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.secrets (v text)", "INSERT INTO shop.secrets VALUES ('x')"} {
			if _, err := root.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := ma.Instance(t).EnsureAccount(ctx, acct); err != nil {
				t.Fatal(err)
			}
		}
		for _, srv := range []*testservers.MariaDB{ma, r} {
			var mon *sql.DB
			eventuallyErr(t, func() error { // the account reaches the replica by replication
				var err error
				if mon, err = srv.DB(ctx, acct.User, acct.Password); err != nil {
					return err
				}
				return mon.PingContext(ctx)
			})
			defer mon.Close()
			for _, q := range []string{"SHOW PROCESSLIST", "SHOW SLAVE STATUS", "SHOW BINARY LOGS", "SELECT COUNT(*) FROM performance_schema.threads"} {
				rows, err := mon.QueryContext(ctx, q)
				if err != nil {
					t.Errorf("port %d: the monitoring account's %q: %v", srv.Port, q, err)
					continue
				}
				rows.Close()
			}
			for _, stmt := range []string{"SELECT * FROM shop.secrets", "CREATE DATABASE mine", "INSERT INTO shop.secrets VALUES ('y')"} {
				_, err := mon.ExecContext(ctx, stmt)
				// The replica is read-only, which refuses writes first.
				refused := err != nil && (strings.Contains(err.Error(), "denied") || srv == r && strings.Contains(err.Error(), "--read-only"))
				if !refused {
					t.Errorf("port %d: the monitoring account's %q: %v, want denied", srv.Port, stmt, err)
				}
			}
		}
	})
}
