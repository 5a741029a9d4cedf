package controller

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	dbv1 "example.com/database-operator/api/v1"
)

// OperatorMetrics are the operator's own series about the Databases it
// runs: what it did (failovers, switchovers, fences), how long its reconcile
// phases take, and what it saw (instances by role, failing instances,
// replication health, Databases by phase). docs/monitoring.md lists them.
type OperatorMetrics struct {
	failovers        *prometheus.CounterVec
	switchovers      *prometheus.CounterVec
	failoverDuration *prometheus.HistogramVec
	fences           *prometheus.CounterVec
	phaseDuration    *prometheus.HistogramVec
	instances        *prometheus.GaugeVec
	failing          *prometheus.GaugeVec
	replication      *prometheus.GaugeVec
	archiving        *prometheus.GaugeVec
	databases        *prometheus.GaugeVec
	backupInterval   *prometheus.GaugeVec
	backupVerified   *prometheus.GaugeVec
	lastVerified     *prometheus.GaugeVec

	mu     sync.Mutex
	phases map[[2]string]dbv1.Phase // namespace/name -> phase, for the databases gauge
}

// NewOperatorMetrics creates the series and registers them (or reuses those
// a previous call registered on the same registry).
func NewOperatorMetrics(reg prometheus.Registerer) (*OperatorMetrics, error) {
	db := []string{"namespace", "database"}
	m := &OperatorMetrics{
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "database_operator_failovers_total",
			Help: "Automatic failovers completed (a replica promoted after the primary failed)."}, db),
		switchovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "database_operator_switchovers_total",
			Help: "Switchovers completed (the primary moved on purpose: spec.primary, a rollout, a scale-down, a planned handover)."}, db),
		failoverDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "database_operator_failover_duration_seconds",
			Help:    "From the primary first seen failed to the failover completed.",
			Buckets: []float64{5, 10, 15, 20, 30, 45, 60, 90, 120, 300}}, db),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "database_operator_fence_events_total",
			Help: "Servers the operator fenced (made read-only, client sessions ended)."}, db),
		phaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "database_operator_reconcile_phase_duration_seconds",
			Help:    "Duration of each phase of a Database reconcile.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}}, []string{"phase"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_instances",
			Help: "Instances of a Database by role (primary, replica; none before the operator gave one)."}, append(db, "role")),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_instance_failing",
			Help: "1 for an instance whose pod does not run, with the reason and the probable cause (status.instances[].failure)."}, append(db, "pod", "reason", "cause")),
		replication: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_replication_healthy",
			Help: "1 when the ReplicationHealthy condition is True, 0 when False (absent while Unknown)."}, db),
		archiving: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_wal_archiving_healthy",
			Help: "With spec.backup.archive: 1 when the ContinuousArchiving condition is True, 0 when False (the primary's last archive attempt failed; absent while Unknown)."}, db),
		databases: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_databases",
			Help: "Databases by phase."}, []string{"namespace", "phase"}),
		backupInterval: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_backup_schedule_interval_seconds",
			Help: "Seconds between two backups of spec.backup.schedule (absent without a schedule, or suspended)."}, db),
		backupVerified: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_backup_verified",
			Help: "With spec.backup.verify: 1 when the latest restore drill restored the latest physical backup (BackupVerified True), 0 when it failed or found none to restore (absent while the first drill runs)."}, db),
		lastVerified: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "database_operator_backup_last_verified_timestamp_seconds",
			Help: "With spec.backup.verify: when the latest successful restore drill ended (status.lastVerifiedTime), as a Unix time."}, db),
		phases: map[[2]string]dbv1.Phase{},
	}
	var errs []error
	registerAll(reg, &errs, &m.failovers, &m.switchovers, &m.fences)
	registerAll(reg, &errs, &m.failoverDuration, &m.phaseDuration)
	registerAll(reg, &errs, &m.instances, &m.failing, &m.replication, &m.archiving, &m.databases, &m.backupInterval, &m.backupVerified, &m.lastVerified)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("registering the operator metrics: %w", err)
	}
	return m, nil
}

// phaseDone records how long a reconcile phase took.
func (m *OperatorMetrics) phaseDone(phase string, took time.Duration) {
	if m == nil {
		return
	}
	m.phaseDuration.WithLabelValues(phase).Observe(took.Seconds())
}

// fenced counts a fence the operator asked of a server.
func (m *OperatorMetrics) fenced(db *dbv1.Database) {
	if m == nil {
		return
	}
	m.fences.WithLabelValues(db.Namespace, db.Name).Inc()
}

