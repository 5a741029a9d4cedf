package backup_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/binlog"
	"example.com/database-operator/internal/backup/pitr"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/pitrcheck"
	"example.com/database-operator/tests/utils/testservers"
)

// TestMariaDBPhysicalPointInTimeRecovery: a physical backup of a MariaDB
// replica (as the operator takes it), copied by its agent (mariadb-backup,
// streamed over the peer channel) while a writer inserts rows on the
// primary and the primary's binary logs are archived.
// A corrupted copy is refused before any data directory exists. A
// recovery to a moment T after the backup (unpacked, prepared, the binary
// log replayed by a server of the recovery's own) holds every row
// acknowledged before T and none sent after T's second, and the table
// dropped after T; its accounts have the new Database's passwords, it
// replicates from nobody with an empty GTID history, and a replica clones
// from it and follows its writes.
func TestMariaDBPhysicalPointInTimeRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	primary := testservers.StartMariaDBPrimary(t)
	fillMariaDB(t, ctx, primary, 2000)
	// A replica (cloned before the source's passwords change: its start
	// script uses them).
	replica := primary.StartReplica(t)
	mariaExec(t, ctx, primary, "CREATE TABLE shop.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		// The source's own passwords, which the recovered server must not keep.
		"ALTER USER 'root'@'localhost' IDENTIFIED BY 'source-root-pw'",
		"ALTER USER '"+engine.ReplicationUser+"'@'%' IDENTIFIED BY 'source-repl-pw'")

	root := t.TempDir()
	store := storage.NewDir(root)
	arch := binlog.Archive{Store: store, Prefix: binlog.Prefix("prod", "shop", "uid-1")}
	db := mariaDB(t, ctx, primary)
	defer db.Close()
	archiver, stopArchiver := startArchiver(t, ctx, primary, db, arch, "shop-0-a")

	// A replica's agent, serving the peer channel's physical backup: the
	// copy's position is the replica's, in the primary's GTIDs.
	const replicationPassword = "peer-channel-secret"
	peer := httptest.NewServer(agent.BaseBackupHandler(agent.Config{Engine: dbv1.EngineMariaDB, Pod: replica.Pod,
		Server:    engine.Endpoint{Host: "127.0.0.1", Port: replica.Port},
		Superuser: engine.Credentials{User: "root", Password: testservers.MariaDBRootPassword},
		PeerToken: agent.PeerToken(replicationPassword), Log: testr.New(t)}))
	defer peer.Close()
	src := mariaServer(replica)
	src.AgentAddr = strings.TrimPrefix(peer.URL, "http://")

	writer := mariaWriter(t, ctx, primary)
	time.Sleep(time.Second)
	take := func(name string) (*backup.Manifest, error) {
		m, _, err := backup.Run(ctx, backup.Options{Server: src, Store: store, Namespace: "prod", Database: "shop", Name: name, Method: backup.MethodPhysical})
		return m, err
	}
	t.Setenv(backup.EnvReplicationPassword, "a wrong one")
	if _, err := take("refused"); err == nil || backup.ReasonOf(err) != backup.ReasonDatabaseUnreachable || !strings.Contains(err.Error(), "401") {
		t.Errorf("a physical backup with the wrong peer token: %v, want the agent's refusal", err)
	}
	t.Setenv(backup.EnvReplicationPassword, replicationPassword)
	m, err := take("phys-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 1 || m.Files[0].Kind != backup.KindMariaDBBackup || m.Files[0].Size < 1<<20 || m.Position == "" {
		t.Fatalf("the physical backup's manifest: files %+v, position %q: want one mariadb-backup stream and its GTID position", m.Files, m.Position)
	}
	t.Logf("physical backup: %d bytes, position %s", m.Files[0].Size, m.Position)
	// Account statements in the binary log after the copy: the replay
	// applies them (a server without grant checks refuses them).
	mariaExec(t, ctx, primary, "CREATE USER 'reporter'@'%' IDENTIFIED BY 'reporter-pw'", "GRANT SELECT ON shop.* TO 'reporter'@'%'")
	time.Sleep(2 * time.Second)
	target := time.Now()
	time.Sleep(1500 * time.Millisecond)
	mariaExec(t, ctx, primary, "DROP TABLE shop.orders") // the mistake
	time.Sleep(time.Second)
	writes := writer.Stop()
	stopArchiver()
	archiveAll(t, ctx, primary, archiver)

	path := backup.Path("prod", "shop", "phys-1")
	options := func(datadir string) pitr.MariaDBOptions {
		return pitr.MariaDBOptions{Store: store, Path: path, Archive: arch.Prefix, Target: binlog.Target{Time: target},
			DataDir: datadir, Scratch: t.TempDir(), ServerArgs: []string{"--user=root"}, Log: t.Logf,
			Superuser: pitr.Account{Name: "root", Password: testservers.MariaDBRootPassword},
			Accounts:  []pitr.Account{{Name: engine.ReplicationUser, Password: testservers.ReplicationPassword, Replication: true}}}
	}

	t.Run("a corrupted copy is refused", func(t *testing.T) {
		corruptWhileTesting(t, filepath.Join(root, path, m.Files[0].Name))
		datadir := filepath.Join(t.TempDir(), "data")
		_, err := pitr.RecoverMariaDB(ctx, options(datadir))
		if backup.ReasonOf(err) != backup.ReasonCorrupt {
			t.Errorf("recovering a corrupted copy: %v (reason %s), want %s", err, backup.ReasonOf(err), backup.ReasonCorrupt)
		}
		if left, _ := filepath.Glob(datadir + "*"); len(left) > 0 {
			t.Errorf("a refused recovery left %v", left)
		}
	})

	var out *pitr.MariaDBOutcome
	topo := testservers.NewTopology(t)
	topo.SetPrimary(t, "copy-0")
	restored := testservers.StartMariaDBOn(t, topo, "copy-0", func(datadir string) {
		if out, err = pitr.RecoverMariaDB(ctx, options(datadir)); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%s", pitr.MariaDBResultOf(options(""), out, nil).Message)
	rows := mariaRows(t, ctx, restored)
	lost, _ := pitrcheck.Judge(writes, rows, target)
	_, leaked := pitrcheck.Judge(writes, rows, target.Truncate(time.Second).Add(time.Second))
	before, after := pitrcheck.Sides(writes, target)
	if lost > 0 || leaked > 0 || before == 0 || after == 0 || out.Replay == nil || out.Replay.Transactions == 0 {
		t.Errorf("recovered to %s: %d acknowledged writes lost, %d later writes leaked (%d before, %d after); replay %+v",
			target.Format(time.RFC3339Nano), lost, leaked, before, after, out.Replay)
	}
	if !ordersExist(t, ctx, restored) {
		t.Error("the table dropped after T is gone from the recovery")
	}
	rdb := mariaDB(t, ctx, restored)
	defer rdb.Close()
	var localRoot int
	if err := rdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE user = 'root' AND host = 'localhost' AND authentication_string = PASSWORD(?)",
		testservers.MariaDBRootPassword).Scan(&localRoot); err != nil || localRoot != 1 {
		t.Errorf("root@localhost with the new Database's password: %d accounts (%v), want 1", localRoot, err)
	}
	var grants int
	if err := rdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.db WHERE user = 'reporter' AND db = 'shop' AND select_priv = 'Y'").Scan(&grants); err != nil || grants != 1 {
		t.Errorf("the grant replayed from the binary log: %d (%v), want 1", grants, err)
	}
	var slavePos string
	if err := rdb.QueryRowContext(ctx, "SELECT @@gtid_slave_pos").Scan(&slavePos); err != nil || slavePos != "" {
		t.Errorf("the recovered server's gtid_slave_pos: %q (%v), want none: it replicates from nobody", slavePos, err)
	}
	if st, err := restored.Instance(t).Status(ctx); err != nil || st.Role != engine.RolePrimary || st.Source != "" {
		t.Errorf("the recovered server's status: %+v (%v), want a primary following nobody", st, err)
	}

	// A replica clones from it with the replication account's new
	// password, and follows its writes.
	follower := restored.StartReplica(t)
	mariaExec(t, ctx, restored, "INSERT INTO shop.events () VALUES ()")
	want := len(rows) + 1
	deadline := time.Now().Add(time.Minute)
	for follower.Count(t, "shop.events") != want {
		if time.Now().After(deadline) {
			t.Fatalf("the follower of the recovered server holds %d events, want %d", follower.Count(t, "shop.events"), want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
