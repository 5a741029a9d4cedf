package backup_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresBackupRestore backs a PostgreSQL replica up to a directory
// and to S3, restores each into a fresh server, and compares the data, the
// second database and the application role; the fresh server keeps its own
// superuser password.
func TestPostgresBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary := testservers.StartPostgresPrimary(t)
	fillPostgres(t, ctx, primary, 20000)
	replica := primary.StartReplica(t)
	want := pgFingerprint(t, ctx, primary, "postgres", "orders")
	wantShop := pgFingerprint(t, ctx, primary, "shop", "items")
	waitFor(t, ctx, func() bool { return pgFingerprint(t, ctx, replica, "shop", "items") == wantShop })

	s3 := testservers.StartS3(t, testservers.S3TLS())
	targets := map[string]storage.Store{"dir": storage.NewDir(t.TempDir()), "s3": s3Store(t, ctx, s3, s3.SecretKey)}
	for name, store := range targets {
		t.Run(name, func(t *testing.T) {
			m, pruned, err := backup.Run(ctx, backup.Options{Server: pgServer(replica), Store: store,
				Namespace: "prod", Database: "orders", Name: "orders-1", Instance: "orders-1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(pruned.Backups) != 0 {
				t.Errorf("pruned %v without retention", pruned)
			}
			if m.Position == "" || !strings.Contains(m.Position, "/") || !strings.HasPrefix(m.Version, "15") {
				t.Errorf("manifest position %q version %q", m.Position, m.Version)
			}
			var dbs []string
			for _, f := range m.Files {
				dbs = append(dbs, f.Database)
			}
			if got := strings.Join(dbs, ","); got != ",postgres,shop" {
				t.Errorf("files hold databases %q, want globals, postgres, shop", got)
			}
			if m.Size() < 100<<10 || !strings.HasPrefix(m.Checksum(), "sha256:") {
				t.Errorf("size %d checksum %s", m.Size(), m.Checksum())
			}

			// Restored into a primary that already has a streaming replica:
			// the replica gets the data too.
			fresh := testservers.StartPostgresPrimary(t)
			freshReplica := fresh.StartReplica(t)
			got, err := backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(fresh), Store: store,
				Path: backup.Path("prod", "orders", "orders-1"), Scratch: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if got.Checksum() != m.Checksum() {
				t.Errorf("restored manifest checksum %s, backup %s", got.Checksum(), m.Checksum())
			}
			if f := pgFingerprint(t, ctx, fresh, "postgres", "orders"); f != want {
				t.Errorf("restored orders: %s, want %s", f, want)
			}
			if f := pgFingerprint(t, ctx, fresh, "shop", "items"); f != wantShop {
				t.Errorf("restored shop.items: %s, want %s", f, wantShop)
			}
			waitFor(t, ctx, func() bool { return pgFingerprint(t, ctx, freshReplica, "postgres", "orders") == want })
			// The application role came back with its password; the
			// superuser's password is still the fresh server's own.
			conn, err := pgx.Connect(ctx, "host=127.0.0.1 user=app password=app-secret-1 dbname=shop port="+itoa(fresh.Port))
			if err != nil {
				t.Fatalf("app role after restore: %v", err)
			}
			conn.Close(ctx)
			pgExec(t, ctx, fresh, "postgres", "SELECT 1")
		})
	}
}

