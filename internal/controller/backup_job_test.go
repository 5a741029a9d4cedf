package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

func backupTestDB() (*dbv1.Database, *corev1.Pod) {
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "orders"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMariaDB, Storage: dbv1.StorageSpec{Size: resource.MustParse("5Gi")}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "orders-1"}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptrTo(int64(999)), FSGroup: ptrTo(int64(999))},
		Containers:      []corev1.Container{{Name: "database", Image: "mariadb:11.4"}},
	}}
	return db, pod
}

func ptrTo[T any](v T) *T { return &v }

func TestBuildBackupJobVolume(t *testing.T) {
	db, pod := backupTestDB()
	job, err := buildJob(jobRequest{name: "b1", component: componentBackup, db: db, instance: pod, deadline: 600,
		args: []string{"--name=b1"}}, "operator:v1")
	if err != nil {
		t.Fatal(err)
	}
	spec := job.Spec.Template.Spec
	c := spec.Containers[0]
	wantArgs := "backup --engine=mariadb --host=orders-1.orders-headless.prod.svc --port=3306 --user=root --result-file=/dev/termination-log --dir=/backups --name=b1"
	if got := strings.Join(c.Args, " "); got != wantArgs {
		t.Errorf("args\n%s\nwant\n%s", got, wantArgs)
	}
	switch {
	case c.Image != "mariadb:11.4" || c.Command[0] != jobBinary:
		t.Errorf("container %s %v", c.Image, c.Command)
	case spec.InitContainers[0].Image != "operator:v1" || strings.Join(spec.InitContainers[0].Command, " ") != "/manager copy-binary "+jobBinary:
		t.Errorf("init container %+v", spec.InitContainers[0])
	case *job.Spec.BackoffLimit != 0 || *job.Spec.ActiveDeadlineSeconds != 600:
		t.Errorf("backoff %d deadline %d", *job.Spec.BackoffLimit, *job.Spec.ActiveDeadlineSeconds)
	case spec.Volumes[2].PersistentVolumeClaim.ClaimName != "orders-backups":
		t.Errorf("claim %+v", spec.Volumes[2])
	case c.Env[0].Name != "DATABASE_PASSWORD" || c.Env[0].ValueFrom.SecretKeyRef.Name != "orders-credentials" || c.Env[0].Value != "":
		t.Errorf("password %+v", c.Env[0])
	case *spec.SecurityContext.RunAsUser != 999 || !*c.SecurityContext.ReadOnlyRootFilesystem || *spec.AutomountServiceAccountToken:
		t.Errorf("security %+v %+v", spec.SecurityContext, c.SecurityContext)
	case job.Labels[labelName] == chartName:
		t.Error("a Job pod would be taken for an instance")
	}
	if _, err := buildJob(jobRequest{name: "b1", component: componentBackup, db: db, instance: pod}, ""); err == nil || !strings.Contains(err.Error(), "RELATED_IMAGE_MANAGER") {
		t.Errorf("no operator image: %v", err)
	}
}

