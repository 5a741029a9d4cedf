package engine_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/database-operator/tests/utils/testservers"
)

// runScript runs one of the chart's start scripts in its own process group
// (killed afterwards, with anything it started) and returns its output and
// exit error.
func runScript(t *testing.T, name string, env []string, args ...string) (string, error) {
	t.Helper()
	script := testservers.StartScript(t, t.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A server the script started may outlive it and hold the output open:
	// stop waiting for output once the script exits, then kill the group.
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return out.String(), err
}

func topologyDir(t *testing.T, data map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestStartScriptsRefuseAnEmptyPrimary: once a Database has served, a
// primary whose volume has no data must not come up as a new, empty
// database (clients would write into it and the real data would be lost
// for good); the script fails instead, so the operator fails over.
func TestStartScriptsRefuseAnEmptyPrimary(t *testing.T) {
	topo := topologyDir(t, map[string]string{"primary": "db-0", "initialized": "true"})
	for name, env := range map[string][]string{
		"postgres-start.sh": {"PGDATA=" + filepath.Join(t.TempDir(), "pgdata"), "POSTGRES_USER=postgres", "POSTGRES_PASSWORD=x", "REPLICATION_USER=r", "REPLICATION_PASSWORD=x"},
		"mysql-start.sh":    {"ENGINE=mariadb", "DATADIR=" + filepath.Join(t.TempDir(), "data"), "ROOT_PASSWORD=x", "REPLICATION_USER=r", "REPLICATION_PASSWORD=x"},
	} {
		out, err := runScript(t, name, append(env, "POD_NAME=db-0", "TOPOLOGY_DIR="+topo), "true")
		if err == nil || !strings.Contains(out, "refusing to start an empty one") {
			t.Errorf("%s: %v\n%s", name, err, out)
		}
		for _, e := range env {
			if dir, ok := strings.CutPrefix(e, "PGDATA="); ok {
				if _, err := os.Stat(dir + ".init"); err == nil {
					t.Errorf("%s initialized %s anyway", name, dir)
				}
			}
		}
	}
}

// TestMariaDBCloneFailsWholly: a replica whose dump of the primary fails
// ends its start with an error and no data directory, so the next start
// clones again instead of running on a partial copy.
func TestMariaDBCloneFailsWholly(t *testing.T) {
	if _, err := exec.LookPath("mariadb-install-db"); err != nil {
		t.Fatal("mariadb-server is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	out, err := runScript(t, "mysql-start.sh", []string{
		"ENGINE=mariadb", "POD_NAME=db-1", "DATADIR=" + data, "ROOT_PASSWORD=x", "REPLICATION_USER=r", "REPLICATION_PASSWORD=x",
		"TOPOLOGY_DIR=" + topologyDir(t, map[string]string{"primary": "db-0"}),
		"PRIMARY_HOST=127.0.0.1", "PRIMARY_PORT=1", // nothing listens there
		"MYSQLD_OPTS=--no-defaults --user=root --tmpdir=" + testservers.PrivateTmp(t, dir),
	}, "true")
	if err == nil {
		t.Fatalf("the clone of an unreachable primary succeeded:\n%s", out)
	}
	if !strings.Contains(out, "cloning db-0") {
		t.Errorf("the script did not try to clone:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(data, "mysql")); err == nil {
		t.Errorf("a data directory was left in place after a failed clone:\n%s", out)
	}
}