// TestMariaDBBackupRestore backs a MariaDB replica up (consistent dump with
// its GTID position) to a directory and to S3 and restores each into a
// fresh server.
func TestMariaDBBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := testservers.StartMariaDBCluster(t, "shop", 2)
	primary, replica := servers[0], servers[1]
	fillMariaDB(t, ctx, primary, 20000)
	// An application account with a role and grants: restored with the data.
	mariaExec(t, ctx, primary, "CREATE USER 'shopper'@'%' IDENTIFIED BY 'shopper-pw-1'", "CREATE ROLE reader",
		"GRANT SELECT ON shop.* TO reader", "GRANT reader TO 'shopper'@'%'", "SET DEFAULT ROLE reader FOR 'shopper'@'%'", "GRANT INSERT ON shop.* TO 'shopper'@'%'")
	want := mariaFingerprint(t, ctx, primary, "shop.orders")
	waitFor(t, ctx, func() bool { return mariaFingerprint(t, ctx, replica, "shop.orders") == want })

	s3 := testservers.StartS3(t)
	targets := map[string]storage.Store{"dir": storage.NewDir(t.TempDir()), "s3": s3Store(t, ctx, s3, s3.SecretKey)}
	for name, store := range targets {
		t.Run(name, func(t *testing.T) {
			m, _, err := backup.Run(ctx, backup.Options{Server: mariaServer(replica), Store: store,
				Namespace: "prod", Database: "shop", Name: "shop-1"})
			if err != nil {
				t.Fatal(err)
			}
			// The dump's own GTID position, domain-server-sequence.
			if parts := strings.Split(m.Position, "-"); len(parts) != 3 || !strings.Contains(m.Version, "MariaDB") {
				t.Errorf("position %q version %q", m.Position, m.Version)
			}
			// Restored into a primary with a replica: the replica gets the data too.
			pair := testservers.StartMariaDBCluster(t, "copy-"+name, 2)
			fresh := pair[0]
			if _, err := backup.Restore(ctx, backup.RestoreOptions{Server: mariaServer(fresh), Store: store,
				Path: backup.Path("prod", "shop", "shop-1"), Scratch: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			if f := mariaFingerprint(t, ctx, fresh, "shop.orders"); f != want {
				t.Errorf("restored: %s, want %s", f, want)
			}
			mariaExec(t, ctx, fresh, "CALL shop.count_orders()")
			waitFor(t, ctx, func() bool { return mariaFingerprint(t, ctx, pair[1], "shop.orders") == want })
			// The account logs in with its own password and has its grants.
			db, err := fresh.DB(ctx, "shopper", "shopper-pw-1")
			if err != nil {
				t.Fatalf("restored account: %v", err)
			}
			defer db.Close()
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM shop.orders").Scan(&n); err != nil || n != 20000 {
				t.Errorf("restored account reads %d rows: %v", n, err)
			}
			if _, err := db.ExecContext(ctx, "DELETE FROM shop.orders"); err == nil {
				t.Error("the restored account got more privileges than it had")
			}
			// The superuser keeps the fresh server's password.
			if _, err := fresh.DB(ctx, "root", testservers.MariaDBRootPassword); err != nil {
				t.Errorf("root after restore: %v", err)
			}
		})
	}
}

