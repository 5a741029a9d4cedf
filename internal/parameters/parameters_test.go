package parameters

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		engine, name, value string
		want                Class
		err                 string
	}{
		{"postgresql", "work_mem", "16MB", Reload, ""},
		{"postgresql", "shared_buffers", "128MB", Restart, ""},
		{"postgresql", "Work_Mem", "16MB", Reload, ""},
		{"postgresql", "port", "5433", "", "port is set by the operator (the pods' network and files)"},
		{"postgresql", "synchronous_commit", "off", "", "set by the operator (replication and failover)"},
		{"postgresql", "block_size", "8192", "", "block_size is fixed"},
		{"postgresql", "work-mem", "1MB", "", "work-mem is not a setting postgresql knows"},
		{"postgresql", "fsync", "off", "", "fsync = off is refused: off acknowledges commits the disk may not hold"},
		{"postgresql", "fsync", "on", Reload, ""},
		{"postgresql", "zero_damaged_pages", "on", "", "zero_damaged_pages = on is refused"},
		{"mariadb", "max-connections", "300", Reload, ""},
		{"mariadb", "innodb_autoinc_lock_mode", "2", Restart, ""},
		{"mariadb", "read-only", "ON", "", "read_only is set by the operator"},
		{"mariadb", "version", "x", "", "version is fixed"},
		{"mariadb", "skip-grant-tables", "ON", "", "skip_grant_tables is refused: it starts the server without authentication"},
		{"mariadb", "sync_binlog", "0", "", "sync_binlog = 0 is refused"},
		{"mariadb", "sync_binlog", "1", Reload, ""},
		{"mariadb", "slave_exec_mode", "IDEMPOTENT", "", "slave_exec_mode = IDEMPOTENT is refused"},
		{"mysql", "innodb_redo_log_capacity", "1G", Restart, ""},
		{"mysql", "log-bin", "x", "", "log_bin is set by the operator"},
		// MySQL's own names, which MariaDB's list lacks.
		{"mysql", "gtid_mode", "OFF", "", "gtid_mode is set by the operator (replication and failover)"},
		{"mysql", "enforce-gtid-consistency", "OFF", "", "enforce_gtid_consistency is set by the operator"},
		{"mysql", "super_read_only", "OFF", "", "super_read_only is set by the operator"},
		{"mysql", "replica_skip_errors", "all", "", "replica_skip_errors is refused: it makes replicas skip"},
		{"mysql", "innodb_flush_log_at_trx_commit", "2", "", "innodb_flush_log_at_trx_commit = 2 is refused"},
	} {
		got, err := Classify(tt.engine, tt.name, tt.value)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%s %s=%s: %q, %v; want %q", tt.engine, tt.name, tt.value, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s %s=%s: %v; want an error containing %q", tt.engine, tt.name, tt.value, err, tt.err)
		}
	}
}

// TestOwnedAreKnown: every setting the operator keeps for itself, and
// every one refused as unsafe, is one the server knows (a typo there would
// let the real one through).
func TestOwnedAreKnown(t *testing.T) {
	for engine, owned := range operatorOwned {
		if engine == "mysql" {
			continue // no table
		}
		table, err := Table(engine)
		if err != nil {
			t.Fatal(err)
		}
		for name := range owned {
			if _, ok := table[name]; !ok {
				t.Errorf("%s: the operator owns %s, which the server does not know", engine, name)
			}
		}
		for name := range unsafeSettings[engine] {
			if _, ok := table[name]; !ok {
				t.Errorf("%s: %s is refused as unsafe, but the server does not know it", engine, name)
			}
		}
	}
}
