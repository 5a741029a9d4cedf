package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/testservers"
)

func itoa(n int) string { return strconv.Itoa(n) }

// TestMariaDBFailoverPrimitives: GTID replication set up by Follow, fencing
// that stops application writes, promotion after the primary is lost, the
// other replica re-pointed, and an old primary that took a write after
// losing its role detected as diverged.
func TestMariaDBFailoverPrimitives(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The replicas' start scripts clone the primary and start GTID replication.
	primary := testservers.StartMariaDBPrimary(t)
	r1, r2 := primary.StartReplica(t), primary.StartReplica(t)
	p, i1, i2 := primary.Instance(t), r1.Instance(t), r2.Instance(t)
	root := engine.Credentials{User: "root", Password: testservers.MariaDBRootPassword}
	var pst engine.Status // the primary's last status before it is lost

	if !t.Run("the replicas follow the primary", func(t *testing.T) {
		if err := primary.AppExec(ctx, "CREATE DATABASE shop"); err != nil {
			t.Fatal(err)
		}
		if err := primary.AppExec(ctx, "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)"); err != nil {
			t.Fatal(err)
		}
		for range 100 {
			if err := primary.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('before failover')"); err != nil {
				t.Fatal(err)
			}
		}
		waitCaughtUp(t, ctx, p, i1, "r1")
		waitCaughtUp(t, ctx, p, i2, "r2")
		if st, _ := i1.Status(ctx); !st.ReadOnly || !strings.HasSuffix(st.Source, ":"+itoa(primary.Port)) {
			t.Errorf("replica status %+v: want read-only, streaming from %d", st, primary.Port)
		}
		// A replica refuses application writes.
		if err := r1.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('on a replica')"); err == nil || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("application write on a replica: %v", err)
		}
	}) {
		return
	}

	// Fence the primary: application writes fail.
	if !t.Run("fencing stops application writes", func(t *testing.T) {
		if err := p.Fence(ctx); err != nil {
			t.Fatal(err)
		}
		if err := primary.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('after fence')"); err == nil || !strings.Contains(err.Error(), "read-only") {
			t.Fatalf("application write on a fenced primary: %v", err)
		}
		if err := p.Unfence(ctx); err != nil {
			t.Fatal(err)
		}
		if err := primary.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('acknowledged last')"); err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(t, ctx, p, i1, "r1 again")
		pst, _ = p.Status(ctx)
	}) {
		return
	}

	// Lose the primary; promote r1 (which has applied everything); r2 follows it.
	if !t.Run("failover to r1", func(t *testing.T) {
		primary.Kill()
		if err := i1.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		s1, _ := i1.Status(ctx)
		if s1.Role != engine.RolePrimary || s1.ReadOnly {
			t.Fatalf("promoted status %+v", s1)
		}
		if c, err := i1.Compare(s1.Applied, pst.Applied); err != nil || c != 0 {
			t.Errorf("the promoted replica is at %s, the lost primary was at %s (%d, %v): acknowledged writes lost", s1.Applied, pst.Applied, c, err)
		}
		if err := r1.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('on the new primary')"); err != nil {
			t.Fatalf("write on the promoted replica: %v", err)
		}
		if err := i2.Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: r1.Port}, root); err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(t, ctx, i1, i2, "r2 after follow")
		if n1, n2 := r1.Count(t, "shop.orders"), r2.Count(t, "shop.orders"); n1 != 102 || n2 != 102 {
			t.Errorf("rows: new primary %d, other replica %d; want 102 each", n1, n2)
		}
	}) {
		return
	}

	// The old primary comes back and takes a write it should not have: its
	// GTID position has diverged from the new primary's.
	if !t.Run("the old primary's errant write diverges", func(t *testing.T) {
		primary.Restart(t)
		old := primary.Instance(t)
		if err := old.Unfence(ctx); err != nil {
			t.Fatal(err)
		}
		if err := primary.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('errant')"); err != nil {
			t.Fatal(err)
		}
		ost, _ := old.Status(ctx)
		s1, _ := i1.Status(ctx)
		if _, err := i1.Compare(ost.Applied, s1.Applied); !errors.Is(err, engine.ErrDiverged) {
			t.Errorf("old primary %s vs new primary %s: %v, want diverged", ost.Applied, s1.Applied, err)
		}
	}) {
		return
	}

	// The operator asks for a rebuild: the start script sets the diverged
	// data aside and clones the new primary.
	t.Run("rebuild on request", func(t *testing.T) {
		primary.Stop()
		primary.Topology().Write(t, map[string]string{"primary": r1.Pod, "rebuild-" + primary.Pod: "20261203T000000Z"})
		primary.Restart(t)
		if aside, _ := filepath.Glob(primary.Data() + ".rebuild-*"); len(aside) != 1 {
			t.Errorf("data set aside: %v, want one directory", aside)
		}
		rebuilt := primary.Instance(t)
		waitCaughtUp(t, ctx, i1, rebuilt, "the rebuilt former primary")
		if n := primary.Count(t, "shop.orders"); n != 102 {
			t.Errorf("rebuilt former primary has %d rows, want the new primary's 102 (without the errant one)", n)
		}
		if err := primary.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('on a rebuilt replica')"); err == nil || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("application write on the rebuilt replica: %v", err)
		}
	})
}