// TestRestoreRefusesCorruptBackup flips one byte of a dump: the restore
// fails with BackupCorrupt before loading anything, and leaves the backup
// as it was.
func TestRestoreRefusesCorruptBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testservers.StartPostgresPrimary(t)
	fillPostgres(t, ctx, primary, 1000)
	root := t.TempDir()
	store := storage.NewDir(root)
	m, _, err := backup.Run(ctx, backup.Options{Server: pgServer(primary), Store: store, Namespace: "ns", Database: "db", Name: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "ns", "db", "b1", m.Files[len(m.Files)-1].Name)
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}

	fresh := testservers.StartPostgresPrimary(t)
	_, err = backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(fresh), Store: store, Path: "ns/db/b1", Scratch: t.TempDir()})
	if backup.ReasonOf(err) != backup.ReasonCorrupt || !strings.Contains(err.Error(), "nothing was restored") {
		t.Fatalf("restore of a corrupt backup: %v (reason %s)", err, backup.ReasonOf(err))
	}
	// Nothing was loaded, not even the globals (which come first).
	conn := pgConn(t, ctx, fresh, "postgres")
	defer conn.Close(ctx)
	var roles, dbs int
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = 'app'), (SELECT count(*) FROM pg_database WHERE datname = 'shop')").Scan(&roles, &dbs); err != nil {
		t.Fatal(err)
	}
	if roles != 0 || dbs != 0 {
		t.Errorf("a refused restore loaded data: app role %d, shop database %d", roles, dbs)
	}
	if after, _ := os.ReadFile(victim); string(after) != string(b) {
		t.Error("the restore changed the backup")
	}
	// A good backup is never loaded over data: the server it was taken
	// from is not empty.
	if _, _, err := backup.Run(ctx, backup.Options{Server: pgServer(primary), Store: store, Namespace: "ns", Database: "db", Name: "b2"}); err != nil {
		t.Fatal(err)
	}
	before := pgFingerprint(t, ctx, primary, "postgres", "orders")
	pgExec(t, ctx, primary, "postgres", "INSERT INTO orders VALUES (1000001, 'written after the backup')")
	_, err = backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(primary), Store: store, Path: "ns/db/b2", Scratch: t.TempDir()})
	if backup.ReasonOf(err) != backup.ReasonNotEmpty {
		t.Fatalf("restore into a server with data: %v", err)
	}
	if after := pgFingerprint(t, ctx, primary, "postgres", "orders"); after == before {
		t.Error("the refused restore rolled the data back")
	}
	// A missing file is refused the same way.
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	_, err = backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(fresh), Store: store, Path: "ns/db/b1", Scratch: t.TempDir()})
	if backup.ReasonOf(err) != backup.ReasonCorrupt || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("restore of an incomplete backup: %v", err)
	}
	// And a path with no backup says so.
	_, err = backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(fresh), Store: store, Path: "ns/db/nope", Scratch: t.TempDir()})
	if backup.ReasonOf(err) != backup.ReasonInvalid || !strings.Contains(err.Error(), "manifest is missing") {
		t.Fatalf("restore of no backup: %v", err)
	}
}

