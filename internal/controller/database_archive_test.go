package controller

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/engine"
)

func TestS3Port(t *testing.T) {
	for ep, want := range map[string]int64{
		"https://s3.example.com": 443, "http://minio:9000": 9000, "http://minio": 80, "s3.example.com:8443": 8443,
		"s3.example.com": 443, "https://[::1]:9443/": 9443,
	} {
		if got := s3Port(ep); got != want {
			t.Errorf("s3Port(%q) = %d, want %d", ep, got, want)
		}
	}
}

// TestArchiveInTheChart: with spec.backup.archive the primary's server
// archives through the agent's binary (archive_mode, archive_command,
// archive_timeout), its container gets the target's credentials and
// volumes, and the network policy lets it reach the S3 endpoint's port.
func TestArchiveInTheChart(t *testing.T) {
	r := loadChart(t)
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true},
			Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "http://minio.test:9000", Bucket: "wal", AllowInsecureHTTP: true,
				CredentialsSecret: dbv1.S3Credentials{Name: "s3-keys"}}}}
	})
	objs, err := desiredObjects(r, db, ValueOptions{OperatorImage: testOperatorImage})
	if err != nil {
		t.Fatal(err)
	}
	m := byKindName(objs)
	data, _, _ := unstructured.NestedStringMap(m["ConfigMap/orders-config"].Object, "data")
	for _, line := range []string{"archive_mode = on\n", "archive_command = '/agent/manager wal-push --s3-endpoint=http://minio.test:9000 --s3-bucket=wal --prefix=shop/orders/_wal/uid-1 %p'\n", "archive_timeout = 60\n"} {
		if !strings.Contains(data["postgresql.conf"], line) {
			t.Errorf("postgresql.conf lacks %q:\n%s", line, data["postgresql.conf"])
		}
	}
	containers, _, _ := unstructured.NestedSlice(m["StatefulSet/orders"].Object, "spec", "template", "spec", "containers")
	var envNames []string
	for _, c := range containers {
		c := c.(map[string]any)
		if c["name"] != "database" {
			continue
		}
		for _, e := range c["env"].([]any) {
			envNames = append(envNames, e.(map[string]any)["name"].(string))
		}
	}
	if got := strings.Join(envNames, ","); !strings.Contains(got, "AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY") {
		t.Errorf("the database container's environment %s lacks the S3 keys", got)
	}
	egress, _, _ := unstructured.NestedSlice(m["NetworkPolicy/orders"].Object, "spec", "egress")
	open := false
	for _, rule := range egress {
		for _, p := range rule.(map[string]any)["ports"].([]any) {
			if p.(map[string]any)["port"] == int64(9000) {
				open = true
			}
		}
	}
	if !open {
		t.Errorf("the network policy does not let the servers reach the S3 endpoint's port 9000: %v", egress)
	}

	// Without archiving: none of it.
	objs, err = desiredObjects(r, newDB(dbv1.EnginePostgreSQL), ValueOptions{OperatorImage: testOperatorImage})
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ = unstructured.NestedStringMap(byKindName(objs)["ConfigMap/orders-config"].Object, "data")
	if strings.Contains(data["postgresql.conf"], "archive_") {
		t.Errorf("archiving configured without spec.backup.archive:\n%s", data["postgresql.conf"])
	}
}

// archiverInstance is a primary whose archiver says what the test sets.
type archiverInstance struct {
	statusInstance
	a   *engine.Archiver
	err error
}

func (i archiverInstance) Archiver(context.Context) (engine.Archiver, error) { return *i.a, i.err }

