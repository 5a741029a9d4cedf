package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

// TestCrashLoopDiagnosed: an instance whose server cannot start is named,
// with its reason and the probable cause read from its last log lines, in
// status.instances, the InstancesHealthy, Degraded and Ready conditions and
// a Warning Event; each from a real server failing in a real pod.
// PostgreSQL: data written by a newer major version (PG_VERSION says 16)
// after a restart; MariaDB: a setting's value the server refuses, in a new
// Database that never started.
func TestCrashLoopDiagnosed(t *testing.T) {
	t.Parallel() // its own Databases, faults on its own volumes only
	t.Run("postgresql", func(t *testing.T) {
		t.Parallel()
		db := createDatabase(t, "diag-pg", dbv1.EnginePostgreSQL, "15", 1)
		waitRunning(t, db, 1, 5*time.Minute)
		version := filepath.Join(claimDir(t, db.Namespace, "data-"+db.Name+"-0"), "pgdata", "PG_VERSION")
		if err := os.WriteFile(version, []byte("16\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		deletePod(t, db.Namespace, db.Name+"-0")
		got := waitDiagnosis(t, db, db.Name+"-0", "VersionDowngrade", "initialized by PostgreSQL version 16")
		if got.Status.Phase != dbv1.PhaseFailed {
			t.Errorf("phase %s with its only instance crash-looping, want Failed", got.Status.Phase)
		}
		// Put right, it runs again and the diagnosis goes.
		if err := os.WriteFile(version, []byte("15\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		eventually(t, 4*time.Minute, "InstancesHealthy again", func() string {
			got := getDatabase(t, db)
			if c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionInstancesHealthy); c == nil || c.Status != metav1.ConditionTrue || got.Status.Phase != dbv1.PhaseRunning {
				return fmt.Sprintf("phase %s, InstancesHealthy %+v", got.Status.Phase, c)
			}
			return ""
		})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		db := createDatabase(t, "diag-maria", dbv1.EngineMariaDB, "10.11", 1, func(db *dbv1.Database) {
			db.Spec.Parameters = map[string]string{"innodb_buffer_pool_size": "lots"}
		})
		got := waitDiagnosis(t, db, db.Name+"-0", "ConfigurationError", "Error while setting value 'lots'")
		if got.Status.Phase != dbv1.PhaseFailed {
			t.Errorf("phase %s for a new Database whose only instance crash-loops, want Failed", got.Status.Phase)
		}
	})
}

// waitDiagnosis waits until the Database names pod as crash-looping with
// cause and a message holding evidence, everywhere a user looks first.
func waitDiagnosis(t *testing.T, db *dbv1.Database, pod, cause, evidence string) *dbv1.Database {
	t.Helper()
	var got *dbv1.Database
	eventually(t, 4*time.Minute, pod+" diagnosed "+cause, func() string {
		got = getDatabase(t, db)
		i := slices.IndexFunc(got.Status.Instances, func(in dbv1.InstanceStatus) bool { return in.Name == pod })
		if i < 0 || got.Status.Instances[i].Failure == nil {
			return fmt.Sprintf("instances %+v", got.Status.Instances)
		}
		f := got.Status.Instances[i].Failure
		if f.ProbableCause != cause || f.Container != "database" || f.ExitCode == nil || f.RestartCount < 1 || !strings.Contains(f.Message, evidence) || !strings.Contains(f.Runbook, "troubleshooting.md#") {
			return fmt.Sprintf("failure %+v (exit code %v)", f, f.ExitCode)
		}
		for _, typ := range []string{dbv1.ConditionInstancesHealthy, dbv1.ConditionDegraded, dbv1.ConditionReady} {
			c := meta.FindStatusCondition(got.Status.Conditions, typ)
			if c == nil || c.Status == metav1.ConditionUnknown || !strings.Contains(c.Message, pod) || !strings.Contains(c.Message, cause) {
				return fmt.Sprintf("%s %+v does not name %s and %s", typ, c, pod, cause)
			}
		}
		return ""
	})
	t.Logf("InstancesHealthy: %s", meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionInstancesHealthy).Message)
	waitEventWithin(t, db.Namespace, db.Name, "Warning InstanceFailing: "+pod, time.Minute)
	return got
}

func getDatabase(t testing.TB, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	got := &dbv1.Database{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func deletePod(t testing.TB, ns, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCrashCausesDiagnosed: the other causes, each from a real server that
// cannot start on what its volume holds, written while its pod's machine
// is down (node.Down: the server killed, nothing restarted until Up): a
// PostgreSQL control file and a MariaDB system tablespace overwritten
// (CorruptDataDirectory), an unknown setting in postgresql.auto.conf, as
// ALTER SYSTEM on another version could leave (ConfigurationError).
func TestCrashCausesDiagnosed(t *testing.T) {
	fullTier(t)
	t.Parallel() // its own Databases, faults on its own pods and volumes only
	for _, tc := range []struct {
		name, file, cause, evidence string
		engine                      dbv1.Engine
		version                     string
		damage                      func(t *testing.T, path string)
	}{
		{"postgresql control file", "pgdata/global/pg_control", "CorruptDataDirectory", "incorrect checksum in control file", dbv1.EnginePostgreSQL, "15", overwrite(100, 64)},
		{"mariadb system tablespace", "data/ibdata1", "CorruptDataDirectory", "InnoDB", dbv1.EngineMariaDB, "10.11", overwrite(0, 64<<10)},
		{"postgresql unknown setting", "pgdata/postgresql.auto.conf", "ConfigurationError", "bogus_setting", dbv1.EnginePostgreSQL, "15", appendLine("bogus_setting = 1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := createDatabase(t, "cause-"+strings.ReplaceAll(strings.Fields(tc.name)[1], "_", "-"), tc.engine, tc.version, 1)
			waitRunning(t, db, 1, 5*time.Minute)
			pod := db.Name + "-0"
			if err := node.Down(db.Namespace, pod); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, filepath.Join(claimDir(t, db.Namespace, "data-"+pod), tc.file))
			if err := node.Up(db.Namespace, pod); err != nil {
				t.Fatal(err)
			}
			waitDiagnosis(t, db, pod, tc.cause, tc.evidence)
		})
	}
}

// overwrite writes n bytes of garbage at offset off of a file.
func overwrite(off int64, n int) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		junk := make([]byte, n)
		for i := range junk {
			junk[i] = byte(i*7 + 13)
		}
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
}

// appendLine adds a line to a file.
func appendLine(line string) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(line + "\n"); err != nil {
			t.Fatal(err)
		}
	}
}
