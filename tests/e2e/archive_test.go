package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup/pitr"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/tests/utils/pitrcheck"
	"example.com/database-operator/tests/utils/testservers"
)

// TestContinuousArchiving: a PostgreSQL Database with spec.backup.archive
// archives its WAL through its primary's own server (archive_command, the
// agent's binary) to an S3 server outside the cluster (versitygw on the
// node's bridge, TLS with a private CA): each segment lands there with its
// entry, and ContinuousArchiving is True. The target goes down for a
// while: the condition turns False with a Warning Event and the metric
// 0, and nothing is lost: once it is back the pending segment is
// archived, the condition is True again (a Normal Event) and the archive
// has every segment, none skipped.
func TestContinuousArchiving(t *testing.T) {
	t.Parallel() // its own Database and S3 server: see parallel in main_test.go
	ctx := context.Background()
	s3 := testservers.StartS3(t, testservers.S3TLS(), testservers.S3Listen(net.IP(node.IP().AsSlice())))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueNamespace(t)}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s3-keys"}, StringData: map[string]string{"accessKeyId": s3.AccessKey, "secretAccessKey": s3.SecretKey}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s3-ca"}, StringData: map[string]string{"ca.crt": string(s3.CA)}},
	} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	db := newDatabase(t, ns.Name, "arch", dbv1.EnginePostgreSQL, "15", func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{
			Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: "cluster-a", ForcePathStyle: true,
				CredentialsSecret: dbv1.S3Credentials{Name: "s3-keys"}, CASecret: &dbv1.SecretKeyRef{Name: "s3-ca"}}},
			Archive: &dbv1.ArchivePolicy{Enabled: true},
		}
	})
	db = waitRunning(t, db, 1, 5*time.Minute)
	dir := filepath.Join(s3.DataDir, s3.Bucket, "cluster-a", wal.Prefix(ns.Name, db.Name, string(db.UID)))
	user, password := credentials(t, db)
	c := pgRW(t, db, user, password)
	switchWAL := func() string {
		t.Helper()
		if _, err := c.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, note text); INSERT INTO orders (note) VALUES ('archived')"); err != nil {
			t.Fatal(err)
		}
		var seg string
		if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
			t.Fatal(err)
		}
		return seg
	}
	archived := func(seg string) func() string {
		return func() string {
			for _, f := range []string{seg, seg + ".json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					return err.Error()
				}
			}
			return ""
		}
	}

	first := switchWAL()
	eventually(t, 2*time.Minute, first+" in the S3 archive", archived(first))
	c1 := waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionTrue, dbv1.ReasonWALArchived)
	if v := metricValue(t, "database_operator_wal_archiving_healthy", ns.Name, db.Name); v != 1 {
		t.Errorf("database_operator_wal_archiving_healthy %v while archiving (%s)", v, c1.Message)
	}

	// The target goes down: the failure is said, never silent.
	s3.Stop()
	down := time.Now()
	pending := switchWAL()
	c2 := waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionFalse, dbv1.ReasonArchivingFailing)
	t.Logf("ContinuousArchiving False %s after the target went down: %s", time.Since(down).Round(time.Second), c2.Message)
	if !strings.Contains(c2.Message, pending) {
		t.Errorf("the condition does not name the segment that waits (%s): %s", pending, c2.Message)
	}
	waitEvent(t, ns.Name, db.Name, "Warning ArchivingFailed")
	if v := metricValue(t, "database_operator_wal_archiving_healthy", ns.Name, db.Name); v != 0 {
		t.Errorf("database_operator_wal_archiving_healthy %v while archiving fails", v)
	}

	// Back: nothing lost.
	s3.Restart(t)
	back := time.Now()
	eventually(t, 3*time.Minute, pending+" archived once the target is back", archived(pending))
	waitCondition(t, db, dbv1.ConditionContinuousArchiving, metav1.ConditionTrue, dbv1.ReasonWALArchived)
	t.Logf("ContinuousArchiving True %s after the target came back", time.Since(back).Round(time.Second))
	waitEventWithin(t, ns.Name, db.Name, "Normal ArchivingResumed", time.Minute)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segments []string
	for _, e := range entries {
		if len(e.Name()) == 24 && wal.ValidName(e.Name()) {
			segments = append(segments, e.Name())
		}
	}
	sort.Strings(segments)
	for i := 1; i < len(segments); i++ {
		prev, _ := strconv.ParseUint(segments[i-1][8:], 16, 64)
		if want := fmt.Sprintf("%s%016X", segments[i-1][:8], prev+1); segments[i] != want {
			t.Errorf("the archive skips from %s to %s: %v", segments[i-1], segments[i], segments)
		}
	}
	if len(segments) == 0 || segments[len(segments)-1] < pending {
		t.Errorf("archived segments %v do not reach %s", segments, pending)
	}
}