// TestContinuousArchivingCondition: the condition follows the primary's
// archiver, and a failure is said in a Warning Event once when it starts,
// a recovery in a Normal one; without archiving there is no condition.
func TestContinuousArchivingCondition(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Replicas = 2
		db.Status.CurrentPrimary = "orders-0"
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	objs := readyPods(db)
	for _, o := range objs {
		o.(*corev1.Pod).Status.ContainerStatuses = []corev1.ContainerStatus{{Name: databaseContainerName, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-credentials"}, Data: map[string][]byte{
		corev1.BasicAuthUsernameKey: []byte("postgres"), corev1.BasicAuthPasswordKey: []byte("secret")}}
	r, _ := newFakeReconciler(t, new(int), append([]client.Object{db, creds}, objs...)...)
	arch := &engine.Archiver{}
	r.Instances = &InstanceConnector{
		Client: r.Client,
		Resolve: func(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
			return engine.Endpoint{Host: pod.Name, Port: port}, nil
		},
		Open: func(context.Context, dbv1.Engine, engine.Endpoint, engine.Credentials, engine.Options) (engine.Instance, error) {
			return archiverInstance{a: arch}, nil
		},
	}
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	step := func(a engine.Archiver) (*metav1.Condition, []string) {
		*arch = a
		obs := &observed{instances: newInstanceSet(r.Instances, db)}
		defer obs.instances.close()
		for _, o := range objs {
			obs.pods = append(obs.pods, *o.(*corev1.Pod))
		}
		if err := r.observeArchive(ctx, db, obs); err != nil {
			t.Fatal(err)
		}
		db.Status = computeStatus(db, obs)
		var got []string
		for rec := r.Recorder.(*events.FakeRecorder); len(rec.Events) > 0; {
			got = append(got, <-rec.Events)
		}
		return meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionContinuousArchiving), got
	}
	for _, tc := range []struct {
		name    string
		a       engine.Archiver
		status  metav1.ConditionStatus
		reason  string
		message string
		event   string
	}{
		{"not restarted with archive_mode yet", engine.Archiver{Mode: "off"}, metav1.ConditionUnknown, dbv1.ReasonArchivingNotStarted, "without archive_mode", ""},
		{"nothing archived yet", engine.Archiver{Mode: "on"}, metav1.ConditionUnknown, dbv1.ReasonNothingArchivedYet, "no WAL segment", ""},
		{"archiving", engine.Archiver{Mode: "on", Archived: 3, LastArchived: "000000010000000000000003", LastArchivedAt: t0},
			metav1.ConditionTrue, dbv1.ReasonWALArchived, "orders-0 archived 000000010000000000000003", ""},
		{"the target fails", engine.Archiver{Mode: "on", Archived: 3, LastArchived: "000000010000000000000003", LastArchivedAt: t0,
			Failed: 1, LastFailed: "000000010000000000000004", LastFailedAt: t0.Add(time.Minute)},
			metav1.ConditionFalse, dbv1.ReasonArchivingFailing, "fails to archive 000000010000000000000004", "Warning ArchivingFailed"},
		{"it goes on failing: no second Event", engine.Archiver{Mode: "on", Archived: 3, LastArchived: "000000010000000000000003", LastArchivedAt: t0,
			Failed: 7, LastFailed: "000000010000000000000004", LastFailedAt: t0.Add(2 * time.Minute)},
			metav1.ConditionFalse, dbv1.ReasonArchivingFailing, "7 failures", ""},
		{"the target is back", engine.Archiver{Mode: "on", Archived: 5, LastArchived: "000000010000000000000005", LastArchivedAt: t0.Add(3 * time.Minute),
			Failed: 7, LastFailed: "000000010000000000000004", LastFailedAt: t0.Add(2 * time.Minute)},
			metav1.ConditionTrue, dbv1.ReasonWALArchived, "000000010000000000000005", "Normal ArchivingResumed"},
	} {
		c, events := step(tc.a)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
			t.Errorf("%s: condition %+v, want %s %s holding %q", tc.name, c, tc.status, tc.reason, tc.message)
		}
		switch {
		case tc.event == "" && len(events) > 0:
			t.Errorf("%s: Events %q, want none", tc.name, events)
		case tc.event != "" && (len(events) != 1 || !strings.HasPrefix(events[0], tc.event)):
			t.Errorf("%s: Events %q, want %s", tc.name, events, tc.event)
		}
	}

	// The primary's agent streams the segment its server writes: the
	// recoverable time follows the stream, and a failing stream is said
	// (nothing is lost: whole segments still go).
	repl := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-replication"}, Data: map[string][]byte{
		corev1.BasicAuthUsernameKey: []byte("streaming_replica"), corev1.BasicAuthPasswordKey: []byte("r")}}
	if err := r.Create(ctx, repl); err != nil {
		t.Fatal(err)
	}
	streamed := t0.Add(4*time.Minute + 1500*time.Millisecond)
	r.Archivers = func(context.Context, string, string, *tls.Config) (agent.BinlogArchiving, error) {
		return agent.BinlogArchiving{Enabled: true, WALStream: &agent.WALStreamStatus{RecoverableAt: streamed, LastError: "uploading WAL 0/6000000 to 0/6001000: target down"}}, nil
	}
	whole := engine.Archiver{Mode: "on", Archived: 5, LastArchived: "000000010000000000000005", LastArchivedAt: t0.Add(3 * time.Minute)}
	if c, _ := step(whole); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "streaming the segment it writes fails (uploading WAL 0/6000000") {
		t.Errorf("a failing stream: condition %+v, want True saying the stream fails", c)
	}
	if got := db.Status.LastRecoverableTime; got == nil || !got.Time.Equal(streamed.Truncate(time.Second)) {
		t.Errorf("lastRecoverableTime %v, want the stream's %s", got, streamed.Truncate(time.Second))
	}

	db.Spec.Backup.Archive.Enabled = false
	if c, _ := step(engine.Archiver{}); c != nil {
		t.Errorf("archiving turned off: the condition %+v stays", c)
	}
}