// TestBuildJobVerifiesTheServer: against an instance that serves the
// Database's certificate, the Job verifies it with the CA bundle, mounted
// alone (never the server's key), by the host name the Job connects to.
func TestBuildJobVerifiesTheServer(t *testing.T) {
	db, pod := backupTestDB()
	pod.Spec.Hostname, pod.Spec.Subdomain = "orders-1", "orders-headless"
	pod.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "orders-tls"}}}}
	if got := podServerName(db, pod); got != "orders-1.orders-headless.prod.svc" {
		t.Errorf("podServerName %q", got)
	}
	job, err := buildJob(jobRequest{name: "b1", component: componentBackup, db: db, instance: pod, deadline: 600}, "operator:v1")
	if err != nil {
		t.Fatal(err)
	}
	spec := job.Spec.Template.Spec
	if args := strings.Join(spec.Containers[0].Args, " "); !strings.Contains(args, "--host=orders-1.orders-headless.prod.svc ") || !strings.Contains(args, "--ca-file=/etc/database-operator/tls/ca.crt") {
		t.Errorf("args %s", args)
	}
	var tlsVolume *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == "tls" {
			tlsVolume = &spec.Volumes[i]
		}
	}
	if tlsVolume == nil || tlsVolume.Secret.SecretName != "orders-tls" || len(tlsVolume.Secret.Items) != 1 || tlsVolume.Secret.Items[0].Key != "ca.crt" {
		t.Errorf("the CA volume %+v: want ca.crt of orders-tls alone", tlsVolume)
	}
	// A pod started before its Database had a certificate serves plain
	// text until it is rolled: no CA is asked for.
	pod.Spec.Volumes = nil
	if got := podServerName(db, pod); got != "" {
		t.Errorf("podServerName of a pod without the certificate %q", got)
	}
	if job, _ := buildJob(jobRequest{name: "b1", component: componentBackup, db: db, instance: pod, deadline: 600}, "operator:v1"); strings.Contains(strings.Join(job.Spec.Template.Spec.Containers[0].Args, " "), "--ca-file") {
		t.Error("a CA asked of a server without a certificate")
	}
}

func TestBuildRestoreJobS3(t *testing.T) {
	db, pod := backupTestDB()
	target := dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "https://s3.internal:9000", Bucket: "backups", Prefix: "team", Region: "eu-1", ForcePathStyle: true,
		CredentialsSecret: dbv1.S3Credentials{Name: "s3", AccessKeyIDKey: "id"}, CASecret: &dbv1.SecretKeyRef{Name: "ca"}}}
	job, err := buildJob(jobRequest{name: "orders-restore", component: componentRestore, db: db, instance: pod, target: target,
		args: []string{"--path=prod/old/b1"}, deadline: 60}, "operator:v1")
	if err != nil {
		t.Fatal(err)
	}
	c := job.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"restore ", "--s3-endpoint=https://s3.internal:9000", "--s3-bucket=backups", "--s3-prefix=team", "--s3-region=eu-1",
		"--s3-path-style", "--s3-ca-file=" + jobS3CADir + "/ca.crt", "--scratch=/scratch", "--path=prod/old/b1"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %s lack %s", args, want)
		}
	}
	env := map[string]corev1.SecretKeySelector{}
	for _, e := range c.Env {
		env[e.Name] = *e.ValueFrom.SecretKeyRef
	}
	if env["AWS_ACCESS_KEY_ID"].Key != "id" || env["AWS_SECRET_ACCESS_KEY"].Key != "secretAccessKey" || env["AWS_SECRET_ACCESS_KEY"].Name != "s3" {
		t.Errorf("S3 env %+v", env)
	}
	var ca *corev1.Volume
	for i, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == "s3-ca" {
			ca = &job.Spec.Template.Spec.Volumes[i]
		}
	}
	if ca == nil || ca.Secret.SecretName != "ca" || ca.Secret.Items[0].Key != "ca.crt" {
		t.Errorf("CA volume %+v", ca)
	}
}

func TestDueRun(t *testing.T) {
	s, err := cronSchedule("0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	for _, tt := range []struct{ last, now, due, next string }{
		{"2026-12-01T12:00:00Z", "2026-12-02T02:59:00Z", "", "2026-12-02T03:00:00Z"},
		{"2026-12-01T12:00:00Z", "2026-12-02T03:00:00Z", "2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z"},
		{"2026-12-02T03:00:00Z", "2026-12-02T10:00:00Z", "", "2026-12-03T03:00:00Z"},
		// Down for a week: only the latest missed run (within a day) is taken.
		{"2026-11-20T03:00:00Z", "2026-12-02T10:00:00Z", "2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z"},
	} {
		due, next := dueRun(s, at(tt.last), at(tt.now))
		wantDue := time.Time{}
		if tt.due != "" {
			wantDue = at(tt.due)
		}
		if !due.Equal(wantDue) || !next.Equal(at(tt.next)) {
			t.Errorf("last %s now %s: due %s next %s, want %s %s", tt.last, tt.now, due, next, tt.due, tt.next)
		}
	}
	db, _ := backupTestDB()
	db.Name = strings.Repeat("n", 52)
	if name := scheduledBackupName(db, at("2026-12-02T03:00:00Z")); len(name) > 63 || !strings.HasSuffix(name, "-202612020300") {
		t.Errorf("name %q", name)
	}
}

