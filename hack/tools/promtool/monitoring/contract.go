package monitoring

import "strings"

// Contract is every metric name the agents and the operator export (the
// metric contract of issue 30, documented with the metrics), by the type
// it has. The alerts and the dashboard may use these, a histogram's
// _bucket, _sum and _count series, and the standard series below.
var Contract = map[string]string{
	// The agent in every database pod (label database; Prometheus adds
	// namespace and pod).
	"database_instance_up":                  "gauge",
	"database_instance_is_primary":          "gauge",
	"database_instance_info":                "gauge",
	"database_replication_streaming":        "gauge",
	"database_replication_applying":         "gauge",
	"database_replication_lag_seconds":      "gauge",
	"database_replication_lag_bytes":        "gauge",
	"database_replication_lag_transactions": "gauge",
	"database_connections":                  "gauge",
	"database_connections_max":              "gauge",
	"database_postgres_xid_age":             "gauge",
	"database_wal_bytes_total":              "counter",
	"database_size_bytes":                   "gauge",
	"database_volume_used_bytes":            "gauge",
	"database_volume_capacity_bytes":        "gauge",
	"database_last_scrape_error":            "gauge",

	// The operator (labels namespace, database).
	"database_operator_backups_total":                         "counter",
	"database_operator_backup_last_success_timestamp_seconds": "gauge",
	"database_operator_backup_last_succeeded":                 "gauge",
	"database_operator_backup_last_size_bytes":                "gauge",
	"database_operator_backup_schedule_interval_seconds":      "gauge",
	"database_operator_failovers_total":                       "counter",
	"database_operator_switchovers_total":                     "counter",
	"database_operator_failover_duration_seconds":             "histogram",
	"database_operator_fence_events_total":                    "counter",
	"database_operator_instances":                             "gauge",
	"database_operator_databases":                             "gauge",
	"database_operator_reconcile_phase_duration_seconds":      "histogram",
	"database_operator_instance_failing":                      "gauge",
	"database_operator_replication_healthy":                   "gauge",
}

// standardPrefixes are the series controller-runtime exports in the
// operator (its reconcile counters and work queues).
var standardPrefixes = []string{"controller_runtime_", "workqueue_"}

// InContract reports whether name is a series the contract promises: a
// contract name, a histogram's _bucket, _sum or _count, controller-runtime's
// own, or Prometheus's up.
func InContract(name string) bool {
	if name == "up" {
		return true
	}
	if _, ok := Contract[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && Contract[base] == "histogram" {
			return true
		}
	}
	for _, p := range standardPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
