// Package engine_test drives the engine layer against real PostgreSQL and
// MariaDB servers (Debian packages, started by tests/utils/testservers).
package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
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

	// r2 follows the new primary across the timeline switch, through the
	// slot the operator makes on it first.
	if _, err := i1.KeepSlots(ctx, engine.SlotName(r2.Pod), []string{engine.SlotName(r2.Pod)}); err != nil {
		t.Fatal(err)
	}
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

// TestPostgresStartScript runs the chart's postgres-start.sh through a
// Database's life: it initializes the primary and clones the replicas
// (every server in these tests starts through it); a former primary that
// took a write after losing its role starts fenced, and once the operator
// asks is rewound (pg_rewind) onto the new primary's timeline and comes
// back as its standby without that write; a
// rebuild request sets the data aside and clones again.
func TestPostgresStartScript(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := testservers.StartPostgresCluster(t, "orders", 3)
	old, r1, r2 := servers[0], servers[1], servers[2]
	p, i1, i2 := old.Instance(t), r1.Instance(t), r2.Instance(t)
	var fork engine.Position // where the new primary's history left timeline 1

	if !t.Run("the script clones the replicas", func(t *testing.T) {
		if err := old.Exec(ctx, "CREATE TABLE orders (id serial PRIMARY KEY, note text)"); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if err := old.Exec(ctx, "INSERT INTO orders (note) VALUES ('acknowledged')"); err != nil {
				t.Fatal(err)
			}
		}
		waitCaughtUp(t, ctx, p, i1, "r1 (cloned by the script)")
		waitCaughtUp(t, ctx, p, i2, "r2 (cloned by the script)")
	}) {
		return
	}

	// Failover to r1; r2 follows. The old primary comes back with the old
	// topology (a partitioned node) and takes a write nobody else has.
	if !t.Run("failover to r1", func(t *testing.T) {
		old.Kill()
		if err := i1.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		if err := i2.Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: r1.Port}, engine.Credentials{User: "postgres", Password: r1.Password}); err != nil {
			t.Fatal(err)
		}
		if err := r1.Exec(ctx, "INSERT INTO orders (note) VALUES ('on the new primary')"); err != nil {
			t.Fatal(err)
		}
	}) {
		return
	}
	if !t.Run("the old primary takes a write nobody else has", func(t *testing.T) {
		old.Restart(t)
		if err := old.Exec(ctx, "INSERT INTO orders (note) VALUES ('errant')"); err != nil {
			t.Fatalf("the old primary, restarted with the old topology, should run as a primary: %v", err)
		}
		// The new primary tells where timeline 1 left its history: the old
		// primary's errant write lies beyond that point.
		errant, err := old.Instance(t).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var forked bool
		fork, forked, err = i1.ForkPoint(ctx, errant.Applied.Timeline)
		if err != nil || !forked || fork.Timeline != 1 || fork.LSN >= errant.Applied.LSN {
			t.Errorf("fork point of timeline %d on the new primary: %+v %t %v; want one before the errant write at %s", errant.Applied.Timeline, fork, forked, err, errant.Applied)
		}
		if _, forked, err := i1.ForkPoint(ctx, 2); err != nil || forked {
			t.Errorf("fork point of the new primary's own timeline: %t %v, want none", forked, err)
		}
		old.Kill()
	}) {
		return
	}

	// The operator's topology names r1: the former primary starts fenced
	// (read-only), not rewound, until the operator has recorded what a
	// rewind discards and asks for it.
	if !t.Run("the former primary starts fenced", func(t *testing.T) {
		old.Topology().SetPrimary(t, r1.Pod)
		old.Restart(t)
		if !strings.Contains(old.Log(), "starting it fenced") {
			t.Errorf("the former primary did not start fenced:\n%s", old.Log())
		}
		if st, err := old.Instance(t).Status(ctx); err != nil || st.Role != engine.RolePrimary || !st.ReadOnly {
			t.Errorf("the former primary back: %+v (%v); want a read-only (fenced) primary", st, err)
		}
		old.Kill()
	}) {
		return
	}
	// The operator asks for the rewind: the start script rewinds.
	if !t.Run("rewind on request", func(t *testing.T) {
		old.Topology().Write(t, map[string]string{"primary": r1.Pod, "rewind-" + old.Pod: "20261203T000000Z"})
		old.Restart(t)
		if !strings.Contains(old.Log(), "rewinding onto orders-1") || strings.Contains(old.Log(), "pg_rewind failed") {
			t.Errorf("the start script did not rewind:\n%s", old.Log())
		}
		rejoined := old.Instance(t)
		waitCaughtUp(t, ctx, i1, rejoined, "the rewound former primary")
		st, _ := rejoined.Status(ctx)
		if st.Applied.Timeline != 2 || !strings.HasSuffix(st.Source, ":"+itoa(r1.Port)) {
			t.Errorf("rewound former primary %+v: want a standby on timeline 2 streaming from port %d", st, r1.Port)
		}
		if n, want := old.Count(t, "orders WHERE note = 'errant'"), 0; n != want {
			t.Errorf("the errant write survived the rewind (%d rows)", n)
		}
		// ...but its WAL was kept aside first, from the fork point's segment on.
		kept, _ := filepath.Glob(filepath.Join(filepath.Dir(old.Data()), "diverged-wal-*", "00000001*"))
		if len(kept) == 0 || !strings.Contains(old.Log(), "is kept in") {
			t.Errorf("the diverged WAL was not kept aside (%v):\n%s", kept, old.Log())
		}
		if forkSegment := fmt.Sprintf("%08X%08X%08X", 1, uint64(fork.LSN)>>32, uint32(fork.LSN)>>24); len(kept) > 0 && filepath.Base(kept[0]) != forkSegment {
			t.Errorf("kept %v, want it to start with the fork point's segment %s", kept, forkSegment)
		}
		if a, b := old.Count(t, "orders"), r1.Count(t, "orders"); a != 21 || b != 21 {
			t.Errorf("rows: rewound %d, primary %d; want 21 each", a, b)
		}
	}) {
		return
	}

	// A rebuild request: the data goes aside, a fresh clone streams.
	if !t.Run("rebuild on request", func(t *testing.T) {
		r2.Stop()
		old.Topology().Write(t, map[string]string{"primary": r1.Pod, "rebuild-" + r2.Pod: "20261203T000000Z"})
		r2.Restart(t)
		aside, _ := filepath.Glob(r2.Data() + ".rebuild-*")
		if len(aside) != 1 {
			t.Errorf("data set aside: %v, want one directory", aside)
		}
		waitCaughtUp(t, ctx, i1, r2.Instance(t), "the rebuilt replica")
	}) {
		return
	}
	// The request is carried out once: a plain restart keeps the data.
	t.Run("a plain restart keeps the rebuilt data", func(t *testing.T) {
		r2.Stop()
		r2.Restart(t)
		if again, _ := filepath.Glob(r2.Data() + ".rebuild-*"); len(again) != 1 {
			t.Errorf("a second restart rebuilt again: %v", again)
		}
	})
}

