package testservers

import (
	"context"
	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a PostgreSQL server (Debian's, version 15) on 127.0.0.1.
type Postgres struct {
	server
	Password string
	bin      string
	user     *user.User
}

// PostgresPassword is the superuser's password in these test servers.
const PostgresPassword = "test-Password-1"

func pgBin(t testing.TB) string {
	t.Helper()
	for _, dir := range []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"} {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir
		}
	}
	return filepath.Dir(lookPath(t, []string{"postgres"}, "postgresql"))
}

func pgUser(t testing.TB) *user.User {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root needs the postgres user (package postgresql): %v", err)
	}
	return u
}

// StartPostgresPrimary initializes and starts a primary ready for streaming
// replication, with password (SCRAM) authentication everywhere.
func StartPostgresPrimary(t testing.TB) *Postgres {
	t.Helper()
	p := &Postgres{bin: pgBin(t), user: pgUser(t), Password: PostgresPassword}
	p.Dir = scratchDir(t, p.user)
	data := filepath.Join(p.Dir, "data")
	pwfile := filepath.Join(p.Dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(p.Password+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, p.user, p.Dir, nil, filepath.Join(p.bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=scram-sha-256", "--pwfile="+pwfile, "--no-sync", "-E", "UTF8", "--locale=C")
	p.startServer(t)
	return p
}

// StartReplica clones this server with pg_basebackup and starts the clone
// as a streaming standby of it.
func (p *Postgres) StartReplica(t testing.TB) *Postgres {
	t.Helper()
	r := &Postgres{bin: p.bin, user: p.user, Password: p.Password}
	r.Dir = scratchDir(t, r.user)
	run(t, r.user, r.Dir, []string{"PGPASSWORD=" + p.Password}, filepath.Join(r.bin, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres",
		"-D", filepath.Join(r.Dir, "data"), "-R", "-X", "stream", "-c", "fast", "--no-sync")
	r.startServer(t)
	return r
}

// Restart starts a stopped or killed server again on its port.
func (p *Postgres) Restart(t testing.TB) { p.startServer(t) }

func (p *Postgres) startServer(t testing.TB) {
	t.Helper()
	if p.Port == 0 {
		p.Port = freePort(t)
	}
	// The port goes on the command line, never into postgresql.conf:
	// pg_basebackup copies the configuration, and a clone would take it.
	p.start(t, p.user, filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.Dir, "data"), "-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.Dir,
		"-c", "wal_level=replica", "-c", "max_wal_senders=10", "-c", "wal_log_hints=on",
		"-c", "wal_keep_size=256MB", "-c", "fsync=off", "-c", "shared_buffers=32MB",
		"-c", "hot_standby=on", "-c", "wal_receiver_status_interval=1s")
	t.Cleanup(p.Stop)
	waitUntil(t, &p.server, "PostgreSQL", 30*time.Second, func() error {
		c, err := p.Connect(context.Background())
		if err == nil {
			c.Close(context.Background())
		}
		return err
	})
}

// Connect opens a superuser connection.
func (p *Postgres) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(p.Port), "postgres", p.Password, "postgres"
	cfg.ConnectTimeout = 2 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

// Exec runs one statement as the superuser in a new session.
func (p *Postgres) Exec(ctx context.Context, sql string) error {
	c, err := p.Connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// Count returns the number of rows in table, failing the test on error.
func (p *Postgres) Count(t testing.TB, table string) int {
	t.Helper()
	ctx := context.Background()
	c, err := p.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Instance opens the engine layer's view of this server as the superuser.
func (p *Postgres) Instance(t testing.TB) engine.Instance {
	return openInstance(t, dbv1.EnginePostgreSQL, p.Port, engine.Credentials{User: "postgres", Password: p.Password})
}