// TestMariaDBFormerPrimaryFollows: a former primary that took no write
// after losing its role is re-attached by Follow (its replication position
// starts from its own binary log) and replicates what it missed.
func TestMariaDBFormerPrimaryFollows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testservers.StartMariaDBPrimary(t)
	r1 := primary.StartReplica(t)
	p, i1 := primary.Instance(t), r1.Instance(t)
	for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)",
		"INSERT INTO shop.orders (note) VALUES ('one')"} {
		if err := primary.AppExec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, ctx, p, i1, "r1")
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := i1.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r1.AppExec(ctx, "INSERT INTO shop.orders (note) VALUES ('two')"); err != nil {
		t.Fatal(err)
	}
	if err := p.Follow(ctx, engine.Endpoint{Host: "127.0.0.1", Port: r1.Port}, engine.Credentials{User: "root", Password: testservers.MariaDBRootPassword}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, i1, p, "the former primary")
	if n := primary.Count(t, "shop.orders"); n != 2 {
		t.Errorf("former primary has %d rows, want 2", n)
	}
}

// TestMariaDBSourceLost: a replica whose primary purged the binary logs it
// still needs reports why it can never catch up (SourceLost); a healthy
// one reports nothing.
func TestMariaDBSourceLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testservers.StartMariaDBPrimary(t)
	r := p.StartReplica(t)
	replica := r.Instance(t)
	if st, err := replica.Status(ctx); err != nil || st.SourceLost != "" {
		t.Fatalf("a healthy replica: %+v (%v)", st, err)
	}
	for _, stmt := range []string{"CREATE DATABASE lost", "CREATE TABLE lost.t (i INT PRIMARY KEY)"} {
		if err := p.RootExec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RootExec(ctx, "STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"INSERT INTO lost.t VALUES (1)", "FLUSH BINARY LOGS"} {
		if err := p.RootExec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	db, err := p.DB(ctx, "root", testservers.MariaDBRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := testservers.PurgeBinaryLogs(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := r.RootExec(ctx, "START SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	var st engine.Status
	for range 100 {
		var err error
		if st, err = replica.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if st.SourceLost != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(st.SourceLost, "1236") {
		t.Errorf("SourceLost %q, want the server's error 1236", st.SourceLost)
	}
}

// TestMariaDBReloadTLSWritesNoTransaction: the agent reloads a renewed
// certificate on every instance, replicas included. The reload must not
// reach the binary log: a replica's logged FLUSH is a transaction of its
// own (its server id), and with strict GTIDs the primary's next
// transaction then stops its replication (found on real pods: FLUSH SSL).
func TestMariaDBReloadTLSWritesNoTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testservers.StartMariaDBPrimary(t)
	r := p.StartReplica(t)
	replica := r.Instance(t)
	db, err := r.DB(ctx, "root", testservers.MariaDBRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pos := func() string {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := pos()
	if err := replica.ReloadTLS(ctx); err != nil {
		t.Fatal(err)
	}
	if after := pos(); after != before {
		t.Fatalf("reloading TLS wrote a transaction on the replica: gtid_binlog_pos %q, was %q", after, before)
	}
	// And replication goes on.
	for _, stmt := range []string{"CREATE DATABASE reload", "CREATE TABLE reload.t (i INT PRIMARY KEY)", "INSERT INTO reload.t VALUES (1)"} {
		if err := p.RootExec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM reload.t").Scan(&n); err == nil && n == 1 {
			break
		}
		if i > 100 {
			st, err := replica.Status(ctx)
			t.Fatalf("the row did not reach the replica: %+v (%v)", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
