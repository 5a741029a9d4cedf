// Package parameters knows the settings of each engine's server: which a
// user may set in spec.parameters, and how the server takes a new value
// (a reload or a restart). The tables are read from the real servers.
package parameters

import (
	"bufio"
	"embed"
	"fmt"
	"strings"
	"sync"
)

// Class says how a server takes a new value of one of its
// settings.
type Class string

const (
	// Reload means a running server takes it (PostgreSQL's reload,
	// MySQL/MariaDB's SET GLOBAL); no restart.
	Reload Class = "reload"
	// Restart means the server reads it only when it starts: the
	// operator's rolling restart (replicas first, then a switchover).
	Restart Class = "restart"
)

// The tables of every setting a server knows and how it takes a new value,
// read from the real servers (PostgreSQL 15's pg_settings, MariaDB
// 10.11's information_schema.SYSTEM_VARIABLES) by `make parameters`; the
// engine tests fail when they are stale. A line is "name<TAB>class", with
// class reload, restart or fixed (set when the server is built or
// initialized: never by a user).
//
//go:embed *.tsv
var parameterFiles embed.FS

var (
	tablesOnce sync.Once
	tables     map[string]map[string]string
	tablesErr  error
)

// Table is the table of engine ("postgresql", "mariadb") as
// name → class (reload, restart or fixed).
func Table(engine string) (map[string]string, error) {
	tablesOnce.Do(func() {
		tables = map[string]map[string]string{}
		for _, e := range []string{"postgresql", "mariadb"} {
			f, err := parameterFiles.Open(e + ".tsv")
			if err != nil {
				tablesErr = err
				return
			}
			t := map[string]string{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				name, class, ok := strings.Cut(sc.Text(), "\t")
				if ok && !strings.HasPrefix(name, "#") {
					t[name] = class
				}
			}
			f.Close()
			tables[e] = t
		}
	})
	if tablesErr != nil {
		return nil, tablesErr
	}
	return tables[engine], nil
}

// operatorOwned are the settings the operator sets itself and a user may
// not: replication, fencing, the network and the files the pods are
// built on. Each says why, in the refusal.
var operatorOwned = map[string]map[string]string{
	"postgresql": ownedBy(map[string][]string{
		"the pods' network and files": {"listen_addresses", "port", "unix_socket_directories", "unix_socket_group", "unix_socket_permissions",
			"data_directory", "config_file", "hba_file", "ident_file", "external_pid_file", "logging_collector", "log_destination", "log_directory", "log_filename"},
		"replication and failover": {"wal_level", "hot_standby", "max_wal_senders", "max_replication_slots", "max_slot_wal_keep_size", "wal_keep_size",
			"wal_log_hints", "primary_conninfo", "primary_slot_name", "promote_trigger_file", "recovery_target", "recovery_target_lsn",
			"recovery_target_name", "recovery_target_time", "recovery_target_xid", "recovery_target_timeline", "recovery_target_action",
			"recovery_target_inclusive", "restore_command", "synchronous_standby_names", "synchronous_commit", "default_transaction_read_only",
			"archive_mode", "archive_command", "archive_library", "cluster_name"},
		"TLS (set by the operator)": {"ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file", "ssl_crl_file", "ssl_crl_dir", "ssl_passphrase_command"},
	}),
	"mariadb": ownedBy(map[string][]string{
		"the pods' network and files": {"port", "bind_address", "socket", "datadir", "pid_file", "skip_networking", "skip_name_resolve", "tmpdir",
			"log_error", "basedir", "plugin_dir"},
		"replication and failover": {"log_bin", "log_bin_basename", "log_bin_index", "binlog_format", "log_slave_updates", "gtid_strict_mode",
			"gtid_domain_id", "gtid_slave_pos", "gtid_binlog_state", "server_id", "read_only", "relay_log", "relay_log_index", "relay_log_basename",
			"sql_log_bin", "rpl_semi_sync_master_enabled", "rpl_semi_sync_master_timeout", "rpl_semi_sync_master_wait_point",
			"rpl_semi_sync_master_wait_no_slave", "rpl_semi_sync_slave_enabled", "init_slave", "report_host", "report_port"},
		"TLS (set by the operator)": {"ssl_ca", "ssl_capath", "ssl_cert", "ssl_key", "ssl_cipher", "ssl_crl", "ssl_crlpath", "require_secure_transport"},
	}),
	// MySQL names its replication settings its own way: MariaDB's list
	// alone would let GTID mode and the fence's super_read_only through.
	"mysql": ownedBy(map[string][]string{
		"the pods' network and files": {"port", "bind_address", "socket", "datadir", "pid_file", "skip_networking", "skip_name_resolve", "tmpdir",
			"log_error", "basedir", "plugin_dir", "plugin_load", "plugin_load_add"},
		"replication and failover": {"log_bin", "log_bin_basename", "log_bin_index", "binlog_format", "log_replica_updates", "log_slave_updates",
			"gtid_mode", "enforce_gtid_consistency", "gtid_executed", "gtid_purged", "server_id", "server_uuid", "read_only", "super_read_only",
			"relay_log", "relay_log_index", "relay_log_basename", "sql_log_bin", "skip_replica_start", "skip_slave_start",
			"rpl_semi_sync_source_enabled", "rpl_semi_sync_source_timeout", "rpl_semi_sync_source_wait_point",
			"rpl_semi_sync_source_wait_for_replica_count", "rpl_semi_sync_source_wait_no_replica", "rpl_semi_sync_replica_enabled",
			"init_replica", "init_slave", "report_host", "report_port"},
		"TLS (set by the operator)": {"ssl_ca", "ssl_capath", "ssl_cert", "ssl_key", "ssl_cipher", "ssl_crl", "ssl_crlpath", "require_secure_transport", "tls_version"},
	}),
}

func ownedBy(groups map[string][]string) map[string]string {
	out := map[string]string{}
	for why, names := range groups {
		for _, n := range names {
			out[n] = why
		}
	}
	return out
}

// Normalize is the name a setting is known by: MySQL and MariaDB
// spell options with dashes or underscores alike.
func Normalize(engine, name string) string {
	if engine == "postgresql" {
		return strings.ToLower(name)
	}
	return strings.ReplaceAll(strings.ToLower(name), "-", "_")
}

// Classify says how engine takes value for name, or why a user may not
// set it: the operator's own, unsafe (it could lose acknowledged writes,
// corrupt data, open the server without authentication or let replicas
// skip errors: see unsafe.go), unknown to the server (it would refuse to
// start with it), or fixed. MySQL 8.4 has no table (no server here to
// read it from): every other name it is given counts as restart, and the
// server itself says when one is wrong.
func Classify(engine, name, value string) (Class, error) {
	n := Normalize(engine, name)
	if why, ok := operatorOwned[engine][n]; ok {
		return "", fmt.Errorf("%s is set by the operator (%s)", n, why)
	}
	if why := Unsafe(engine, name, value); why != "" {
		return "", fmt.Errorf("%s", why)
	}
	if engine == "mysql" {
		return Restart, nil
	}
	table, err := Table(engine)
	if err != nil {
		return "", err
	}
	switch table[n] {
	case string(Reload):
		return Reload, nil
	case string(Restart):
		return Restart, nil
	case "fixed":
		return "", fmt.Errorf("%s is fixed when the server is built or initialized and cannot be set", n)
	}
	return "", fmt.Errorf("%s is not a setting %s knows", n, engine)
}

// OperatorOwned says why the operator owns engine's setting name, or ""
// when it does not.
func OperatorOwned(engine, name string) string { return operatorOwned[engine][Normalize(engine, name)] }