// TestPointInTimeRecovery: a PostgreSQL Database archives its WAL to the
// default volume target (its claim made before the pods, which mount it;
// ContinuousArchiving names the segment just closed) and takes a Backup,
// physical by default when archiving. A writer inserts rows on a session
// of its own; the test notes a moment T on the server's clock, the writer
// goes on, a table is dropped. The source reports the window T lies in. A
// new Database bootstrapped from the Backup with recoveryTarget T is
// recovered by a Job before its pods exist, then runs with two instances
// (the replica clones the recovered primary with the new Database's
// replication password): every row acknowledged before T is there, none
// sent after, and the dropped table is back.
func TestPointInTimeRecovery(t *testing.T) {
	t.Parallel() // its own Databases: see parallel in main_test.go
	ctx := context.Background()
	// No segment closes on a timer here (an hour): the last writes reach
	// the archive through the primary's agent's stream or not at all.
	p := newPITRSourceClosing(t, "pitr", 1, 3600)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: p.db.Namespace, Name: p.db.Name + "-backups"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("the default backup claim: %v", err)
	}
	b := p.backup("base")
	// Restore drills every minute: the first runs while the test goes on.
	drillsFrom := time.Now()
	updateDatabase(t, p.db, func(db *dbv1.Database) { db.Spec.Backup.Verify = &dbv1.VerifyPolicy{Schedule: "* * * * *"} })
	w := p.startWriter()
	target := p.moment()
	p.exec("DROP TABLE doomed")
	writes := w.Stop()
	p.switchArchived()
	straddles(t, writes, target)

	eventually(t, time.Minute, "the recoverability window in the status", func() string {
		st := k8sDatabase(t, p.db).Status
		if st.FirstRecoverabilityPoint == nil || st.LastRecoverableTime == nil {
			return fmt.Sprintf("first %v, last %v", st.FirstRecoverabilityPoint, st.LastRecoverableTime)
		}
		// From the second after the Backup completed (whole seconds) to
		// past T.
		if !st.FirstRecoverabilityPoint.Time.Equal(b.Status.CompletedAt.Add(time.Second)) || st.LastRecoverableTime.Time.Before(target.Truncate(time.Second)) {
			return fmt.Sprintf("window %s to %s, want from the second after %s to past %s", st.FirstRecoverabilityPoint, st.LastRecoverableTime, b.Status.CompletedAt, target)
		}
		return ""
	})

	start := time.Now()
	restored := p.recoverTo("pitr-at-t", "base", target, 2)
	restored = waitRunning(t, restored, 2, 6*time.Minute)
	cond := waitCondition(t, restored, dbv1.ConditionRestored, metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded)
	t.Logf("recovered and running with 2 instances %s after its creation: %s", time.Since(start).Round(time.Second), cond.Message)
	waitEvent(t, p.db.Namespace, restored.Name, "Normal RestoreSucceeded")
	recoveredTo(t, restored, writes, target)

	// The drill recovered the base backup with the archive to its end in
	// a Job of its own, opened the database and counted the rows.
	cond = waitCondition(t, p.db, dbv1.ConditionBackupVerified, metav1.ConditionTrue, "Verified")
	if !strings.Contains(cond.Message, "Backup base") || !strings.Contains(cond.Message, "every database opened") {
		t.Errorf("BackupVerified: %s", cond.Message)
	}
	if st := k8sDatabase(t, p.db).Status; st.LastVerifiedTime == nil || st.LastVerifiedTime.Time.Before(drillsFrom.Truncate(time.Second)) {
		t.Errorf("lastVerifiedTime %v, want after %s", st.LastVerifiedTime, drillsFrom)
	}
	waitEvent(t, p.db.Namespace, p.db.Name, "Normal BackupVerified")
	t.Logf("restore drill: %s", cond.Message)
	updateDatabase(t, p.db, func(db *dbv1.Database) { db.Spec.Backup.Verify = nil })

	// The source's machine is lost under writes, and the Database deleted
	// with its volumes: the latest moment the archive holds is recovered.
	lost, point, msg := p.recoveryPoint("base", "pitr-latest", 4*time.Second)
	t.Logf("recovery point after losing every instance and its volume (4 s of writes, segments closed by the timer never): %d acknowledged writes lost, the last recovered one acknowledged %s before the last acknowledged",
		lost, point.Round(time.Millisecond))
	// The writes since the last whole segment came from what the
	// primary's agent streamed of the segment it wrote: the replay ends
	// inside a segment, not where one ends.
	if end, ok := replayEnd(msg); !ok || end%(16<<20) == 0 {
		t.Errorf("the recovery to the latest moment ended at a segment's end (%q): the streamed WAL of the segment the primary wrote was not replayed", msg)
	}
}

