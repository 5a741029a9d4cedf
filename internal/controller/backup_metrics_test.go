package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// A deleted Database's series go with it; another Database's stay.
func TestBackupMetricsForgetDeletedDatabase(t *testing.T) {
	m, err := NewBackupMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	done := metav1.NewTime(time.Unix(1_700_000_000, 0))
	for _, name := range []string{"orders", "billing"} {
		b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-1"},
			Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: name}}}
		m.observe(b, &dbv1.BackupStatus{Phase: dbv1.BackupCompleted, Size: 42, CompletedAt: &done})
		m.observe(b, &dbv1.BackupStatus{Phase: dbv1.BackupFailed, Reason: "TargetInvalid"})
	}
	series := func() int {
		return testutil.CollectAndCount(m.finished) + testutil.CollectAndCount(m.lastSuccess) +
			testutil.CollectAndCount(m.lastOK) + testutil.CollectAndCount(m.lastSize)
	}
	if n := series(); n != 10 { // per Database: 2 counters and 3 gauges
		t.Fatalf("%d series before deletion, want 10", n)
	}
	m.forget("shop", "orders")
	if n := series(); n != 5 {
		t.Fatalf("%d series after deleting orders, want billing's 5", n)
	}
	if v := testutil.ToFloat64(m.lastSize.WithLabelValues("shop", "billing")); v != 42 {
		t.Errorf("billing's last size %v, want 42", v)
	}
	var none *BackupMetrics
	none.forget("shop", "orders") // metrics off: no panic
}
