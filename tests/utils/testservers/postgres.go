package testservers

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// Postgres is a PostgreSQL server (Debian's, version 15) on 127.0.0.1,
// started by the chart's postgres-start.sh as a pod's container would be:
// the script initializes a primary, clones a replica, or rewinds a former
// primary, then execs postgres.
type Postgres struct {
	server
	Pod      string
	Password string
	bin      string
	user     *user.User
	topo     *Topology
	opts     PostgresOptions
}

// PostgresOptions are what StartPostgresWith adds to a server's start.
type PostgresOptions struct {
	// Settings ("name = 'value'") are added to the configuration file.
	Settings []string
	// Env is added to the start script's environment (the agent's
	// AGENT_LOG_PIPES, say).
	Env []string
	// AddressSpace, when set, bounds the server's address space (bytes).
	AddressSpace int64
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

// GiveToPostgres makes paths the servers' account's, when the tests run as
// root (and the servers as postgres): files a test makes for a server.
func GiveToPostgres(t testing.TB, paths ...string) {
	t.Helper()
	u := pgUser(t)
	if u == nil {
		return
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
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

// StartPostgresCluster starts instance 0 of a Database called name as the
// primary and n-1 more as its streaming replicas, each through the start
// script, sharing one topology.
func StartPostgresCluster(t testing.TB, name string, n int) []*Postgres {
	t.Helper()
	topo := NewTopology(t)
	out := make([]*Postgres, n)
	for i := range out {
		out[i] = StartPostgres(t, topo, podName(name, i))
	}
	return out
}

// StartPostgresPrimary starts a new primary ("pg-0") with its own topology.
func StartPostgresPrimary(t testing.TB) *Postgres {
	return StartPostgres(t, NewTopology(t), "pg-0")
}

// StartReplica starts the next instance of this server's topology: its
// start script clones the primary and streams from it.
func (p *Postgres) StartReplica(t testing.TB) *Postgres {
	return StartPostgres(t, p.topo, podName(databaseName(p.Pod), len(p.topo.Ports())))
}

// StartPostgres starts the instance pod of topo on a new port and data
// directory, and waits until it takes connections.
func StartPostgres(t testing.TB, topo *Topology, pod string) *Postgres {
	t.Helper()
	return StartPostgresWith(t, topo, pod, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with opts.
func StartPostgresWith(t testing.TB, topo *Topology, pod string, opts PostgresOptions) *Postgres {
	t.Helper()
	p := newPostgres(t, topo, pod, opts)
	p.startServer(t)
	return p
}

// StartPostgresFailing starts the instance pod of topo as StartPostgresWith
// does but waits for nothing: the server is expected to fail (ExitLog).
func StartPostgresFailing(t testing.TB, topo *Topology, pod string, opts PostgresOptions) *Postgres {
	t.Helper()
	p := newPostgres(t, topo, pod, opts)
	p.launch(t)
	return p
}

func newPostgres(t testing.TB, topo *Topology, pod string, opts PostgresOptions) *Postgres {
	p := &Postgres{Pod: pod, bin: pgBin(t), user: pgUser(t), Password: PostgresPassword, topo: topo, opts: opts}
	p.Dir = scratchDir(t, p.user)
	p.Port = freePort(t)
	p.addressSpace = opts.AddressSpace
	topo.register(pod, p.Port)
	return p
}

// Stop shuts the server down fast (SIGINT: sessions are ended, not awaited).
func (p *Postgres) Stop() { p.stop(syscall.SIGINT) }

// Topology is the topology this server's start script reads.
func (p *Postgres) Topology() *Topology { return p.topo }

// Data is the data directory (PGDATA).
func (p *Postgres) Data() string { return filepath.Join(p.Dir, "data") }

// Restart starts a stopped or killed server again on its port, through the
// start script, as a restarted pod would.
func (p *Postgres) Restart(t testing.TB) { p.startServer(t) }

// RestartFailing starts a stopped server again, waiting for nothing: it
// is expected to fail (ExitLog).
func (p *Postgres) RestartFailing(t testing.TB) { p.launch(t) }

func (p *Postgres) startServer(t testing.TB) {
	t.Helper()
	p.launch(t)
	waitUntil(t, &p.server, "PostgreSQL "+p.Pod, 60*time.Second, func() error {
		c, err := p.Connect(context.Background())
		if err == nil {
			c.Close(context.Background())
		}
		return err
	})
}

// launch starts the start script, which starts the server.
func (p *Postgres) launch(t testing.TB) {
	t.Helper()
	script := StartScript(t, p.Dir, "postgres-start.sh")
	env := append(p.topo.env(p.Pod),
		"PATH="+p.bin+":"+os.Getenv("PATH"), "PGDATA="+p.Data(),
		"POSTGRES_USER=postgres", "POSTGRES_PASSWORD="+p.Password,
		"INITDB_EXTRA_ARGS=--no-sync", "BASEBACKUP_EXTRA_ARGS=--no-sync")
	env = append(env, replicationEnv()...)
	env = append(env, p.opts.Env...)
	// The settings are in a configuration file outside the data
	// directory, named by config_file as the chart's pod does: pg_rewind's
	// crash recovery reads it (with settings on the command line only, it
	// ran with wal_log_hints off and every rewind fell back to a clone).
	// The port goes on the command line, never into postgresql.conf:
	// pg_basebackup copies the configuration, and a clone would take it.
	conf := filepath.Join(p.Dir, "postgresql.conf")
	settings := strings.Join([]string{
		"listen_addresses = '127.0.0.1'", "unix_socket_directories = '" + p.Dir + "'",
		"wal_level = replica", "max_wal_senders = 10", "wal_log_hints = on",
		"wal_keep_size = '256MB'", "fsync = off", "shared_buffers = '32MB'",
		"hot_standby = on", "wal_receiver_status_interval = '1s'"}, "\n") + "\n"
	for _, line := range p.opts.Settings {
		settings += line + "\n"
	}
	if err := os.WriteFile(conf, []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start(t, p.user, env, "sh", script, "-p", strconv.Itoa(p.Port), "-c", "config_file="+conf)
	t.Cleanup(p.Stop)
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

// BaseBackup takes a base backup of the server (pg_basebackup, with the
// WAL it needs streamed along) into a new directory the servers' account
// owns, and returns that directory.
func (p *Postgres) BaseBackup(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(scratchDir(t, p.user), "base")
	cmd := exec.Command(filepath.Join(p.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres",
		"-D", dir, "-X", "stream", "-c", "fast", "--no-sync")
	asUser(cmd, p.user, filepath.Dir(dir))
	cmd.Env = append(cmd.Env, "PGPASSWORD="+p.Password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup of %s: %v\n%s", p.Pod, err, out)
	}
	return dir
}

// PostgresOnData makes pod, the primary of a new topology, on a copy of
// the data directory data (a base backup, say) with opts, without
// starting it (Restart starts it, RestartFailing when it should fail).
// recovery adds recovery.signal, for a recovery the settings in opts
// direct (restore_command, a recovery target).
func PostgresOnData(t testing.TB, pod, data string, recovery bool, opts PostgresOptions) *Postgres {
	t.Helper()
	topo := NewTopology(t)
	p := newPostgres(t, topo, pod, opts)
	topo.SetPrimary(t, pod)
	if out, err := exec.Command("cp", "-a", data, p.Data()).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v\n%s", data, err, out)
	}
	if p.user != nil {
		if out, err := exec.Command("chown", "-R", p.user.Uid+":"+p.user.Gid, p.Data()).CombinedOutput(); err != nil {
			t.Fatalf("giving %s to %s: %v\n%s", p.Data(), p.user.Username, err, out)
		}
	}
	if recovery {
		signal := filepath.Join(p.Data(), "recovery.signal")
		if err := os.WriteFile(signal, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		GiveToPostgres(t, signal)
	}
	return p
}

// PostgresCommand is a command run as the servers' account (when the
// tests run as root), with PostgreSQL's programs on its PATH: what a
// database pod's programs run as.
func PostgresCommand(t testing.TB, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	asUser(cmd, pgUser(t), dir)
	cmd.Env = append(cmd.Env, "PATH="+pgBin(t)+":"+os.Getenv("PATH"))
	return cmd
}