// replayEnd reads the LSN a recovery's replay ended at from its Restored
// message.
func replayEnd(msg string) (uint64, bool) {
	_, rest, ok := strings.Cut(msg, "the replay ended at ")
	hi, lo, ok2 := strings.Cut(strings.Fields(rest + " ")[0], "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(strings.TrimRight(lo, ","), 16, 32)
	return h<<32 | l, ok && ok2 && err1 == nil && err2 == nil
}

// recoveryPoint loses the source's primary under write load (its machine:
// the server killed mid-write, nothing more archived) and deletes the
// Database with its volumes, then recovers the latest moment the archive
// holds from Backup backup into a new Database. The writer runs for
// writeFor before the loss. It returns the
// acknowledged writes lost and the recovery point (how long before the
// last acknowledged write the last recovered one was acknowledged). The
// recovered writes must be a prefix of the acknowledged ones. It also
// returns the Restored condition's message (the unpack and replay rates).
func (p *pitrSource) recoveryPoint(backup, name string, writeFor time.Duration) (int, time.Duration, string) {
	t := p.t
	t.Helper()
	ctx := context.Background()
	// The writer stops at its first error: the server is gone.
	writes := loseUnderWrites(t, p.db, pitrcheck.Start(ctx, pgRW(t, p.db, p.user, p.password), func(string, ...any) {}), writeFor)
	start := time.Now()
	restored := newDatabase(t, p.db.Namespace, name, dbv1.EnginePostgreSQL, "15", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: backup}}
	})
	restored = waitRunning(t, restored, 1, 6*time.Minute)
	t.Logf("%s recovered to the end of the archive and running %s after its creation", name, time.Since(start).Round(time.Second))
	restoredMsg := ""
	if c := meta.FindStatusCondition(k8sDatabase(t, restored).Status.Conditions, dbv1.ConditionRestored); c != nil {
		restoredMsg = c.Message
		t.Logf("%s: %s", name, c.Message) // the restore and replay rates
	}
	user, password := credentials(t, restored)
	ids, err := pitrcheck.Rows(ctx, pgRW(t, restored, user, password))
	if err != nil {
		t.Fatal(err)
	}
	lost, holes, point := pitrcheck.Loss(writes, ids)
	if holes > 0 {
		t.Errorf("the recovery holds %d rows but misses %d writes acknowledged before the last of them", len(ids), holes)
	}
	return lost, point, restoredMsg
}

// loseUnderWrites lets w write for writeFor, then loses db's primary's
// machine (the server killed mid-write, nothing more archived), deletes db
// with its volumes and returns the writes.
func loseUnderWrites(t testing.TB, db *dbv1.Database, w *pitrcheck.Writer, writeFor time.Duration) []pitrcheck.Write {
	t.Helper()
	time.Sleep(writeFor)
	primary := k8sDatabase(t, db).Status.CurrentPrimary
	if err := node.Down(db.Namespace, primary); err != nil {
		t.Fatal(err)
	}
	writes := w.Stop()
	if err := k8s.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if len(writes) == 0 {
		t.Fatal("no write acknowledged before the primary was lost")
	}
	return writes
}