// TestRetention takes five backups a day apart: keepLast 3 keeps the newest
// three; then maxAge 2d prunes what is older; a failed backup prunes
// nothing; backups of an earlier Database of the same name are left alone.
func TestRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := testservers.StartMariaDBPrimary(t)
	fillMariaDB(t, ctx, m, 10)
	root := t.TempDir()
	store := storage.NewDir(root)
	day0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	take := func(name string, day int, r backup.Retention, srv backup.Server) ([]string, error) {
		_, pruned, err := backup.Run(ctx, backup.Options{Server: srv, Store: store, Namespace: "ns", Database: "db", DatabaseUID: "uid-1", Name: name,
			DatabaseCreated: day0.Add(-time.Hour), Retention: r, Now: clock(day0.Add(time.Duration(day) * 24 * time.Hour))})
		return pruned.Backups, err
	}
	// An earlier Database of the same name (this one may have been restored
	// from it), and a backup an older version wrote before this Database
	// was created: old, but never the new Database's to count or delete.
	// One an older version wrote after it was created (before an upgrade)
	// is its own.
	for name, at := range map[string]struct {
		uid  string
		when time.Time
	}{"a0": {"uid-0", day0.Add(-30 * 24 * time.Hour)}, "a1": {"", day0.Add(-30 * 24 * time.Hour)}, "l1": {"", day0.Add(-30 * time.Minute)}} {
		if _, _, err := backup.Run(ctx, backup.Options{Server: mariaServer(m), Store: store, Namespace: "ns", Database: "db", DatabaseUID: at.uid, Name: name,
			Now: clock(at.when)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"b1", "b2", "b3", "b4"} {
		if _, err := take(name, i, backup.Retention{}, mariaServer(m)); err != nil {
			t.Fatal(err)
		}
	}
	// A Backup name used again never touches the backup of that name.
	if _, err := take("b2", 9, backup.Retention{}, mariaServer(m)); backup.ReasonOf(err) != backup.ReasonInvalid || !strings.Contains(err.Error(), "already holds a backup") {
		t.Fatalf("a reused name: %v", err)
	}
	if _, err := backup.ReadManifest(ctx, store, "ns/db/b2"); err != nil {
		t.Fatalf("the existing backup after a reused name: %v", err)
	}
	// A backup of another Database at the same target is never touched.
	if _, _, err := backup.Run(ctx, backup.Options{Server: mariaServer(m), Store: store, Namespace: "ns", Database: "other", Name: "o1", Now: clock(day0)}); err != nil {
		t.Fatal(err)
	}
	pruned, err := take("b5", 4, backup.Retention{KeepLast: 3}, mariaServer(m))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pruned, ","); got != "b2,b1,l1" {
		t.Errorf("keepLast 3 pruned %q, want b2,b1,l1", got)
	}
	if got := backups(t, root, "db"); got != "a0,a1,b3,b4,b5" {
		t.Errorf("left %q", got)
	}
	// A failed backup (the server is gone) prunes nothing, however old.
	bad := mariaServer(m)
	bad.Port = 1
	if _, err := take("b6", 30, backup.Retention{KeepLast: 1, MaxAge: time.Hour}, bad); backup.ReasonOf(err) != backup.ReasonDatabaseUnreachable {
		t.Fatalf("backup of an unreachable server: %v", err)
	}
	if got := backups(t, root, "db"); got != "a0,a1,b3,b4,b5" {
		t.Errorf("after a failed backup: %q", got)
	}
	// maxAge 2d on day 6 keeps b5 (2 days old) and the new b7.
	pruned, err = take("b7", 6, backup.Retention{MaxAge: 48 * time.Hour}, mariaServer(m))
	if err != nil {
		t.Fatal(err)
	}
	if got := backups(t, root, "db"); got != "a0,a1,b5,b7" || len(pruned) != 2 {
		t.Errorf("maxAge 2d left %q, pruned %v", got, pruned)
	}
	if got := backups(t, root, "other"); got != "o1" {
		t.Errorf("another Database's backups: %q", got)
	}
}

// backups lists the backup directories of a Database at a directory target.
func backups(t *testing.T, root, database string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "ns", database))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// TestBackupFailures: each way a backup fails ends in an error with its
// reason, and leaves nothing at the target that could pass for a backup.
func TestBackupFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testservers.StartPostgresPrimary(t)
	fillPostgres(t, ctx, primary, 50000)
	s3 := testservers.StartS3(t)

	wrongPassword := pgServer(primary)
	wrongPassword.Password = "not-the-password"
	unreachable := pgServer(primary)
	unreachable.Port = 1
	full := t.TempDir()
	tinyFS := mountTmpfs(t, full, "256k")

	cases := []struct {
		name   string
		server backup.Server
		store  storage.Store
		reason string
		says   string
	}{
		{"wrong S3 credentials", pgServer(primary), s3Store(t, ctx, s3, "wrong-secret"), backup.ReasonTargetFailed, "access denied"},
		{"unreachable database", unreachable, storage.NewDir(t.TempDir()), backup.ReasonDatabaseUnreachable, "127.0.0.1:1"},
		{"wrong database password", wrongPassword, storage.NewDir(t.TempDir()), backup.ReasonDatabaseUnreachable, "password authentication failed"},
		{"full target", pgServer(primary), storage.NewDir(full), backup.ReasonTargetFailed, "no space left"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.store == nil || (c.name == "full target" && !tinyFS) {
				t.Skip("needs root to mount a small tmpfs")
			}
			m, _, err := backup.Run(ctx, backup.Options{Server: c.server, Store: c.store, Namespace: "ns", Database: "db", Name: "b"})
			if err == nil || m != nil {
				t.Fatal("backup succeeded")
			}
			if backup.ReasonOf(err) != c.reason || !strings.Contains(strings.ToLower(err.Error()), c.says) {
				t.Fatalf("got %s: %v; want %s saying %q", backup.ReasonOf(err), err, c.reason, c.says)
			}
			if keys, lerr := c.store.List(ctx, "ns/"); lerr == nil && len(keys) > 0 {
				t.Errorf("a failed backup left %v", keys)
			}
			var be *backup.Error
			if !errors.As(err, &be) {
				t.Errorf("error %T carries no reason", err)
			}
		})
	}
}