func TestBackupStatusCondition(t *testing.T) {
	db, _ := backupTestDB()
	done := metav1.NewTime(time.Date(2026, 12, 2, 3, 1, 0, 0, time.UTC))
	st := dbv1.DatabaseStatus{}
	backupStatus(&st, db, &observed{})
	if len(st.Conditions) != 0 {
		t.Errorf("a condition before any backup: %+v", st.Conditions)
	}
	failed := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b2"}, Status: dbv1.BackupStatus{Phase: dbv1.BackupFailed, Reason: "TargetFailed", Message: "access denied", CompletedAt: &done}}
	backupStatus(&st, db, &observed{lastBackup: failed, lastSuccessfulBackup: &done})
	c := st.Conditions[0]
	if c.Type != dbv1.ConditionLastBackupSucceeded || c.Status != metav1.ConditionFalse || c.Reason != "TargetFailed" || !strings.Contains(c.Message, "b2 failed") || !strings.Contains(c.Message, "access denied") {
		t.Errorf("condition %+v", c)
	}
	if st.LastSuccessfulBackup == nil || !st.LastSuccessfulBackup.Equal(&done) {
		t.Errorf("lastSuccessfulBackup %v", st.LastSuccessfulBackup)
	}
}

// TestLatestFinished: the condition follows the backup that finished last
// whatever order the backups are listed in; a run skipped in the same
// second as the running backup it waited for completed counts as the
// earlier of the two (the skip is decided while that backup still runs).
func TestLatestFinished(t *testing.T) {
	at := func(sec int) *metav1.Time {
		v := metav1.NewTime(time.Date(2026, 12, 3, 15, 10, sec, 0, time.UTC))
		return &v
	}
	backup := func(name string, phase dbv1.BackupPhase, done *metav1.Time) dbv1.Backup {
		return dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: dbv1.BackupStatus{Phase: phase, CompletedAt: done}}
	}
	for _, tt := range []struct {
		name        string
		backups     []dbv1.Backup
		last        string
		lastSuccess *metav1.Time
	}{
		{"none finished", []dbv1.Backup{backup("a", dbv1.BackupRunning, nil)}, "", nil},
		{"later wins", []dbv1.Backup{backup("a", dbv1.BackupCompleted, at(1)), backup("b", dbv1.BackupFailed, at(2))}, "b", at(1)},
		{"skip in the same second as the completion", []dbv1.Backup{backup("run-1505", dbv1.BackupCompleted, at(0)), backup("run-1510", dbv1.BackupSkipped, at(0))}, "run-1505", at(0)},
		{"skip after the completion", []dbv1.Backup{backup("run-1505", dbv1.BackupCompleted, at(0)), backup("run-1510", dbv1.BackupSkipped, at(1))}, "run-1510", at(0)},
		{"failure in the same second as a skip", []dbv1.Backup{backup("f", dbv1.BackupFailed, at(3)), backup("s", dbv1.BackupSkipped, at(3))}, "f", nil},
	} {
		for _, reversed := range []bool{false, true} {
			items := append([]dbv1.Backup(nil), tt.backups...)
			if reversed {
				slices.Reverse(items)
			}
			last, lastSuccess := latestFinished(items)
			got := ""
			if last != nil {
				got = last.Name
			}
			if got != tt.last || (lastSuccess == nil) != (tt.lastSuccess == nil) || (lastSuccess != nil && !lastSuccess.Equal(tt.lastSuccess)) {
				t.Errorf("%s (reversed %v): last %q success %v, want %q %v", tt.name, reversed, got, lastSuccess, tt.last, tt.lastSuccess)
			}
		}
	}
}