// TestArchiveTargetClaim: archiving to the default volume target creates
// its claim (the database pods mount it and would not start without it);
// a named claim, an S3 target or no archiving creates none.
func TestArchiveTargetClaim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		backup *dbv1.BackupPolicy
		want   bool
	}{
		{"the default volume", &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}, true},
		{"a named claim", &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}, Target: dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{ClaimName: "mine"}}}, false},
		{"S3", &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}, Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "https://s3.test", Bucket: "b"}}}, false},
		{"no archiving", &dbv1.BackupPolicy{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Spec.Backup = tc.backup })
			r, c := newFakeReconciler(t, new(int), db)
			if err := r.reconcileArchiveTarget(context.Background(), db, &observed{}); err != nil {
				t.Fatal(err)
			}
			pvcs := &corev1.PersistentVolumeClaimList{}
			if err := c.List(context.Background(), pvcs, client.InNamespace(db.Namespace)); err != nil {
				t.Fatal(err)
			}
			if got := len(pvcs.Items) == 1 && pvcs.Items[0].Name == "orders-backups"; got != tc.want || len(pvcs.Items) > 1 {
				t.Errorf("claims %v, want orders-backups created: %t", pvcs.Items, tc.want)
			}
		})
	}
}

// TestRecoverabilityWindow: from the oldest completed physical Backup that
// records the archive to the primary's last archived segment; none
// without archiving.
func TestRecoverabilityWindow(t *testing.T) {
	at := func(minute int) *metav1.Time {
		v := metav1.NewTime(time.Date(2026, 12, 7, 0, minute, 0, 0, time.UTC))
		return &v
	}
	b := func(phase dbv1.BackupPhase, method dbv1.BackupMethod, archive string, done *metav1.Time) dbv1.Backup {
		return dbv1.Backup{Status: dbv1.BackupStatus{Phase: phase, Method: method, ArchivePath: archive, CompletedAt: done}}
	}
	backups := []dbv1.Backup{
		b(dbv1.BackupCompleted, dbv1.BackupPhysical, "ns/db/_wal/u", at(30)),
		b(dbv1.BackupCompleted, dbv1.BackupLogical, "", at(1)),           // a dump: no recovery from it
		b(dbv1.BackupFailed, dbv1.BackupPhysical, "ns/db/_wal/u", at(2)), // failed
		b(dbv1.BackupCompleted, dbv1.BackupPhysical, "", at(3)),          // no archive
		b(dbv1.BackupCompleted, dbv1.BackupPhysical, "ns/db/_wal/u", at(10)),
		b(dbv1.BackupCompleted, dbv1.BackupPhysical, "ns/db/_wal/earlier-namesake", at(4)),
	}
	archiving := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	obs := &observed{firstRecoverable: firstRecoverable(backups, recordedArchive{path: "ns/db/_wal/u"}), backupsObserved: true,
		archive: &archiveState{status: metav1.ConditionTrue, lastArchived: time.Date(2026, 12, 7, 0, 45, 3, 900, time.UTC)}}
	st := &dbv1.DatabaseStatus{}
	setRecoverability(st, archiving, obs)
	// The next whole second: a Backup's completion time has whole seconds.
	if want := metav1.NewTime(at(10).Add(time.Second)); st.FirstRecoverabilityPoint == nil || !st.FirstRecoverabilityPoint.Equal(&want) {
		t.Errorf("firstRecoverabilityPoint %v, want %v", st.FirstRecoverabilityPoint, want)
	}
	// Once no such Backup is left, no window starts.
	setRecoverability(st, archiving, &observed{backupsObserved: true})
	if st.FirstRecoverabilityPoint != nil {
		t.Errorf("firstRecoverabilityPoint %v with no Backup left", st.FirstRecoverabilityPoint)
	}
	if st.LastRecoverableTime == nil || !st.LastRecoverableTime.Time.Equal(time.Date(2026, 12, 7, 0, 45, 3, 0, time.UTC)) {
		t.Errorf("lastRecoverableTime %v, want 00:45:03", st.LastRecoverableTime)
	}
	setRecoverability(st, newDB(dbv1.EnginePostgreSQL), obs)
	if st.FirstRecoverabilityPoint != nil || st.LastRecoverableTime != nil {
		t.Errorf("a window without archiving: %v to %v", st.FirstRecoverabilityPoint, st.LastRecoverableTime)
	}
}