// TestDumpNamesAreNotOptions: a database or schema name is only ever a name.
// PostgreSQL: pg_dump parses a bare --dbname holding '=' as a connection
// string, so a database named "host=... port=..." would send the dump's
// connection (and its password) to that address; here a listener stands
// there and must see nothing. MariaDB: a schema named "--no-data" after
// --databases would be read as the option, and the backup would complete
// without the data. Both backups are restored and compared.
func TestDumpNamesAreNotOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("postgresql", func(t *testing.T) {
		elsewhere, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer elsewhere.Close()
		contacted := make(chan struct{}, 1)
		go func() {
			for {
				c, err := elsewhere.Accept()
				if err != nil {
					return
				}
				c.Close()
				select {
				case contacted <- struct{}{}:
				default:
				}
			}
		}()
		redirect := "host=127.0.0.1 port=" + itoa(elsewhere.Addr().(*net.TCPAddr).Port) + " dbname=postgres"
		quoted := `o'brien\db`
		primary := testservers.StartPostgresPrimary(t)
		for _, name := range []string{redirect, quoted} {
			pgExec(t, ctx, primary, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
			pgExec(t, ctx, primary, name, "CREATE TABLE kept (id int PRIMARY KEY, note text)",
				"INSERT INTO kept SELECT g, 'row ' || g FROM generate_series(1, 100) g")
		}
		want := pgFingerprint(t, ctx, primary, redirect, "kept")

		store := storage.NewDir(t.TempDir())
		if _, _, err := backup.Run(ctx, backup.Options{Server: pgServer(primary), Store: store, Namespace: "ns", Database: "db", Name: "b"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-contacted:
			t.Fatal("the dump connected to the address its database name spelled")
		default:
		}
		fresh := testservers.StartPostgresPrimary(t)
		if _, err := backup.Restore(ctx, backup.RestoreOptions{Server: pgServer(fresh), Store: store,
			Path: backup.Path("ns", "db", "b"), Scratch: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{redirect, quoted} {
			if got := pgFingerprint(t, ctx, fresh, name, "kept"); got != want {
				t.Errorf("database %q restored as %s, want %s", name, got, want)
			}
		}
	})

	t.Run("mariadb", func(t *testing.T) {
		primary := testservers.StartMariaDBCluster(t, "names", 1)[0]
		mariaExec(t, ctx, primary, "CREATE DATABASE `--no-data`",
			"CREATE TABLE `--no-data`.kept (id INT PRIMARY KEY, note TEXT)",
			"INSERT INTO `--no-data`.kept SELECT seq, CONCAT('row ', seq) FROM `--no-data`.seq_1_to_100")
		want := mariaFingerprint(t, ctx, primary, "`--no-data`.kept")
		store := storage.NewDir(t.TempDir())
		if _, _, err := backup.Run(ctx, backup.Options{Server: mariaServer(primary), Store: store, Namespace: "ns", Database: "db", Name: "b"}); err != nil {
			t.Fatal(err)
		}
		fresh := testservers.StartMariaDBCluster(t, "names-copy", 1)[0]
		if _, err := backup.Restore(ctx, backup.RestoreOptions{Server: mariaServer(fresh), Store: store,
			Path: backup.Path("ns", "db", "b"), Scratch: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		if got := mariaFingerprint(t, ctx, fresh, "`--no-data`.kept"); got != want {
			t.Errorf("schema --no-data restored as %s, want %s", got, want)
		}
	})
}
