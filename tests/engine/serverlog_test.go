package engine

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"example.com/database-operator/internal/agent/serverlog"
	"example.com/database-operator/tests/utils/logbuf"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresJSONLogRelayed: a real PostgreSQL 15 with the chart's log
// settings (the logging collector writing jsonlog into the agent's named
// pipes) has every line of its log relayed, whole and as JSON, to the
// agent's output; an error a client causes is there with its SQL state,
// and the relay outlives a restart of the server, which opens the pipes
// again.
func TestPostgresJSONLogRelayed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay := relayPostgresLog(t)
	out, plain := relay.out, relay.plain
	pg := testservers.StartPostgresWith(t, testservers.NewTopology(t), "pg-0", relay.options())

	// entries is what was relayed, each line decoded; a line that is not
	// a whole JSON object fails the test.
	entries := func() []map[string]any {
		var got []map[string]any
		for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
			if line == "" {
				continue
			}
			var e map[string]any
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("a relayed line is not a JSON object (%v): %q", err, line)
			}
			got = append(got, e)
		}
		return got
	}
	count := func(match func(map[string]any) bool) int {
		n := 0
		for _, e := range entries() {
			if match(e) {
				n++
			}
		}
		return n
	}
	ready := func(e map[string]any) bool { return e["message"] == "database system is ready to accept connections" }
	waitFor := func(what string, n int, match func(map[string]any) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for count(match) < n {
			if time.Now().After(deadline) {
				t.Fatalf("not relayed in 30 s: %s; relayed:\n%s", what, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("the server's start", 1, ready)

	if err := pg.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("SELECT 1/0 did not fail")
	}
	waitFor("the client's error, with its SQL state and statement", 1, func(e map[string]any) bool {
		return e["error_severity"] == "ERROR" && e["state_code"] == "22012" && e["message"] == "division by zero" && e["statement"] == "SELECT 1/0"
	})

	pg.Stop()
	pg.Restart(t)
	waitFor("the restarted server's start", 2, ready)
	for _, p := range serverlog.PostgresPipes(nil, nil) {
		fi, err := os.Lstat(filepath.Join(relay.dir, p.Name))
		if err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
			t.Errorf("%s is no longer a named pipe (%v): the server's log goes to a file", p.Name, err)
		}
	}
	// The collector's own plain lines come through the other pipe.
	if !strings.Contains(plain.String(), "ending log output to stderr") {
		t.Errorf("the plain log's lines were not relayed:\n%s", plain.String())
	}
}

// postgresLogRelay is the agent's relay of a server's log (its named
// pipes in dir), and what the agent tells the start script, which then
// points the server's logging collector at them.
type postgresLogRelay struct {
	*serverlog.Relay
	dir        string
	out, plain *logbuf.Buffer // the agent's stdout (the JSON log) and stderr
}

func (r postgresLogRelay) options() testservers.PostgresOptions {
	return testservers.PostgresOptions{Env: []string{"AGENT_LOG_PIPES=" + r.dir}}
}

func relayPostgresLog(t *testing.T) postgresLogRelay {
	t.Helper()
	top, err := os.MkdirTemp("", "dbop-log-") // t.TempDir's parent is closed to the servers' account
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	r := postgresLogRelay{dir: filepath.Join(top, "log"), out: &logbuf.Buffer{}, plain: &logbuf.Buffer{}}
	pipes := serverlog.PostgresPipes(r.out, r.plain)
	if r.Relay, err = serverlog.Start(r.dir, testr.New(t), pipes...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Drain(time.Second) })
	paths := []string{top, r.dir}
	for _, p := range pipes {
		paths = append(paths, filepath.Join(r.dir, p.Name))
	}
	testservers.GiveToPostgres(t, paths...) // in a pod, the agent and the server are one account
	return r
}
