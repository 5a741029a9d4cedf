// Package backup_test runs the backup program (internal/backup, the
// manager's backup and restore subcommands) against real PostgreSQL and
// MariaDB servers and real targets: a directory and a versitygw S3 server
// on loopback.
package backup_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/tests/utils/testservers"
)

func pgServer(p *testservers.Postgres) backup.Server {
	return backup.Server{Engine: dbv1.EnginePostgreSQL, Host: "127.0.0.1", Port: p.Port, User: "postgres", Password: p.Password}
}

func mariaServer(m *testservers.MariaDB) backup.Server {
	return backup.Server{Engine: dbv1.EngineMariaDB, Host: "127.0.0.1", Port: m.Port, User: "root", Password: testservers.MariaDBRootPassword}
}

// pgExec runs statements in one database of a PostgreSQL server.
func pgExec(t testing.TB, ctx context.Context, p *testservers.Postgres, database string, stmts ...string) {
	t.Helper()
	conn := pgConn(t, ctx, p, database)
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func pgConn(t testing.TB, ctx context.Context, p *testservers.Postgres, database string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s", p.Port, p.Password))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = database // any name, taken as it is
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// pgFingerprint is a table's row count and a digest of its content.
func pgFingerprint(t testing.TB, ctx context.Context, p *testservers.Postgres, database, table string) string {
	t.Helper()
	conn := pgConn(t, ctx, p, database)
	defer conn.Close(ctx)
	var n int64
	var sum *string
	err := conn.QueryRow(ctx, "SELECT count(*), md5(string_agg(id::text || ':' || note, ',' ORDER BY id)) FROM "+table).Scan(&n, &sum)
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d rows, md5 %v", n, deref(sum))
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// fillPostgres makes a server worth restoring: rows in the postgres
// database, a second database, and a login role with a password.
func fillPostgres(t testing.TB, ctx context.Context, p *testservers.Postgres, rows int) {
	t.Helper()
	pgExec(t, ctx, p, "postgres",
		"CREATE ROLE app LOGIN PASSWORD 'app-secret-1'",
		"CREATE TABLE orders (id int PRIMARY KEY, note text NOT NULL)",
		"INSERT INTO orders SELECT g, 'order ' || g || repeat('x', g % 50) FROM generate_series(1, "+strconv.Itoa(rows)+") g",
		"CREATE DATABASE shop OWNER app",
	)
	pgExec(t, ctx, p, "shop",
		"CREATE TABLE items (id int PRIMARY KEY, note text NOT NULL)",
		"ALTER TABLE items OWNER TO app",
		"INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 500) g",
	)
}

func mariaDB(t testing.TB, ctx context.Context, m *testservers.MariaDB) *sql.DB {
	t.Helper()
	db, err := m.DB(ctx, "root", testservers.MariaDBRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func mariaExec(t testing.TB, ctx context.Context, m *testservers.MariaDB, stmts ...string) {
	t.Helper()
	db := mariaDB(t, ctx, m)
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func mariaFingerprint(t testing.TB, ctx context.Context, m *testservers.MariaDB, table string) string {
	t.Helper()
	db := mariaDB(t, ctx, m)
	defer db.Close()
	var n int64
	var sum sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), SUM(CRC32(CONCAT(id, ':', note))) FROM "+table).Scan(&n, &sum); err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d rows, crc sum %d", n, sum.Int64)
}

// fillMariaDB makes a schema with rows (and a routine, which the dump carries).
func fillMariaDB(t testing.TB, ctx context.Context, m *testservers.MariaDB, rows int) {
	t.Helper()
	mariaExec(t, ctx, m,
		"CREATE DATABASE IF NOT EXISTS shop",
		"CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(200) NOT NULL)",
		"CREATE PROCEDURE shop.count_orders() SELECT COUNT(*) FROM shop.orders",
	)
	db := mariaDB(t, ctx, m)
	defer db.Close()
	for start := 1; start <= rows; start += 1000 {
		stmt := "INSERT INTO shop.orders VALUES "
		for i := start; i < start+1000 && i <= rows; i++ {
			if i > start {
				stmt += ","
			}
			stmt += fmt.Sprintf("(%d, 'order %d %s')", i, i, string(make([]byte, 0)))
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// s3Store opens the test S3 server's bucket.
func s3Store(t testing.TB, ctx context.Context, s *testservers.S3Server, secret string) storage.Store {
	t.Helper()
	st, err := storage.NewS3(ctx, storage.S3Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: "team-a", ForcePathStyle: true,
		AccessKeyID: s.AccessKey, SecretAccessKey: secret, CA: s.CA})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func clock(t time.Time) func() time.Time { return func() time.Time { return t } }

func itoa(i int) string { return strconv.Itoa(i) }

func waitFor(t testing.TB, ctx context.Context, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatal("timed out")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mountTmpfs mounts a tmpfs of the given size on dir (root only); false
// when it cannot.
func mountTmpfs(t testing.TB, dir, size string) bool {
	if os.Geteuid() != 0 {
		return false
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return true
}
