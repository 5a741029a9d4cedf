package diagnosis

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The lines are what PostgreSQL 15 and MariaDB 10.11 wrote here when
// started on a broken data directory or configuration (the e2e tests
// produce the same failures in real pods).
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name, log, terminated string
		want                  Cause
		evidence              string
	}{
		{"postgres downgrade", `2026-12-06 11:18:53.362 UTC [27968] FATAL:  database files are incompatible with server
2026-12-06 11:18:53.362 UTC [27968] DETAIL:  The data directory was initialized by PostgreSQL version 16, which is not compatible with this version 15.18 (Debian 15.18-0+deb12u1).`, "", VersionDowngrade, "version 16"},
		{"postgres older data", `FATAL:  database files are incompatible with server
DETAIL:  The data directory was initialized by PostgreSQL version 14, which is not compatible with this version 15.18.`, "", CorruptDataDirectory, "version 14"},
		{"postgres unknown setting", `2026-12-06 11:18:53.552 GMT [27986] LOG:  unrecognized configuration parameter "bogus_setting" in file "/tmp/dx/pg2/postgresql.auto.conf" line 3
2026-12-06 11:18:53.552 GMT [27986] FATAL:  configuration file "/tmp/dx/pg2/postgresql.auto.conf" contains errors`, "", ConfigurationError, `unrecognized configuration parameter "bogus_setting"`},
		{"postgres bad value", `LOG:  invalid value for parameter "shared_buffers": "lots"
FATAL:  configuration file "/var/lib/postgresql/data/pgdata/postgresql.auto.conf" contains errors`, "", ConfigurationError, `invalid value for parameter "shared_buffers"`},
		{"postgres pg_control", `FATAL:  database files are incompatible with server
DETAIL:  The database cluster was initialized with PG_CONTROL_VERSION -1259008367, but the server was compiled with PG_CONTROL_VERSION 1300.
HINT:  It looks like you need to initdb.
LOG:  database system is shut down`, "", CorruptDataDirectory, "PG_CONTROL_VERSION"},
		{"postgres no checkpoint", `LOG:  invalid primary checkpoint record
PANIC:  could not locate a valid checkpoint record
LOG:  startup process (PID 29) was terminated by signal 6: Aborted`, "", CorruptDataDirectory, "checkpoint"},
		{"postgres shared memory", `FATAL:  could not map anonymous shared memory: Cannot allocate memory
HINT:  This error usually means that PostgreSQL's request for a shared memory segment exceeded available memory, swap space, or huge pages.`, "", OutOfMemory, "Cannot allocate memory"},
		{"postgres disk full", `PANIC:  could not write to file "pg_wal/xlogtemp.41": No space left on device
LOG:  database system is shut down`, "", DiskFull, "No space left"},
		{"postgres clone refused", `pg_basebackup: error: connection to server at "db-0.db-hl" (10.0.0.5), port 5432 failed: FATAL:  password authentication failed for user "replication"`, "", AuthenticationFailed, "password authentication failed"},
		// PostgreSQL's JSON log (jsonlog), as the agent relays it: read as the plain log would say it.
		{"postgres jsonlog disk full", `{"timestamp":"2026-12-06 14:26:02.113 GMT","pid":16006,"session_id":"6755e9aa.3e86","line_num":1,"session_start":"2026-12-06 14:26:02 GMT","txid":0,"error_severity":"PANIC","state_code":"53100","message":"could not write to file \"pg_wal/xlogtemp.41\": No space left on device","backend_type":"checkpointer","query_id":0}
{"timestamp":"2026-12-06 14:26:02.120 GMT","pid":16001,"session_id":"6755e9aa.3e81","line_num":3,"session_start":"2026-12-06 14:26:02 GMT","txid":0,"error_severity":"LOG","message":"database system is shut down","backend_type":"postmaster","query_id":0}`, "", DiskFull, `PANIC:  could not write to file "pg_wal/xlogtemp.41": No space left on device`},
		{"postgres jsonlog downgrade", `{"timestamp":"2026-12-06 14:26:02.113 GMT","pid":16006,"error_severity":"FATAL","state_code":"XX000","message":"database files are incompatible with server","detail":"The data directory was initialized by PostgreSQL version 16, which is not compatible with this version 15.18.","backend_type":"postmaster","query_id":0}`, "", VersionDowngrade, "version 16"},
		{"not a postgres json line", `{"level":"info","msg":"unrelated"} no space left on device`, "", DiskFull, `{"level"`},
		{"mariadb unknown option", `2026-12-06 11:19:01 0 [Note] Plugin 'FEEDBACK' is disabled.
2026-12-06 11:19:01 0 [ERROR] mariadbd: unknown variable 'bogus-option=1'
2026-12-06 11:19:01 0 [ERROR] Aborting`, "", ConfigurationError, "unknown variable"},
		{"mariadb bad value", `2026-12-06 11:19:26 0 [ERROR] Unknown suffix 'l' used for variable 'innodb-buffer-pool-size' (value 'lots'). Legal suffix characters are: K, M, G, T, P, E
2026-12-06 11:19:26 0 [ERROR] mariadbd: Error while setting value 'lots' to 'innodb-buffer-pool-size'
2026-12-06 11:19:26 0 [ERROR] Parsing options for plugin 'InnoDB' failed. Disabling plugin
2026-12-06 11:19:26 0 [ERROR] Unknown/unsupported storage engine: InnoDB
2026-12-06 11:19:26 0 [ERROR] Aborting`, "", ConfigurationError, "Error while setting value"},
		{"mariadb corrupt system tablespace", `2026-12-06 11:19:01 0 [ERROR] Plugin 'InnoDB' registration as a STORAGE ENGINE failed.
2026-12-06 11:19:01 0 [Note] Plugin 'FEEDBACK' is disabled.
2026-12-06 11:19:01 0 [ERROR] Unknown/unsupported storage engine: InnoDB
2026-12-06 11:19:01 0 [ERROR] Aborting`, "", CorruptDataDirectory, "registration as a STORAGE ENGINE failed"},
		{"mariadb buffer pool too big", `2026-12-06 11:19:18 0 [ERROR] mariadbd: Out of memory (Needed 0 bytes)
2026-12-06 11:19:18 0 [ERROR] InnoDB: Cannot map innodb_buffer_pool_size_max=8388608m
2026-12-06 11:19:18 0 [ERROR] Plugin 'InnoDB' registration as a STORAGE ENGINE failed.
2026-12-06 11:19:18 0 [ERROR] Aborting`, "", OutOfMemory, "Cannot map innodb_buffer_pool"},
		// Real (tests/engine TestCrashCausesFromRealServers): a buffer pool beyond the memory limit, and
		// a refused probe before it; InnoDB's failure must not read as a corrupt data directory.
		{"mariadb buffer pool beyond the limit", `2026-12-06 15:02:36 3 [Warning] Access denied for user 'root'@'localhost' (using password: YES)
2026-12-06 15:02:37 0 [ERROR] InnoDB: Cannot map innodb_buffer_pool_size_max=8192m
2026-12-06 15:02:37 0 [ERROR] InnoDB: Plugin initialization aborted with error Generic error
2026-12-06 15:02:37 0 [ERROR] Plugin 'InnoDB' registration as a STORAGE ENGINE failed.
2026-12-06 15:02:37 0 [ERROR] Unknown/unsupported storage engine: InnoDB
2026-12-06 15:02:37 0 [ERROR] Aborting`, "", OutOfMemory, "Cannot map innodb_buffer_pool"},
		{"mariadb access denied", `[ERROR] Slave I/O: error connecting to master 'replication@db-0:3306' - retry-time: 10  maximum-retries: 100000  message: Access denied for user 'replication'@'10.0.0.6' (using password: YES), Internal MariaDB error code: 1045`, "", AuthenticationFailed, "Access denied"},
		{"mariadb disk full", `[ERROR] mariadbd: Disk full (/tmp/#sql-temptable.MAI); waiting for someone to free some space... (errno: 28 "No space left on device")`, "", DiskFull, "Disk full"},
		{"killed for memory", "LOG:  checkpoint starting: time", "OOMKilled", OutOfMemory, "OOMKilled"},
		{"nothing recognised", "LOG:  database system is ready to accept connections\n", "", Unknown, ""},
		{"no word inside another", "LOG:  checking the bloom filter of the room", "", Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, evidence := Classify(tc.log, tc.terminated)
			if got != tc.want {
				t.Fatalf("cause %s, want %s (evidence %q)", got, tc.want, evidence)
			}
			if !strings.Contains(evidence, tc.evidence) {
				t.Errorf("evidence %q does not hold %q", evidence, tc.evidence)
			}
		})
	}
}

