// Package engine_test drives the engine layer against real PostgreSQL and
// MariaDB servers (Debian packages, started by internal/testservers).
package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/testservers"
)

// TestPostgresFailoverPrimitives walks a failover on real servers: two
// standbys follow a primary; the primary is fenced, then lost; the standby
// that is furthest ahead is promoted; the other follows it onto the new
// timeline; no acknowledged row is lost.
func TestPostgresFailoverPrimitives(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testservers.StartPostgresPrimary(t)
	if err := primary.Exec(ctx, "CREATE TABLE orders (id serial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	r1, r2 := primary.StartReplica(t), primary.StartReplica(t)
	p, i1, i2 := primary.Instance(t), r1.Instance(t), r2.Instance(t)

	for range 100 {
		if err := primary.Exec(ctx, "INSERT INTO orders (note) VALUES ('before failover')"); err != nil {
			t.Fatal(err)
		}
	}
	pst, err := p.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pst.Role != engine.RolePrimary || pst.ReadOnly || pst.Applied.Timeline != 1 || pst.Applied.LSN == 0 {
		t.Fatalf("primary status %+v", pst)
	}
	for name, r := range map[string]engine.Instance{"r1": i1, "r2": i2} {
		waitCaughtUp(t, ctx, p, r, name)
	}

	// Fence: new sessions cannot write; the superuser session that asks can still read.
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	err = primary.Exec(ctx, "INSERT INTO orders (note) VALUES ('after fence')")
	if err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("write on a fenced primary: %v", err)
	}
	if st, _ := p.Status(ctx); !st.ReadOnly {
		t.Error("fenced primary does not report read-only")
	}

	// Lose the primary; both standbys have everything; promote r1.
	primary.Kill()
	s1, _ := i1.Status(ctx)
	s2, _ := i2.Status(ctx)
	if c, err := i1.Compare(s1.Applied, s2.Applied); err != nil || c != 0 {
		t.Fatalf("standbys differ before promotion: %v vs %v (%d, %v)", s1.Applied, s2.Applied, c, err)
	}
	if err := i1.WaitApplied(ctx); err != nil {
		t.Fatal(err)
	}
	if err := i1.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	s1, err = i1.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Role != engine.RolePrimary || s1.ReadOnly || s1.Applied.Timeline != 2 {
		t.Fatalf("promoted status %+v: want a writable primary on timeline 2", s1)
	}
	if err := r1.Exec(ctx, "INSERT INTO orders (note) VALUES ('on the new primary')"); err != nil {
		t.Fatalf("write on the promoted standby: %v", err)
	}
	if n := r1.Count(t, "orders"); n != 101 {
		t.Errorf("new primary has %d rows, want 101 (100 acknowledged before the failover + 1)", n)
	}

	// r2 follows the new primary across the timeline switch.
	if err := i2.Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: r1.Port}, engine.Credentials{User: "postgres", Password: r1.Password}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, i1, i2, "r2 after follow")
	s2, _ = i2.Status(ctx)
	if s2.Applied.Timeline != 2 || !strings.HasSuffix(s2.Source, ":"+itoa(r1.Port)) {
		t.Errorf("r2 status %+v: want timeline 2 streaming from port %d", s2, r1.Port)
	}
	if n := r2.Count(t, "orders"); n != 101 {
		t.Errorf("r2 has %d rows, want 101", n)
	}

	// A primary cannot follow without a restart as a standby.
	if err := i1.Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: r2.Port}, engine.Credentials{}); !errors.Is(err, engine.ErrNotInRecovery) {
		t.Errorf("Follow on a primary: %v, want ErrNotInRecovery", err)
	}
}

// waitCaughtUp waits until replica has applied all that primary has written.
func waitCaughtUp(t *testing.T, ctx context.Context, primary, replica engine.Instance, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, err := primary.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := replica.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rs.Role != engine.RoleReplica {
			t.Fatalf("%s: role %s", name, rs.Role)
		}
		c, err := replica.Compare(rs.Applied, ps.Applied)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c >= 0 && rs.Streaming {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not caught up: replica %+v, primary %+v", name, rs, ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