// TestPostgresDivergedStandbyRewound: a standby that received WAL from
// the old primary past the point where the new primary's timeline forked
// (what a switchover leaves when the old primary writes a record after
// the catch-up and streams it before the standby is re-pointed) can never
// follow the new primary. Its status shows what the operator judges it
// by: the timeline its WAL receiver asks for, and a position past the
// fork point the new primary's history names. Once the operator asks, its
// start script rewinds it (a standby, not a former primary) and keeps the
// discarded WAL aside; then it streams from the new primary.
func TestPostgresDivergedStandbyRewound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := testservers.StartPostgresCluster(t, "ledger", 3)
	old, r1, r2 := servers[0], servers[1], servers[2]
	p, i2 := old.Instance(t), r2.Instance(t)
	if err := old.Exec(ctx, "CREATE TABLE ledger (id serial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	if err := old.Exec(ctx, "INSERT INTO ledger (note) SELECT 'acknowledged' FROM generate_series(1, 10)"); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, p, r1.Instance(t), "r1")
	waitCaughtUp(t, ctx, p, i2, "r2")

	// r1 stops; the old primary writes what only r2 receives, and is lost.
	r1.Stop()
	if err := old.Exec(ctx, "INSERT INTO ledger (note) VALUES ('only on the old timeline')"); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, p, i2, "r2")
	old.Kill()
	r1.Restart(t)
	i1 := r1.Instance(t)
	if err := i1.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := i2.Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: r1.Port}, engine.Credentials{User: "postgres", Password: r1.Password}); err != nil {
		t.Fatal(err)
	}

	// r2 cannot take timeline 2: it replays timeline 1, its position
	// past the fork point, however long it is given.
	time.Sleep(3 * time.Second)
	st, err := i2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fork, forked, err := i1.ForkPoint(ctx, st.ReplayTimeline)
	if err != nil || !forked || st.ReplayTimeline != 1 || st.Applied.LSN <= fork.LSN {
		t.Fatalf("r2 %+v against the fork point %s (forked %t, %v): want replay timeline 1 and a position past the fork", st, fork, forked, err)
	}

	// The operator asks for the rewind; the restarted standby is rewound.
	old.Topology().Write(t, map[string]string{"primary": r1.Pod, "rewind-" + r2.Pod: "20261206T000000Z"})
	r2.Stop()
	r2.Restart(t)
	if !strings.Contains(r2.Log(), "rewinding onto ledger-1") || strings.Contains(r2.Log(), "pg_rewind failed") {
		t.Fatalf("the start script did not rewind the standby:\n%s", r2.Log())
	}
	rewound := r2.Instance(t)
	waitCaughtUp(t, ctx, i1, rewound, "the rewound standby")
	if st, _ := rewound.Status(ctx); st.Applied.Timeline != 2 || st.ReplayTimeline != 2 {
		t.Errorf("rewound standby %+v: want timeline 2", st)
	}
	if n := r2.Count(t, "ledger WHERE note = 'only on the old timeline'"); n != 0 {
		t.Errorf("the diverged row survived the rewind (%d rows)", n)
	}
	if kept, _ := filepath.Glob(filepath.Join(filepath.Dir(r2.Data()), "diverged-wal-*", "00000001*")); len(kept) == 0 {
		t.Errorf("the diverged WAL was not kept aside:\n%s", r2.Log())
	}
	// The request is carried out once: a plain restart does not rewind.
	r2.Stop()
	before := strings.Count(r2.Log(), "rewinding onto")
	r2.Restart(t)
	if after := strings.Count(r2.Log(), "rewinding onto"); after != before {
		t.Errorf("a plain restart rewound again (%d rewinds, was %d)", after, before)
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
			// What the operator judges divergence by: a standby that
			// follows replays the primary's timeline.
			if rs.ReplayTimeline != ps.Applied.Timeline {
				t.Errorf("%s: replays timeline %d, streaming timeline %d from a primary on %d", name, rs.ReplayTimeline, rs.Applied.Timeline, ps.Applied.Timeline)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not caught up: replica %+v, primary %+v", name, rs, ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostgresReplicationSlots: KeepSlots makes the slots it is given and
// drops its own others (a user's slot stays, one named like the
// operator's too: orders_cdc); a slot whose replica falls
// further behind than max_slot_wal_keep_size is reported lost, and kept
// until DropSlot.
func TestPostgresReplicationSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testservers.StartPostgresPrimary(t)
	p := primary.Instance(t)
	for _, stmt := range []string{
		"SELECT pg_create_physical_replication_slot('users_own')",
		"SELECT pg_create_physical_replication_slot('orders_cdc')",
		"ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'",
		"ALTER SYSTEM SET wal_keep_size = 0",
		"SELECT pg_reload_conf()",
	} {
		if err := primary.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.KeepSlots(ctx, "orders_", []string{"orders_1", "orders_2"})
	if err != nil || fmt.Sprint(got.Created) != "[orders_1 orders_2]" || len(got.Dropped)+len(got.Lost) > 0 {
		t.Fatalf("first KeepSlots: %+v, %v", got, err)
	}
	got, err = p.KeepSlots(ctx, "orders_", []string{"orders_1"})
	if err != nil || fmt.Sprint(got.Dropped) != "[orders_2]" || len(got.Created)+len(got.Lost) > 0 {
		t.Fatalf("after a scale-down: %+v, %v", got, err)
	}
	if n := primary.Count(t, "pg_replication_slots WHERE slot_name IN ('users_own', 'orders_cdc')"); n != 2 {
		t.Errorf("the user's own slots: %d of 2, want them kept", n)
	}

	// No replica takes orders_1's WAL: past the bound, the slot is lost.
	for range 4 {
		if err := primary.Exec(ctx, "CREATE TABLE IF NOT EXISTS filler AS SELECT 1 AS n; INSERT INTO filler SELECT generate_series(1, 1000); SELECT pg_switch_wal()"); err != nil {
			t.Fatal(err)
		}
	}
	if err := primary.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err = p.KeepSlots(ctx, "orders_", []string{"orders_1"})
		if err != nil || fmt.Sprint(got.Lost) != "[orders_1]" {
			t.Fatalf("a slot past max_slot_wal_keep_size: %+v, %v; want orders_1 lost (and still reported until dropped)", got, err)
		}
	}
	if err := p.DropSlot(ctx, "orders_1"); err != nil {
		t.Fatal(err)
	}
	got, err = p.KeepSlots(ctx, "orders_", []string{"orders_1"})
	if err != nil || fmt.Sprint(got.Created) != "[orders_1]" || len(got.Lost) > 0 {
		t.Fatalf("after DropSlot: %+v, %v; want orders_1 made afresh", got, err)
	}
}
