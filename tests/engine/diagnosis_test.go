package engine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/database-operator/internal/diagnosis"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// TestCrashCausesFromRealServers: the probable cause the operator reads
// from a crashed container's last log lines (internal/diagnosis), each
// from a real server failing for that cause, with its start script's lines
// around it as a container's log holds them: out of memory, a wrong
// replication password (PostgreSQL's clone refused; a MariaDB replica
// keeps running and reports it), and for PostgreSQL a full
// volume, read from its JSON log as the agent relays it. (The corrupt data
// directories, an unknown setting and a version downgrade fail real pods:
// tests/e2e diagnosis_test.go.)
func TestCrashCausesFromRealServers(t *testing.T) {
	check := func(t *testing.T, log string, want diagnosis.Cause, evidence string) {
		t.Helper()
		got, ev := diagnosis.Classify(log, "")
		if got != want || !strings.Contains(ev, evidence) {
			t.Fatalf("cause %s (%q), want %s (%q); the log:\n%s", got, ev, want, evidence, log)
		}
		t.Logf("%s: %s", got, ev)
	}
	const exitWithin = 90 * time.Second
	// The servers asked for more memory than they may have run under this
	// address-space bound (a container's memory limit, in effect), so they
	// fail whatever the host's overcommit policy.
	const memoryLimit = 4 << 30

	t.Run("postgres out of memory", func(t *testing.T) {
		t.Parallel()
		// More shared memory than the server may have: the mapping fails.
		pg := testservers.StartPostgresFailing(t, testservers.NewTopology(t), "pg-0",
			testservers.PostgresOptions{Settings: []string{"shared_buffers = '8GB'"}, AddressSpace: memoryLimit})
		check(t, pg.ExitLog(t, exitWithin), diagnosis.OutOfMemory, "could not map anonymous shared memory")
	})

	t.Run("postgres wrong replication password", func(t *testing.T) {
		t.Parallel()
		primary := testservers.StartPostgresPrimary(t)
		if err := primary.Exec(context.Background(), "ALTER ROLE "+engine.ReplicationUser+" PASSWORD 'not-the-one-replicas-have'"); err != nil {
			t.Fatal(err)
		}
		replica := testservers.StartPostgresFailing(t, primary.Topology(), "pg-1", testservers.PostgresOptions{})
		check(t, replica.ExitLog(t, exitWithin), diagnosis.AuthenticationFailed, "password authentication failed")
	})

	t.Run("postgres volume full", func(t *testing.T) {
		t.Parallel()
		testPostgresVolumeFull(t, check)
	})

	t.Run("mariadb out of memory", func(t *testing.T) {
		t.Parallel()
		m := testservers.StartMariaDBFailing(t, testservers.NewTopology(t), "maria-0",
			testservers.MariaDBOptions{Args: []string{"--innodb-buffer-pool-size=8G"}, AddressSpace: memoryLimit})
		check(t, m.ExitLog(t, exitWithin), diagnosis.OutOfMemory, "innodb_buffer_pool")
	})

	t.Run("mariadb wrong replication password", func(t *testing.T) {
		t.Parallel()
		// A MariaDB replica refused by its primary does not crash: it runs,
		// its I/O thread retrying, and the replication error it reports
		// is what status.instances and ReplicationHealthy show. Its log
		// still names the cause, should it crash.
		primary := testservers.StartMariaDBPrimary(t)
		if err := primary.RootExec(context.Background(), "ALTER USER '"+engine.ReplicationUser+"'@'%' IDENTIFIED BY 'not-the-one-replicas-have'"); err != nil {
			t.Fatal(err)
		}
		replica := primary.StartReplica(t)
		inst := replica.Instance(t)
		var st engine.Status
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(st.ReplicationError, "Access denied") {
			if time.Now().After(deadline) {
				t.Fatalf("no replication error reported in 30 s: %+v", st)
			}
			time.Sleep(200 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, _ = inst.Status(ctx)
			cancel()
		}
		t.Logf("the replica reports: %s", st.ReplicationError)
		check(t, replica.Log(), diagnosis.AuthenticationFailed, "Access denied")
	})
}

// testPostgresVolumeFull fills the volume under a primary's WAL while it
// takes writes: it cannot make the next WAL segment and stops (PANIC; a
// pod's server restarts, and fails the same way). Its JSON log, relayed
// as the agent relays it, holds the cause.
func testPostgresVolumeFull(t *testing.T, check func(*testing.T, string, diagnosis.Cause, string)) {
	if os.Geteuid() != 0 {
		t.Fatal("a small volume needs a tmpfs mount: run as root (make test-integration does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	relay := relayPostgresLog(t)
	// A small volume for pg_wal: 40 MiB, two and a half segments.
	wal, err := os.MkdirTemp("", "dbop-wal-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=40m,mode=0700", "tmpfs", wal).CombinedOutput(); err != nil {
		t.Fatalf("mounting a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { // after the server's own cleanup: registered first
		_ = exec.Command("umount", "-l", wal).Run()
		_ = os.Remove(wal)
	})
	opts := relay.options()
	opts.Settings = []string{"restart_after_crash = off"}
	pg := testservers.StartPostgresWith(t, testservers.NewTopology(t), "pg-0", opts)
	pg.Stop()
	pgWAL := filepath.Join(pg.Data(), "pg_wal")
	if out, err := exec.Command("sh", "-c", `cp -a "$1"/. "$2"/ && rm -rf "$1" && ln -s "$2" "$1" && chown -R --reference="$3" "$2"`,
		"sh", pgWAL, wal, pg.Data()).CombinedOutput(); err != nil {
		t.Fatalf("moving pg_wal onto the small volume: %v: %s", err, out)
	}
	pg.Restart(t)

	c, err := pg.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE TABLE fill (b text)"); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		// 4 MiB of WAL a statement (uncompressible, not TOASTed away).
		_, err := c.Exec(ctx, "INSERT INTO fill SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 1000) g, generate_series(1, 128) h GROUP BY h")
		if err != nil {
			t.Logf("write %d failed: %v", i, err)
			break
		}
		if i > 100 {
			t.Fatal("400 MiB of WAL written onto a 40 MiB volume")
		}
	}
	pg.ExitLog(t, 90*time.Second) // restart_after_crash = off: the server stops
	relay.Drain(5 * time.Second)  // as the agent does once its server is gone
	// Read as the plain log would say it: severity, then the message.
	check(t, relay.out.String(), diagnosis.DiskFull, "PANIC:  could not write to file")
	if !strings.HasPrefix(strings.TrimSpace(relay.out.String()), "{") {
		t.Errorf("the relayed log is not JSON:\n%s", relay.out.String())
	}
}
