package controller

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// BackupMetrics are the Prometheus series of backups, per Database: what
// an alert on "no successful backup for a day" or "the last backup failed"
// needs.
type BackupMetrics struct {
	finished    *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	lastOK      *prometheus.GaugeVec
	lastSize    *prometheus.GaugeVec
}

// NewBackupMetrics creates the series and registers them (or reuses those a
// previous call registered on the same registry).
func NewBackupMetrics(reg prometheus.Registerer) (*BackupMetrics, error) {
	labels := []string{"namespace", "database"}
	m := &BackupMetrics{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "database_operator_backups_total",
			Help: "Backups finished, by phase (Completed, Failed, Skipped) and reason."}, append(labels, "phase", "reason")),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_backup_last_success_timestamp_seconds",
			Help: "When the latest completed backup finished (Unix time)."}, labels),
		lastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_backup_last_succeeded",
			Help: "1 when the latest finished backup completed, 0 when it failed or was skipped."}, labels),
		lastSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_backup_last_size_bytes",
			Help: "Size of the latest completed backup."}, labels),
	}
	var errs [4]error
	m.finished, errs[0] = register(reg, m.finished)
	m.lastSuccess, errs[1] = register(reg, m.lastSuccess)
	m.lastOK, errs[2] = register(reg, m.lastOK)
	m.lastSize, errs[3] = register(reg, m.lastSize)
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("registering the backup metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name (a second manager in the same process, as in tests).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *BackupMetrics) observe(b *dbv1.Backup, st *dbv1.BackupStatus) {
	ns, db := b.Namespace, b.Spec.Database.Name
	m.finished.WithLabelValues(ns, db, string(st.Phase), st.Reason).Inc()
	if st.Phase == dbv1.BackupCompleted {
		m.lastOK.WithLabelValues(ns, db).Set(1)
		m.lastSize.WithLabelValues(ns, db).Set(float64(st.Size))
		if st.CompletedAt != nil {
			m.lastSuccess.WithLabelValues(ns, db).Set(float64(st.CompletedAt.Unix()))
		}
		return
	}
	m.lastOK.WithLabelValues(ns, db).Set(0)
}

// observeDatabase sets a Database's gauges from its Backups as observed, so that
// they are right after an operator restart, before any backup finishes.
func (m *BackupMetrics) observeDatabase(db *dbv1.Database, last *dbv1.Backup, lastSuccess *metav1.Time) {
	if m == nil || last == nil {
		return
	}
	ns, name := db.Namespace, db.Name
	ok := 0.0
	if last.Status.Phase == dbv1.BackupCompleted {
		ok = 1
	}
	m.lastOK.WithLabelValues(ns, name).Set(ok)
	if lastSuccess != nil {
		m.lastSuccess.WithLabelValues(ns, name).Set(float64(lastSuccess.Unix()))
	}
}

// forget deletes the series of a Database being deleted: an alert on "no
// successful backup for a day" must not fire for a Database that is gone.
func (m *BackupMetrics) forget(namespace, name string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"namespace": namespace, "database": name}
	m.finished.DeletePartialMatch(l)
	m.lastSuccess.Delete(l)
	m.lastOK.Delete(l)
	m.lastSize.Delete(l)
}