func TestOfPod(t *testing.T) {
	code := func(c int32) *int32 { return &c }
	for _, tc := range []struct {
		name         string
		pod          corev1.Pod
		pendingClaim string
		want         string // reason, "" for none
		needsLog     bool
		exit         *int32
	}{
		{"running and ready", pod(corev1.ContainerStatus{Name: "database", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), "", "", false, nil},
		{"starting", pod(corev1.ContainerStatus{Name: "database", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}), "", "", false, nil},
		{"config error", pod(corev1.ContainerStatus{Name: "database", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "x" not found`}}}), "", "CreateContainerConfigError", false, nil},
		{"image pull", pod(corev1.ContainerStatus{Name: "database", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}), "", "ImagePullBackOff", false, nil},
		{"crash loop", pod(corev1.ContainerStatus{Name: "database", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}), "", "CrashLoopBackOff", true, code(1)},
		{"oom in back-off", pod(corev1.ContainerStatus{Name: "database", RestartCount: 2, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}), "", "OOMKilled", true, code(137)},
		{"restarting repeatedly", pod(corev1.ContainerStatus{Name: "database", RestartCount: 3, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2}}}), "", "RestartingRepeatedly", true, code(2)},
		{"restarted once", pod(corev1.ContainerStatus{Name: "database", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2}}}), "", "", false, nil},
		{"unschedulable", unscheduled("0/3 nodes are available: 3 Insufficient memory."), "", "Unschedulable", false, nil},
		{"claim pending", unscheduled("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."), "data-db-0", "ClaimPending", false, nil},
		{"just unschedulable", unscheduledSince("0/1 nodes are available: waiting for the volume.", 990), "data-db-0", "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := OfPod(&tc.pod, tc.pendingClaim, time.Unix(1000, 0))
			switch {
			case tc.want == "" && f != nil:
				t.Fatalf("diagnosed %+v, want none", f)
			case tc.want == "":
				return
			case f == nil:
				t.Fatalf("no diagnosis, want %s", tc.want)
			}
			if f.Reason != tc.want || f.NeedsLog != tc.needsLog {
				t.Errorf("reason %s (needs log %v), want %s (%v)", f.Reason, f.NeedsLog, tc.want, tc.needsLog)
			}
			if (f.ExitCode == nil) != (tc.exit == nil) || (f.ExitCode != nil && *f.ExitCode != *tc.exit) {
				t.Errorf("exit code %v, want %v", f.ExitCode, tc.exit)
			}
		})
	}
}

func TestSummaryNamesEverything(t *testing.T) {
	code := int32(1)
	got := Summary("db-1", &Failure{Reason: "CrashLoopBackOff", Container: "database", ExitCode: &code, RestartCount: 5}, DiskFull, "PANIC: No space left on device")
	for _, want := range []string{"db-1", "container database", "CrashLoopBackOff", "exit code 1", "restarted 5 times", "DiskFull", "No space left", "troubleshooting.md#diskfull"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
}

func pod(cs corev1.ContainerStatus) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}, Spec: corev1.PodSpec{NodeName: "node"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}}}
}

func unscheduled(msg string) corev1.Pod { return unscheduledSince(msg, 900) }

// unscheduledSince: the scheduler found no node since the Unix second at
// (the tests' now is 1000).
func unscheduledSince(msg string, at int64) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Unix(at, 0)}}}}
}