// TestPointInTimeRecoveryAcrossTimelines (full tier): the base backup is
// taken on the first primary (timeline 1), a switchover moves the primary
// (timeline 2: the new primary archives its history file and segments),
// T is noted on the new primary. The recovery follows the timeline
// change to T: every row acknowledged before T, on either timeline, is
// there. Then a segment of the archive is corrupted: a recovery to T is
// refused by the Job (CORRUPT ARCHIVE), the Database is Failed, and no pod
// ever starts on a half-recovered or empty data directory.
//
// The old primary archives everything it completed before the switchover
// here (the test waits for it): a segment it completed but had not
// archived when it was demoted is never archived (archive_mode=on), a gap
// the docs state.
func TestPointInTimeRecoveryAcrossTimelines(t *testing.T) {
	fullTier(t)
	t.Parallel()
	ctx := context.Background()
	p := newPITRSource(t, "pitrtl", 2)
	p.backup("base")
	w := p.startWriter()
	time.Sleep(time.Second)
	early := w.Stop()
	p.switchArchived()
	updateDatabase(t, p.db, func(db *dbv1.Database) { db.Spec.Primary = p.db.Name + "-1" })
	eventually(t, 3*time.Minute, "the new primary serving", func() string {
		if got := k8sDatabase(t, p.db); got.Status.CurrentPrimary != p.db.Name+"-1" {
			return fmt.Sprintf("primary %q", got.Status.CurrentPrimary)
		}
		return ""
	})
	waitRunning(t, p.db, 2, 3*time.Minute)
	p.reconnect()
	w = p.startWriter()
	target, atT := p.momentIn()
	p.exec("DROP TABLE doomed")
	writes := append(early, w.Stop()...)
	p.switchArchived()
	straddles(t, writes, target)
	var timeline int64
	if err := p.c.QueryRow(ctx, "SELECT timeline_id FROM pg_control_checkpoint()").Scan(&timeline); err != nil || timeline < 2 {
		t.Fatalf("the new primary's timeline %d (%v): the switchover did not start a new one", timeline, err)
	}

	restored := p.recoverTo("pitrtl-at-t", "base", target, 1)
	restored = waitRunning(t, restored, 1, 6*time.Minute)
	waitCondition(t, restored, dbv1.ConditionRestored, metav1.ConditionTrue, dbv1.ReasonRestoreSucceeded)
	recoveredTo(t, restored, writes, target)

	// A corrupt segment, the one T lies in (an archive timeout may close
	// it before the last switch): the recovery is refused, nothing starts.
	last := atT
	seg := filepath.Join(claimDir(t, p.db.Namespace, p.db.Name+"-backups"), wal.Prefix(p.db.Namespace, p.db.Name, string(p.db.UID)), last)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A restore drill catches it: it cannot replay the archive to its end.
	updateDatabase(t, p.db, func(db *dbv1.Database) { db.Spec.Backup.Verify = &dbv1.VerifyPolicy{Schedule: "* * * * *"} })
	bad := p.recoverTo("pitrtl-corrupt", "base", target, 1)
	cond := waitCondition(t, bad, dbv1.ConditionRestored, metav1.ConditionFalse, dbv1.ReasonRestoreFailed)
	if !strings.Contains(cond.Message, "CORRUPT ARCHIVE") || !strings.Contains(cond.Message, last) {
		t.Errorf("Restored does not name the corrupt segment %s: %s", last, cond.Message)
	}
	waitEvent(t, p.db.Namespace, bad.Name, "Warning RestoreFailed")
	time.Sleep(5 * time.Second) // reconciles after the failure make nothing either
	if got := k8sDatabase(t, bad); got.Status.Phase != dbv1.PhaseFailed {
		t.Errorf("phase %s after a failed recovery, want Failed", got.Status.Phase)
	}
	pods, err := cs.CoreV1().Pods(p.db.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + bad.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if !strings.Contains(pod.Name, "-restore-") {
			t.Errorf("pod %s started after a failed recovery", pod.Name)
		}
	}
	cond = waitCondition(t, p.db, dbv1.ConditionBackupVerified, metav1.ConditionFalse, pitr.ReasonRecoveryFailed)
	if !strings.Contains(cond.Message, "short of the archive's last segment") {
		t.Errorf("BackupVerified: %s", cond.Message)
	}
	waitEvent(t, p.db.Namespace, p.db.Name, "Warning BackupVerificationFailed")
	t.Logf("restore drill over the corrupt segment: %s", cond.Message)
}

// pitrSource is a PostgreSQL Database that archives its WAL to the
// default volume, with a table of timestamped rows and one to drop.
type pitrSource struct {
	t              testing.TB
	db             *dbv1.Database
	user, password string
	c              *pgx.Conn
}

func newPITRSource(t testing.TB, name string, replicas int32) *pitrSource {
	// A segment closed every 10 s under writes.
	return newPITRSourceClosing(t, name, replicas, 10)
}

// newPITRSourceClosing is newPITRSource with the archive timeout (how long
// after a write the segment is closed and archived whole) in seconds.
func newPITRSourceClosing(t testing.TB, name string, replicas, timeout int32) *pitrSource {
	db := createDatabase(t, name, dbv1.EnginePostgreSQL, "15", replicas, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true, TimeoutSeconds: ptr.To(timeout)}}
	})
	p := &pitrSource{t: t, db: waitRunning(t, db, replicas, 5*time.Minute)}
	p.user, p.password = credentials(t, p.db)
	p.reconnect()
	p.exec(`CREATE TABLE events (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TABLE doomed (id int); INSERT INTO doomed VALUES (1)`)
	p.switchArchived()
	return p
}

// reconnect opens the session on -rw again (after a switchover).
func (p *pitrSource) reconnect() { p.c = pgRW(p.t, p.db, p.user, p.password) }

