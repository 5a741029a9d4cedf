package controller

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// The operator's series follow the status it computes, count what its
// Events say it finished, and go with a deleted Database.
func TestOperatorMetrics(t *testing.T) {
	m, err := NewOperatorMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	orders := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Schedule: "0 */6 * * *"}
		db.Status.PrimaryUnhealthySince = &metav1.Time{Time: time.Unix(1000, 0)}
	})
	st := &dbv1.DatabaseStatus{Phase: dbv1.PhaseDegraded,
		Conditions: []metav1.Condition{{Type: dbv1.ConditionReplicationHealthy, Status: metav1.ConditionFalse}},
		Instances: []dbv1.InstanceStatus{
			{Name: "orders-0", Role: rolePrimary, Ready: true},
			{Name: "orders-1", Role: roleReplica, Ready: true, Replication: dbv1.ReplicationStopped},
			{Name: "orders-2", Failure: &dbv1.InstanceFailure{Reason: "CrashLoopBackOff", ProbableCause: "DiskFull"}},
		}}
	m.observe(orders, st)
	billing := newDB(dbv1.EnginePostgreSQL)
	billing.Name = "billing"
	m.observe(billing, &dbv1.DatabaseStatus{Phase: dbv1.PhaseRunning})

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"primaries", testutil.ToFloat64(m.instances.WithLabelValues("shop", "orders", rolePrimary)), 1},
		{"replicas", testutil.ToFloat64(m.instances.WithLabelValues("shop", "orders", roleReplica)), 1},
		{"failing", testutil.ToFloat64(m.failing.WithLabelValues("shop", "orders", "orders-2", "CrashLoopBackOff", "DiskFull")), 1},
		{"replication healthy", testutil.ToFloat64(m.replication.WithLabelValues("shop", "orders")), 0},
		{"backup interval", testutil.ToFloat64(m.backupInterval.WithLabelValues("shop", "orders")), 6 * 3600},
		{"degraded Databases", testutil.ToFloat64(m.databases.WithLabelValues("shop", "Degraded")), 1},
		{"running Databases", testutil.ToFloat64(m.databases.WithLabelValues("shop", "Running")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}

	// The instance runs again: its failing series goes.
	st.Instances[2] = dbv1.InstanceStatus{Name: "orders-2", Role: roleReplica, Ready: true}
	m.observe(orders, st)
	if n := testutil.CollectAndCount(m.failing); n != 0 {
		t.Errorf("%d failing series once every instance runs, want 0", n)
	}

	m.onEvent(orders, "FailoverCompleted", time.Unix(1030, 0))
	m.onEvent(orders, "FailoverStarted", time.Unix(1030, 0))
	m.onEvent(orders, "SwitchoverCompleted", time.Unix(1030, 0))
	if v := testutil.ToFloat64(m.failovers.WithLabelValues("shop", "orders")); v != 1 {
		t.Errorf("failovers %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.switchovers.WithLabelValues("shop", "orders")); v != 1 {
		t.Errorf("switchovers %v, want 1", v)
	}
	if n := testutil.CollectAndCount(m.failoverDuration); n != 1 {
		t.Errorf("%d failover duration series, want 1", n)
	}

	m.forget("shop", "orders")
	for name, c := range map[string]prometheus.Collector{"replication": m.replication, "backup interval": m.backupInterval, "failover durations": m.failoverDuration} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series of a deleted Database", name, n)
		}
	}
	if n := testutil.CollectAndCount(m.failovers); n != 1 {
		t.Errorf("%d failover counters after orders went, want billing's (at 0)", n)
	}
	if n := testutil.CollectAndCount(m.instances); n != 2 {
		t.Errorf("%d instance series after orders went, want billing's 2 (0 primaries, 0 replicas)", n)
	}
	if v := testutil.ToFloat64(m.databases.WithLabelValues("shop", "Running")); v != 1 || testutil.CollectAndCount(m.databases) != 1 {
		t.Errorf("Databases by phase after orders went: running %v, series %d; want billing alone", v, testutil.CollectAndCount(m.databases))
	}
}

// TestOperatorMetricsAreDocumented: the operator registers exactly the
// series of the documented table (docs/monitoring.md, the contract the
// alerts and the dashboard are checked against), each of its type.
func TestOperatorMetricsAreDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewOperatorMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBackupMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// One child each, so that every family is gathered.
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupPolicy{Schedule: "@daily", Verify: &dbv1.VerifyPolicy{Schedule: "@weekly"}}
		db.Status.PrimaryUnhealthySince = &metav1.Time{Time: time.Now().Add(-20 * time.Second)}
	})
	m.observe(db, &dbv1.DatabaseStatus{Phase: dbv1.PhaseRunning, Instances: []dbv1.InstanceStatus{{Name: "orders-0", Failure: &dbv1.InstanceFailure{Reason: "OOMKilled"}}},
		LastVerifiedTime: &metav1.Time{Time: time.Now()},
		Conditions: []metav1.Condition{{Type: dbv1.ConditionReplicationHealthy, Status: metav1.ConditionTrue}, {Type: dbv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse},
			{Type: dbv1.ConditionBackupVerified, Status: metav1.ConditionTrue}}})
	m.onEvent(db, "FailoverCompleted", time.Now())
	m.phaseDone("Apply", time.Millisecond)
	done := metav1.Now()
	b.observe(&dbv1.Backup{Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "orders"}}}, &dbv1.BackupStatus{Phase: dbv1.BackupCompleted, CompletedAt: &done})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]string{}
	for _, f := range families {
		registered[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	doc, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, row := range regexp.MustCompile("(?m)^\\| `(database_operator_[a-z0-9_]+)` \\| (gauge|counter|histogram) \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[row[1]] = row[2]
	}
	if len(documented) == 0 {
		t.Fatal("docs/monitoring.md documents no operator series")
	}
	for name, typ := range documented {
		if registered[name] != typ {
			t.Errorf("%s is documented as a %s; the operator registers %q", name, typ, registered[name])
		}
	}
	for name := range registered {
		if _, ok := documented[name]; !ok {
			t.Errorf("%s is registered but not documented", name)
		}
	}
}
