package metrics

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresMetrics scrapes the metrics of a real PostgreSQL primary and
// its streaming replica, read with the monitoring account (pg_monitor),
// and checks them against what the test does: rows written (sizes, WAL,
// pg_stat_database), replay paused with writes on the primary (applying,
// lag in bytes and seconds), the replica's receiver pointed nowhere
// (streaming), the replica's server hung (the scrape still answers, in
// time) and stopped (up 0, at once).
func TestPostgresMetrics(t *testing.T) {
	ctx := withTimeout(t, 2*time.Minute)
	primary := testservers.StartPostgresPrimary(t)
	replica := primary.StartReplica(t)
	if err := primary.Instance(t).EnsureAccount(ctx, engine.Account{User: engine.MonitoringUser, Password: monitorPassword, Monitoring: true}); err != nil {
		t.Fatal(err)
	}
	pm := newAgentMetrics(t, "orders", dbv1.EnginePostgreSQL, primary.Port, primary.Data(), monitorPassword, 5*time.Second)
	rm := newAgentMetrics(t, "orders", dbv1.EnginePostgreSQL, replica.Port, replica.Data(), monitorPassword, time.Second)

	c, err := primary.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var version string
	var maxConns float64
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('max_connections')::float8").Scan(&version, &maxConns); err != nil {
		t.Fatal(err)
	}
	library := []string{"pg_stat_database_tup_inserted", "pg_database_size_bytes", "pg_stat_bgwriter_buffers_alloc_total", "pg_wal_size_bytes", "pg_postmaster_start_time_seconds"}

	before := pm.scrape(t)
	before.checkCommon(t, dbv1.EnginePostgreSQL, version, maxConns, library...)
	if !before.is(1, "database_instance_is_primary") {
		t.Errorf("the primary's is_primary is not 1:\n%s", before.series())
	}
	for _, name := range []string{"database_replication_streaming", "database_replication_lag_seconds", "database_replication_lag_bytes"} {
		if _, ok := before.value(name); ok {
			t.Errorf("the primary has the replica's series %s", name)
		}
	}
	if v := before.must(t, "database_postgres_xid_age"); v <= 0 {
		t.Errorf("database_postgres_xid_age %v, want > 0", v)
	}
	// The replica streams (its account came by replication), applies and is not behind.
	rs := rm.eventually(t, "the replica streams, caught up", 20*time.Second, func(s scraped) bool {
		return s.is(1, "database_instance_up") && s.is(1, "database_replication_streaming") && s.is(0, "database_replication_lag_bytes")
	})
	rs.checkCommon(t, dbv1.EnginePostgreSQL, version, maxConns, library...)
	seenAll(t, []string{"database_replication_lag_transactions"}, before, rs)
	for name, want := range map[string]float64{"database_instance_is_primary": 0, "database_replication_applying": 1, "database_replication_lag_seconds": 0} {
		if !rs.is(want, name) {
			t.Errorf("replica: %s is not %v:\n%s", name, want, rs.series())
		}
	}
	if _, ok := rs.value("database_replication_lag_transactions"); ok {
		t.Error("a PostgreSQL replica has database_replication_lag_transactions")
	}

	// Rows written: 4 MB more in the database, as much WAL, 20000 tuples inserted.
	if _, err := c.Exec(ctx, "CREATE TABLE orders (id int PRIMARY KEY, note text); INSERT INTO orders SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	const written = 20000 * 200 // bytes of rows
	inserted0 := before.must(t, "pg_stat_database_tup_inserted", "datname", "postgres")
	after := pm.eventually(t, "20000 tuples inserted (the statistics flush within a second or so)", 10*time.Second, func(s scraped) bool {
		v, _ := s.value("pg_stat_database_tup_inserted", "datname", "postgres")
		return v >= inserted0+20000
	})
	if grew := after.must(t, "database_size_bytes", "datname", "postgres") - before.must(t, "database_size_bytes", "datname", "postgres"); grew < written {
		t.Errorf("database_size_bytes{datname=postgres} grew %v bytes, want at least %d", grew, written)
	}
	if grew := after.must(t, "database_wal_bytes_total") - before.must(t, "database_wal_bytes_total"); grew < written {
		t.Errorf("database_wal_bytes_total grew %v bytes, want at least %d", grew, written)
	}
	if _, ok := after.value("database_size_bytes", "datname", "template1"); ok {
		t.Error("database_size_bytes lists a template")
	}

	// Replay paused: the replica still streams, does not apply, and falls
	// behind in bytes and seconds as the primary writes.
	if err := replica.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		t.Fatal(err)
	}
	rm.eventually(t, "applying 0 once replay is paused", 10*time.Second, func(s scraped) bool {
		return s.is(0, "database_replication_applying") && s.is(1, "database_replication_streaming")
	})
	if _, err := c.Exec(ctx, "INSERT INTO orders SELECT g, 'behind' FROM generate_series(20001, 21000) g"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // behind for more than a second
	lagging := rm.eventually(t, "lag in bytes and seconds while replay is paused", 10*time.Second, func(s scraped) bool {
		b, _ := s.value("database_replication_lag_bytes")
		sec, _ := s.value("database_replication_lag_seconds")
		return b > 0 && sec >= 1
	})
	t.Logf("replay paused: lag %v bytes, %v s", lagging.must(t, "database_replication_lag_bytes"), lagging.must(t, "database_replication_lag_seconds"))
	if err := replica.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	rm.eventually(t, "caught up once replay resumes", 10*time.Second, func(s scraped) bool {
		return s.is(1, "database_replication_applying") && s.is(0, "database_replication_lag_bytes") && s.is(0, "database_replication_lag_seconds")
	})

	// The receiver pointed at nowhere: not streaming; and back.
	rc, err := replica.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(ctx)
	var conninfo string
	if err := rc.QueryRow(ctx, "SHOW primary_conninfo").Scan(&conninfo); err != nil {
		t.Fatal(err)
	}
	setConninfo := func(v string) {
		t.Helper()
		if _, err := rc.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = '"+strings.ReplaceAll(v, "'", "''")+"'"); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	setConninfo("host=127.0.0.1 port=1 user=" + engine.ReplicationUser + " connect_timeout=1")
	rm.eventually(t, "streaming 0 with the receiver pointed nowhere", 20*time.Second, func(s scraped) bool {
		return s.is(0, "database_replication_streaming") && s.is(1, "database_instance_up")
	})
	setConninfo(conninfo)
	rm.eventually(t, "streaming again", 20*time.Second, func(s scraped) bool { return s.is(1, "database_replication_streaming") })

	// The replica's server hung (the postmaster and every backend
	// stopped, as a stalled disk would leave them): the scrape still
	// answers within its deadline (1 s here), with up 0; and once the
	// server runs again, up 1.
	pids := serverPIDs(t, postmasterPID(t, replica.Data()))
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	signal(syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	for i := range 2 { // the second while the first's library collection may still wait
		hung := rm.scrape(t)
		if !hung.is(0, "database_instance_up") || !hung.is(1, "database_last_scrape_error") || hung.took > 3*time.Second {
			t.Errorf("scrape %d of a hung server took %s:\n%s", i+1, hung.took.Round(time.Millisecond), hung.series())
		}
		if _, ok := hung.value("database_volume_used_bytes"); !ok {
			t.Error("no volume figures while the server hangs")
		}
	}
	resume()
	rm.eventually(t, "up once the server runs again", 20*time.Second, func(s scraped) bool {
		return s.is(1, "database_instance_up") && s.is(0, "database_last_scrape_error")
	})

	// Stopped: up 0 at once, a successful scrape all the same.
	replica.Stop()
	down := rm.scrape(t)
	if !down.is(0, "database_instance_up") || !down.is(1, "database_last_scrape_error") || down.took > time.Second {
		t.Errorf("scrape of a stopped server (%s):\n%s", down.took.Round(time.Millisecond), down.series())
	}
	for _, name := range []string{"database_instance_is_primary", "database_replication_streaming", "database_connections"} {
		if _, ok := down.value(name); ok {
			t.Errorf("a stopped server has %s", name)
		}
	}
}

// postmasterPID is the first line of postmaster.pid: the postmaster, whose
// process group holds the server's processes.
func postmasterPID(t *testing.T, data string) int {
	t.Helper()
	b, err := os.ReadFile(data + "/postmaster.pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// serverPIDs is the postmaster pid and its children (each backend is in a
// process group of its own).
func serverPIDs(t *testing.T, pid int) []int {
	t.Helper()
	pids := []int{pid}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			pids = append(pids, child)
		}
	}
	return pids
}
