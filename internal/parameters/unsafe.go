package parameters

import (
	"fmt"
	"slices"
	"strings"
)

// unsafeSetting is a setting spec.parameters may not take, or not at the
// values that make it dangerous: why says what it would do.
type unsafeSetting struct {
	why string
	// safe says whether a value (as written, trimmed) is one the server
	// may run with; nil: none is (the setting is refused whatever its
	// value).
	safe func(value string) bool
}

// The settings refused because they can lose acknowledged writes,
// corrupt data, open the server without authentication or make replicas
// skip what they cannot apply, per engine. The webhook refuses them with
// the why given here, and a render leaves them out (a Database admitted
// before this table named them). MySQL and MariaDB defaults are
// crash-durable (the chart: sync_binlog = 1, innodb_flush_log_at_trx_commit
// = 1), and a value other than those is refused.
var unsafeSettings = map[string]map[string]unsafeSetting{
	"postgresql": {
		"fsync":                   {why: "off acknowledges commits the disk may not hold: a crash loses them and can corrupt the data directory", safe: isOn},
		"full_page_writes":        {why: "off lets a crash leave torn pages that recovery cannot repair: data corruption", safe: isOn},
		"zero_damaged_pages":      {why: "zeroes damaged pages instead of failing on them: their rows are lost without a trace", safe: isOff},
		"ignore_checksum_failure": {why: "reads pages that fail their checksum as if sound: corruption spreads unseen", safe: isOff},
		"ignore_invalid_pages":    {why: "lets recovery go on past references to invalid pages: a corrupt server comes up as if whole", safe: isOff},
		"data_sync_retry":         {why: "retries an fsync that failed, whose data the kernel may have dropped: acknowledged writes lost", safe: isOff},
		"allow_system_table_mods": {why: "lets statements change the system catalogs' structure: the server can be corrupted beyond repair", safe: isOff},
	},
	"mariadb": mysqlFamilyUnsafe(map[string]unsafeSetting{
		"slave_skip_errors": {why: "makes replicas skip the statements they cannot apply: they silently diverge from the primary"},
		"slave_exec_mode":   {why: "IDEMPOTENT makes replicas ignore the rows they cannot find or duplicate: they silently diverge", safe: equalsFold("STRICT")},
	}),
	"mysql": mysqlFamilyUnsafe(map[string]unsafeSetting{
		"replica_skip_errors": {why: "makes replicas skip the statements they cannot apply: they silently diverge from the primary"},
		"slave_skip_errors":   {why: "makes replicas skip the statements they cannot apply: they silently diverge from the primary"},
		"replica_exec_mode":   {why: "IDEMPOTENT makes replicas ignore the rows they cannot find or duplicate: they silently diverge", safe: equalsFold("STRICT")},
		"slave_exec_mode":     {why: "IDEMPOTENT makes replicas ignore the rows they cannot find or duplicate: they silently diverge", safe: equalsFold("STRICT")},
	}),
}

// mysqlFamilyUnsafe is what MySQL and MariaDB refuse alike, with each
// engine's own additions.
func mysqlFamilyUnsafe(own map[string]unsafeSetting) map[string]unsafeSetting {
	out := map[string]unsafeSetting{
		"skip_grant_tables":              {why: "starts the server without authentication: anyone who reaches it is every user"},
		"init_file":                      {why: "runs a file's statements as the superuser at every start, outside the operator's accounts"},
		"sync_binlog":                    {why: "other than 1 acknowledges commits whose binary log the disk may not hold: a crash loses them from replicas and point-in-time recovery", safe: equalsFold("1")},
		"innodb_flush_log_at_trx_commit": {why: "other than 1 acknowledges commits the redo log does not hold yet: a crash loses up to a second of them", safe: equalsFold("1")},
		"innodb_doublewrite":             {why: "off lets a crash leave torn pages: data corruption", safe: isOn},
		"innodb_force_recovery":          {why: "above 0 starts a damaged server by skipping recovery steps: data is lost or corrupted", safe: equalsFold("0")},
		"innodb_checksum_algorithm":      {why: "none turns page checksums off: corruption goes unseen", safe: func(v string) bool { return !strings.Contains(strings.ToLower(v), "none") }},
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

func isOn(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "true", "yes", "1":
		return true
	}
	return false
}

func isOff(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "no", "0":
		return true
	}
	return false
}

func equalsFold(want string) func(string) bool {
	return func(v string) bool { return strings.EqualFold(strings.TrimSpace(v), want) }
}

// Unsafe says why engine refuses name at value ("" when it does not).
func Unsafe(engine, name, value string) string {
	s, ok := unsafeSettings[engine][Normalize(engine, name)]
	switch {
	case !ok:
		return ""
	case s.safe == nil:
		return fmt.Sprintf("%s is refused: it %s", Normalize(engine, name), s.why)
	case s.safe(value):
		return ""
	}
	return fmt.Sprintf("%s = %s is refused: %s", Normalize(engine, name), value, s.why)
}

// UnsafeNames lists the settings engine refuses at some value, sorted (the
// admission tests try each).
func UnsafeNames(engine string) []string {
	var names []string
	for name := range unsafeSettings[engine] {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