// A gap in MariaDB's binary log archive (a file lost before it was
// archived) turns ContinuousArchiving False until a Backup completes
// after it: no recovery crosses it, and that must not be silent.
func TestArchiveGapCondition(t *testing.T) {
	db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
	})
	gapAt := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	archive := &archiveState{status: metav1.ConditionTrue, reason: dbv1.ReasonBinlogArchived, message: "archived",
		gap: "binlog.000009 begins at 0-1-90, the file archived before it ended at 0-1-70", gapAt: gapAt}
	for _, tt := range []struct {
		name       string
		lastBackup *metav1.Time
		want       metav1.ConditionStatus
	}{
		{"no backup since", ptr.To(metav1.NewTime(gapAt.Add(-time.Hour))), metav1.ConditionFalse},
		{"no backup at all", nil, metav1.ConditionFalse},
		{"a backup after it", ptr.To(metav1.NewTime(gapAt.Add(time.Minute))), metav1.ConditionTrue},
	} {
		st := &dbv1.DatabaseStatus{}
		setArchiveCondition(st, db, &observed{archive: archive, lastSuccessfulBackup: tt.lastBackup})
		c := meta.FindStatusCondition(st.Conditions, dbv1.ConditionContinuousArchiving)
		if c == nil || c.Status != tt.want || (tt.want == metav1.ConditionFalse) != (c.Reason == dbv1.ReasonArchiveGap && strings.Contains(c.Message, "binlog.000009")) {
			t.Errorf("%s: %+v", tt.name, c)
		}
	}
}
