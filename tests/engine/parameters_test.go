package engine_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"example.com/database-operator/internal/parameters"
	"example.com/database-operator/tests/utils/testservers"
)

// update rewrites the parameter tables from the servers (`make parameters`).
var update = flag.Bool("update", false, "rewrite internal/parameters/*.tsv from the real servers")

// TestParameterTables reads from the real servers every setting they know
// and how each takes a new value, and fails when the tables the operator
// embeds (which classify spec.parameters) say otherwise: run `make
// parameters` to rewrite them.
func TestParameterTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	read := map[string]func(t *testing.T) map[string]string{
		"postgresql": func(t *testing.T) map[string]string {
			c, err := testservers.StartPostgresPrimary(t).Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			rows, err := c.Query(ctx, `SELECT name, context FROM pg_settings`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[string]string{}
			for rows.Next() {
				var name, context string
				if err := rows.Scan(&name, &context); err != nil {
					t.Fatal(err)
				}
				switch context {
				case "internal":
					out[name] = "fixed"
				case "postmaster":
					out[name] = "restart"
				default: // sighup, superuser, user, backend: a reload
					out[name] = "reload"
				}
			}
			return out
		},
		"mariadb": func(t *testing.T) map[string]string {
			db, err := testservers.StartMariaDBPrimary(t).DB(ctx, "root", testservers.MariaDBRootPassword)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rows, err := db.QueryContext(ctx, `SELECT LOWER(VARIABLE_NAME), VARIABLE_SCOPE, READ_ONLY, COMMAND_LINE_ARGUMENT IS NULL
				FROM information_schema.SYSTEM_VARIABLES`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[string]string{}
			for rows.Next() {
				var name, scope, readOnly string
				var noOption bool
				if err := rows.Scan(&name, &scope, &readOnly, &noOption); err != nil {
					t.Fatal(err)
				}
				switch {
				case noOption || scope == "SESSION ONLY":
					out[name] = "fixed" // no option sets it
				case readOnly == "YES":
					out[name] = "restart"
				default:
					out[name] = "reload"
				}
			}
			return out
		},
	}
	for eng, readTable := range read {
		t.Run(eng, func(t *testing.T) {
			got := readTable(t)
			path := filepath.Join("..", "..", "internal", "parameters", eng+".tsv")
			if *update {
				names := make([]string, 0, len(got))
				for n := range got {
					names = append(names, n)
				}
				sort.Strings(names)
				var b strings.Builder
				fmt.Fprintf(&b, "# The settings %s knows and how each takes a new value (reload, restart, fixed).\n# Written by `make parameters` from the real server; do not edit.\n", eng)
				for _, n := range names {
					fmt.Fprintf(&b, "%s\t%s\n", n, got[n])
				}
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := parameters.Table(eng)
			if err != nil {
				t.Fatal(err)
			}
			var diff []string
			for n, class := range got {
				if want[n] != class {
					diff = append(diff, fmt.Sprintf("%s: server %s, table %q", n, class, want[n]))
				}
			}
			for n := range want {
				if _, ok := got[n]; !ok {
					diff = append(diff, n+": not on the server")
				}
			}
			if len(diff) > 0 {
				sort.Strings(diff)
				t.Errorf("internal/parameters/%s.tsv is stale (run `make parameters`): %d differences, first %v", eng, len(diff), diff[:min(len(diff), 10)])
			}
		})
	}
}

// TestApplyParameters: settings a running server takes are applied
// without a restart, once (applying them again changes nothing), a value
// the server refuses is an error naming the setting, and on PostgreSQL a
// setting no longer wanted goes back to its default while the operator's
// own (the fence) stays.
func TestApplyParameters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Run("postgresql", func(t *testing.T) {
		pg := testservers.StartPostgresPrimary(t)
		inst := pg.Instance(t)
		show := func(name string) string {
			c, err := pg.Connect(ctx) // a new session sees the reload
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			var v string
			if err := c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		want := map[string]string{"work_mem": "8MB", "search_path": "app, public", "log_min_duration_statement": "250"}
		changed, err := inst.ApplyParameters(ctx, want)
		if err != nil || len(changed) != 3 {
			t.Fatalf("first apply: changed %v, %v; want all three", changed, err)
		}
		eventuallyErr(t, func() error {
			if got := []string{show("work_mem"), show("search_path"), show("log_min_duration_statement")}; got[0] != "8MB" || got[1] != "app, public" || got[2] != "250ms" {
				return fmt.Errorf("settings after the reload: %v", got)
			}
			return nil
		})
		if changed, err := inst.ApplyParameters(ctx, want); err != nil || len(changed) != 0 {
			t.Errorf("applying the same again: changed %v, %v; want nothing", changed, err)
		}
		// The fence is ALTER SYSTEM too: dropping work_mem must leave it.
		if err := inst.Fence(ctx); err != nil {
			t.Fatal(err)
		}
		delete(want, "work_mem")
		if changed, err := inst.ApplyParameters(ctx, want); err != nil || !slices.Equal(changed, []string{"work_mem"}) {
			t.Errorf("dropping work_mem: changed %v, %v", changed, err)
		}
		eventuallyErr(t, func() error {
			if v := show("work_mem"); v != "4MB" {
				return fmt.Errorf("work_mem %s after it was dropped, want the default 4MB", v)
			}
			return nil
		})
		if v := show("default_transaction_read_only"); v != "on" {
			t.Errorf("the fence was reset with the user's settings: default_transaction_read_only %s", v)
		}
		_, err = inst.ApplyParameters(ctx, map[string]string{"work_mem": "lots"})
		if err == nil || !strings.Contains(err.Error(), "work_mem") {
			t.Errorf("a value the server refuses: %v; want an error naming work_mem", err)
		}
		// One refused value does not keep the others from taking effect.
		_, err = inst.ApplyParameters(ctx, map[string]string{"work_mem": "16MB", "zero_damaged_pages": "lots"})
		if err == nil || !strings.Contains(err.Error(), "zero_damaged_pages") {
			t.Errorf("a value the server refuses: %v; want an error naming zero_damaged_pages", err)
		}
		eventuallyErr(t, func() error {
			if v := show("work_mem"); v != "16MB" {
				return fmt.Errorf("work_mem %s beside a refused setting, want 16MB (set and reloaded)", v)
			}
			return nil
		})
	})
	t.Run("mariadb", func(t *testing.T) {
		m := testservers.StartMariaDBPrimary(t)
		inst := m.Instance(t)
		db, err := m.DB(ctx, "root", testservers.MariaDBRootPassword)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		want := map[string]string{"long_query_time": "2.5", "max_connections": "300", "slow_query_log": "ON", "max_allowed_packet": "32M"}
		changed, err := inst.ApplyParameters(ctx, want)
		if err != nil || len(changed) != 4 {
			t.Fatalf("first apply: changed %v, %v; want all four", changed, err)
		}
		var lqt float64
		var maxConn, packet int64
		var slow int
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.long_query_time, @@GLOBAL.max_connections, @@GLOBAL.slow_query_log, @@GLOBAL.max_allowed_packet").Scan(&lqt, &maxConn, &slow, &packet); err != nil {
			t.Fatal(err)
		}
		if lqt != 2.5 || maxConn != 300 || slow != 1 || packet != 32<<20 {
			t.Errorf("settings: long_query_time %v, max_connections %d, slow_query_log %d, max_allowed_packet %d", lqt, maxConn, slow, packet)
		}
		if changed, err := inst.ApplyParameters(ctx, want); err != nil || len(changed) != 0 {
			t.Errorf("applying the same again: changed %v, %v; want nothing", changed, err)
		}
		_, err = inst.ApplyParameters(ctx, map[string]string{"max_connections": "many"})
		if err == nil || !strings.Contains(err.Error(), "max_connections") {
			t.Errorf("a value the server refuses: %v; want an error naming max_connections", err)
		}
	})
}
