package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// TestMariaDBMetrics scrapes the metrics of a real MariaDB primary and its
// replica, read with the monitoring account (PROCESS, BINLOG MONITOR,
// SLAVE MONITOR, performance_schema), and checks them against what the
// test does: rows written (the schema's size, the binary logs, the insert
// counters of SHOW GLOBAL STATUS), the replica's SQL thread stopped with
// writes on the primary (applying, lag in transactions and seconds), its
// IO thread stopped (streaming), a wrong password and a stopped server
// (up 0, at once).
func TestMariaDBMetrics(t *testing.T) {
	ctx := withTimeout(t, 2*time.Minute)
	primary := testservers.StartMariaDBPrimary(t)
	replica := primary.StartReplica(t)
	if err := primary.Instance(t).EnsureAccount(ctx, engine.Account{User: engine.MonitoringUser, Password: monitorPassword, Monitoring: true}); err != nil {
		t.Fatal(err)
	}
	pm := newAgentMetrics(t, "shop", dbv1.EngineMariaDB, primary.Port, primary.Data(), monitorPassword, 5*time.Second)
	rm := newAgentMetrics(t, "shop", dbv1.EngineMariaDB, replica.Port, replica.Data(), monitorPassword, time.Second)

	root, err := primary.DB(ctx, "root", testservers.MariaDBRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var version string
	var maxConns float64
	if err := root.QueryRowContext(ctx, "SELECT VERSION(), @@max_connections").Scan(&version, &maxConns); err != nil {
		t.Fatal(err)
	}
	exec := func(stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			if _, err := root.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	// processes_by_user is on only once kingpin's defaults are set.
	library := []string{"mysql_up", "mysql_global_status_commands_total", "mysql_global_variables_max_connections",
		"mysql_binlog_size_bytes", "mysql_info_schema_innodb_metrics_buffer_buffer_pool_reads_total", "mysql_info_schema_processlist_processes_by_user"}

	exec("CREATE DATABASE `my-shop`", "CREATE TABLE `my-shop`.orders (id int PRIMARY KEY, note varchar(255))")
	before := pm.scrape(t)
	before.checkCommon(t, dbv1.EngineMariaDB, version, maxConns, library...)
	if !before.is(1, "database_instance_is_primary") {
		t.Errorf("the primary's is_primary is not 1:\n%s", before.series())
	}
	for _, name := range []string{"database_replication_streaming", "database_replication_lag_seconds", "database_replication_lag_transactions", "database_postgres_xid_age"} {
		if _, ok := before.value(name); ok {
			t.Errorf("the primary has %s", name)
		}
	}
	rs := rm.eventually(t, "the replica streams, caught up", 20*time.Second, func(s scraped) bool {
		return s.is(1, "database_instance_up") && s.is(1, "database_replication_streaming") && s.is(0, "database_replication_lag_transactions")
	})
	rs.checkCommon(t, dbv1.EngineMariaDB, version, maxConns, append(library, "mysql_slave_status_slave_io_running")...)
	seenAll(t, []string{"database_replication_lag_bytes", "database_postgres_xid_age"}, before, rs)
	for name, want := range map[string]float64{"database_instance_is_primary": 0, "database_replication_applying": 1, "database_replication_lag_seconds": 0} {
		if !rs.is(want, name) {
			t.Errorf("replica: %s is not %v:\n%s", name, want, rs.series())
		}
	}
	if _, ok := rs.value("database_replication_lag_bytes"); ok {
		t.Error("a MariaDB replica has database_replication_lag_bytes")
	}

	// Rows written: ten INSERT statements (Com_insert), then 20000 rows of
	// 200 bytes: the schema (its name decoded from the file name
	// encoding, my@002dshop) and the binary logs grow by 4 MB.
	for i := range 10 {
		exec(fmt.Sprintf("INSERT INTO `my-shop`.orders VALUES (%d, 'one')", 100000+i))
	}
	exec("INSERT INTO `my-shop`.orders SELECT seq, REPEAT('x', 200) FROM `my-shop`.seq_1_to_20000")
	const written = 20000 * 200 // bytes of rows
	after := pm.scrape(t)
	if grew := after.must(t, "mysql_global_status_commands_total", "command", "insert") - before.must(t, "mysql_global_status_commands_total", "command", "insert"); grew < 10 {
		t.Errorf("Com_insert grew %v, want at least 10", grew)
	}
	if grew := after.must(t, "mysql_global_status_commands_total", "command", "insert_select") - before.must(t, "mysql_global_status_commands_total", "command", "insert_select"); grew < 1 {
		t.Errorf("Com_insert_select grew %v, want at least 1", grew)
	}
	if grew := after.must(t, "database_size_bytes", "datname", "my-shop") - before.must(t, "database_size_bytes", "datname", "my-shop"); grew < written {
		t.Errorf("database_size_bytes{datname=my-shop} grew %v bytes, want at least %d", grew, written)
	}
	if grew := after.must(t, "database_wal_bytes_total") - before.must(t, "database_wal_bytes_total"); grew < written {
		t.Errorf("database_wal_bytes_total grew %v bytes, want at least %d", grew, written)
	}
	for _, system := range []string{"mysql", "performance_schema", "sys", "information_schema"} {
		if _, ok := after.value("database_size_bytes", "datname", system); ok {
			t.Errorf("database_size_bytes lists the server's own schema %s", system)
		}
	}

	// The SQL thread stopped: the replica still receives, applies nothing,
	// and falls behind in transactions and seconds as the primary writes.
	rm.eventually(t, "caught up with the rows", 20*time.Second, func(s scraped) bool {
		return s.is(0, "database_replication_lag_transactions")
	})
	if err := replica.RootExec(ctx, "STOP SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	rm.eventually(t, "applying 0 with the SQL thread stopped", 10*time.Second, func(s scraped) bool {
		return s.is(0, "database_replication_applying") && s.is(1, "database_replication_streaming")
	})
	time.Sleep(1100 * time.Millisecond) // behind for more than a second
	for i := range 5 {
		exec(fmt.Sprintf("INSERT INTO `my-shop`.orders VALUES (%d, 'behind')", 200000+i))
	}
	lagging := rm.eventually(t, "5 transactions behind, for a second or more", 10*time.Second, func(s scraped) bool {
		sec, _ := s.value("database_replication_lag_seconds")
		return s.is(5, "database_replication_lag_transactions") && sec >= 1
	})
	t.Logf("SQL thread stopped: lag %v transactions, %v s", lagging.must(t, "database_replication_lag_transactions"), lagging.must(t, "database_replication_lag_seconds"))
	if err := replica.RootExec(ctx, "START SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	rm.eventually(t, "caught up once the SQL thread runs", 10*time.Second, func(s scraped) bool {
		return s.is(1, "database_replication_applying") && s.is(0, "database_replication_lag_transactions") && s.is(0, "database_replication_lag_seconds")
	})

	// The IO thread stopped: not streaming (still applying); and back.
	if err := replica.RootExec(ctx, "STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	rm.eventually(t, "streaming 0 with the IO thread stopped", 10*time.Second, func(s scraped) bool {
		return s.is(0, "database_replication_streaming") && s.is(1, "database_replication_applying")
	})
	if err := replica.RootExec(ctx, "START SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	rm.eventually(t, "streaming again", 10*time.Second, func(s scraped) bool { return s.is(1, "database_replication_streaming") })

	// A wrong password: up 0, and the password in no line of the log.
	wrong := newAgentMetrics(t, "shop", dbv1.EngineMariaDB, replica.Port, replica.Data(), monitorPassword+"-wrong", time.Second)
	denied := wrong.scrape(t)
	if !denied.is(0, "database_instance_up") || !denied.is(1, "database_last_scrape_error") {
		t.Errorf("with a wrong password:\n%s", denied.series())
	}
	if log := wrong.log.String(); strings.Contains(log, monitorPassword) || !strings.Contains(log, "Access denied") {
		t.Errorf("the log of a refused login should say so without the password:\n%s", log)
	}

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