func (p *pitrSource) exec(sql string) {
	p.t.Helper()
	if _, err := p.c.Exec(context.Background(), sql); err != nil {
		p.t.Fatal(err)
	}
}

// switchArchived closes the current WAL segment and waits until the
// primary reports it (or a later one) archived.
func (p *pitrSource) switchArchived() {
	t := p.t
	t.Helper()
	var seg string
	if err := p.c.QueryRow(context.Background(), "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, seg+" archived", func() string {
		for _, cond := range k8sDatabase(t, p.db).Status.Conditions {
			if cond.Type == dbv1.ConditionContinuousArchiving {
				// "<primary> archived <segment> at ...": this one or a later one.
				if _, rest, ok := strings.Cut(cond.Message, " archived "); cond.Status == metav1.ConditionTrue && ok && len(rest) >= len(seg) && rest[:len(seg)] >= seg {
					return ""
				}
				return fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		return "no ContinuousArchiving condition"
	})
}

// backup takes a Backup (physical by default: the Database archives) and
// checks it records the archive.
func (p *pitrSource) backup(name string) *dbv1.Backup {
	t := p.t
	t.Helper()
	newBackup(t, p.db.Namespace, name, p.db.Name)
	b := waitBackup(t, p.db.Namespace, name)
	if b.Status.Phase != dbv1.BackupCompleted || b.Status.Method != dbv1.BackupPhysical || b.Status.ArchivePath != wal.Prefix(p.db.Namespace, p.db.Name, string(p.db.UID)) {
		t.Fatalf("Backup %s: phase %s (%s), method %q, archive %q: want a completed physical backup that records the archive",
			name, b.Status.Phase, b.Status.Message, b.Status.Method, b.Status.ArchivePath)
	}
	return b
}

// moment notes T on the server's clock, with writes on both sides.
func (p *pitrSource) moment() time.Time {
	time.Sleep(1500 * time.Millisecond)
	var target time.Time
	if err := p.c.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&target); err != nil {
		p.t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	return target
}

// momentIn is moment, with the WAL segment the server wrote at T.
func (p *pitrSource) momentIn() (time.Time, string) {
	time.Sleep(1500 * time.Millisecond)
	var target time.Time
	var seg string
	if err := p.c.QueryRow(context.Background(), "SELECT clock_timestamp(), pg_walfile_name(pg_current_wal_insert_lsn())").Scan(&target, &seg); err != nil {
		p.t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	return target, seg
}

// recoverTo creates a Database recovered from Backup backup to target.
func (p *pitrSource) recoverTo(name, backup string, target time.Time, replicas int32) *dbv1.Database {
	return newDatabase(p.t, p.db.Namespace, name, dbv1.EnginePostgreSQL, "15", func(d *dbv1.Database) {
		d.Spec.Replicas = replicas
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: backup},
			RecoveryTarget: &dbv1.RecoveryTarget{Time: target.UTC().Format(time.RFC3339Nano)}}
	})
}

// startWriter inserts rows on a session of its own until stopped.
func (p *pitrSource) startWriter() *pitrcheck.Writer {
	return pitrcheck.Start(context.Background(), pgRW(p.t, p.db, p.user, p.password), p.t.Errorf)
}

// straddles checks the writes lie on both sides of target.
func straddles(t testing.TB, writes []pitrcheck.Write, target time.Time) {
	t.Helper()
	if before, after := pitrcheck.Sides(writes, target); before == 0 || after == 0 {
		t.Fatalf("%d writes acknowledged before T, %d sent after: the writer did not straddle T", before, after)
	}
}

// recoveredTo checks a recovered Database has every write acknowledged
// before target and none sent after, and the table dropped after it back.
func recoveredTo(t testing.TB, db *dbv1.Database, writes []pitrcheck.Write, target time.Time) {
	t.Helper()
	ctx := context.Background()
	user, password := credentials(t, db)
	c := pgRW(t, db, user, password)
	ids, err := pitrcheck.Rows(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if lost, leaked := pitrcheck.Judge(writes, ids, target); lost > 0 || leaked > 0 {
		t.Errorf("recovered to T: %d writes acknowledged before T missing, %d sent after T present (of %d rows)", lost, leaked, len(ids))
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM doomed").Scan(&n); err != nil || n != 1 {
		t.Errorf("the table dropped after T: %d rows (%v), want it back", n, err)
	}
	before, _ := pitrcheck.Sides(writes, target)
	t.Logf("%s recovered to T: %d rows, all %d acknowledged before T among them", db.Name, len(ids), before)
}
