package parameters

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		engine, name string
		want         Class
		err          string
	}{
		{"postgresql", "work_mem", Reload, ""},
		{"postgresql", "shared_buffers", Restart, ""},
		{"postgresql", "Work_Mem", Reload, ""},
		{"postgresql", "port", "", "port is set by the operator (the pods' network and files)"},
		{"postgresql", "synchronous_commit", "", "set by the operator (replication and failover)"},
		{"postgresql", "block_size", "", "block_size is fixed"},
		{"postgresql", "work-mem", "", "work-mem is not a setting postgresql knows"},
		{"mariadb", "max-connections", Reload, ""},
		{"mariadb", "innodb_autoinc_lock_mode", Restart, ""},
		{"mariadb", "read-only", "", "read_only is set by the operator"},
		{"mariadb", "version", "", "version is fixed"},
		{"mysql", "innodb_redo_log_capacity", Restart, ""},
		{"mysql", "log-bin", "", "log_bin is set by the operator"},
	} {
		got, err := Classify(tt.engine, tt.name)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%s %s: %q, %v; want %q", tt.engine, tt.name, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s %s: %v; want an error containing %q", tt.engine, tt.name, err, tt.err)
		}
	}
}

// TestOwnedAreKnown: every setting the operator keeps for itself is one
// the server knows (a typo there would let the real one through).
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
	}
}
