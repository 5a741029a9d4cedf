package engine_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

// TestWALStream: the agent's stream of the segment a real server writes
// reaches the server's flush point within a few rounds, and the segment
// fetched from its pieces holds the WAL up to there. And the stream never
// counts as a synchronous standby: under the chart's 'ANY n (*)' with no
// replica, a synchronous commit still waits (a walsender that reported a
// flush position would be taken for the standby, and a commit acknowledged
// with no replica holding it).
func TestWALStream(t *testing.T) {
	pg := testservers.StartPostgresWith(t, testservers.NewTopology(t), "pg-0",
		testservers.PostgresOptions{Settings: []string{"synchronous_standby_names = 'ANY 1 (*)'"}})
	arch := wal.Archive{Store: storage.NewDir(t.TempDir()), Prefix: "shop/orders/_wal/uid"}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  agent.WALStreamStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg := agent.Config{Server: engine.Endpoint{Host: "127.0.0.1", Port: pg.Port}, Superuser: engine.Credentials{User: "postgres", Password: pg.Password}}
		st, err := agent.StreamWAL(ctx, cfg, arch, func() bool { return true })
		done <- result{st, err}
	}()
	defer func() {
		cancel()
		if r := <-done; r.err != nil && !errors.Is(r.err, context.Canceled) {
			t.Errorf("the stream ended with %v", r.err)
		}
	}()

	c, err := pg.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SET synchronous_commit = local; CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	var segment, flush string
	if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_flush_lsn()), pg_current_wal_flush_lsn()::text").Scan(&segment, &flush); err != nil {
		t.Fatal(err)
	}
	want, _ := pglogrepl.ParseLSN(flush)
	var info wal.StreamInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		found, err := arch.PieceInfo(ctx, segment, &info)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := pglogrepl.ParseLSN(info.End)
		if found && end >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pieces of %s reach %q after 30 s, want the flush point %s", segment, info.End, flush)
		}
		time.Sleep(200 * time.Millisecond)
	}
	dest := filepath.Join(t.TempDir(), segment)
	if _, err := arch.FetchStreamed(ctx, segment, dest); err != nil {
		t.Fatal(err)
	}
	// The fetched segment is the server's own, up to what was streamed.
	got, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	server, err := os.ReadFile(filepath.Join(pg.Data(), "pg_wal", segment))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(server) || !bytes.Equal(got[:info.Size], server[:info.Size]) {
		t.Fatalf("%s fetched from its pieces (%d bytes) differs from the server's (%d) in its first %d bytes", segment, len(got), len(server), info.Size)
	}

	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	defer scancel()
	if _, err := c.Exec(sctx, "SET synchronous_commit = on; INSERT INTO t VALUES (0)"); err == nil {
		t.Fatal("a synchronous commit with no replica was acknowledged while the stream ran: the stream counted as a synchronous standby")
	}
}