// onEvent counts what an Event reports done: the Events are where the
// failover and switchover steps say they finished, once each.
func (m *OperatorMetrics) onEvent(db *dbv1.Database, reason string, now time.Time) {
	if m == nil {
		return
	}
	switch reason {
	case "FailoverCompleted":
		m.failovers.WithLabelValues(db.Namespace, db.Name).Inc()
		if since := db.Status.PrimaryUnhealthySince; since != nil {
			m.failoverDuration.WithLabelValues(db.Namespace, db.Name).Observe(now.Sub(since.Time).Seconds())
		}
	case "SwitchoverCompleted", "PlannedHandover":
		m.switchovers.WithLabelValues(db.Namespace, db.Name).Inc()
	}
}

// observe sets a Database's gauges from the status a reconcile computed.
func (m *OperatorMetrics) observe(db *dbv1.Database, st *dbv1.DatabaseStatus) {
	if m == nil {
		return
	}
	ns, name := db.Namespace, db.Name
	l := prometheus.Labels{"namespace": ns, "database": name}
	// The counters start at 0, so that the first failover is an increase.
	m.failovers.With(l)
	m.switchovers.With(l)
	m.fences.With(l)
	m.instances.DeletePartialMatch(l)
	roles := map[string]int{rolePrimary: 0, roleReplica: 0}
	m.failing.DeletePartialMatch(l)
	for _, in := range st.Instances {
		roles[in.Role]++
		if f := in.Failure; f != nil {
			m.failing.WithLabelValues(ns, name, in.Name, f.Reason, orDefault(f.ProbableCause, "None")).Set(1)
		}
	}
	for role, n := range roles {
		m.instances.WithLabelValues(ns, name, role).Set(float64(n))
	}
	m.replication.Delete(l)
	m.archiving.Delete(l)
	m.backupVerified.Delete(l)
	m.lastVerified.Delete(l)
	if t := st.LastVerifiedTime; t != nil && db.Spec.Backup != nil && db.Spec.Backup.Verify != nil {
		m.lastVerified.With(l).Set(float64(t.Unix()))
	}
	for _, c := range st.Conditions {
		if c.Status == "Unknown" {
			continue
		}
		switch c.Type {
		case dbv1.ConditionReplicationHealthy:
			m.replication.With(l).Set(map[bool]float64{true: 1, false: 0}[c.Status == "True"])
		case dbv1.ConditionContinuousArchiving:
			m.archiving.With(l).Set(map[bool]float64{true: 1, false: 0}[c.Status == "True"])
		case dbv1.ConditionBackupVerified:
			m.backupVerified.With(l).Set(map[bool]float64{true: 1, false: 0}[c.Status == "True"])
		}
	}
	m.backupInterval.Delete(l)
	if p := db.Spec.Backup; p != nil && p.Schedule != "" && !p.Suspend {
		if s, err := cronSchedule(p.Schedule); err == nil {
			next := s.Next(time.Now())
			m.backupInterval.With(l).Set(s.Next(next).Sub(next).Seconds())
		}
	}
	m.setPhase(ns, name, st.Phase)
}

func (m *OperatorMetrics) setPhase(ns, name string, phase dbv1.Phase) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if phase == "" {
		delete(m.phases, [2]string{ns, name})
	} else {
		m.phases[[2]string{ns, name}] = phase
	}
	counts := map[[2]string]int{}
	for k, p := range m.phases {
		counts[[2]string{k[0], string(p)}]++
	}
	m.databases.Reset()
	for k, n := range counts {
		m.databases.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}

// forget deletes the series of a Database being deleted.
func (m *OperatorMetrics) forget(namespace, name string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"namespace": namespace, "database": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.failovers.MetricVec, m.switchovers.MetricVec, m.failoverDuration.MetricVec, m.fences.MetricVec,
		m.instances.MetricVec, m.failing.MetricVec, m.replication.MetricVec, m.archiving.MetricVec, m.backupInterval.MetricVec,
		m.backupVerified.MetricVec, m.lastVerified.MetricVec,
	} {
		v.DeletePartialMatch(l)
	}
	m.setPhase(namespace, name, "")
}

// registerAll registers each collector, or takes the one already
// registered under its name, and collects the errors.
func registerAll[C prometheus.Collector](reg prometheus.Registerer, errs *[]error, cs ...*C) {
	for _, c := range cs {
		got, err := register(reg, *c)
		*c = got
		*errs = append(*errs, err)
	}
}
