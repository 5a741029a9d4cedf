package plugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dbv1 "example.com/database-operator/api/v1"
)

// agentMetricsPort is the agents' metrics port (internal/agent/metrics.Port,
// containerPort "metrics" in the chart; a unit test keeps them equal).
const agentMetricsPort = 8012

// figures are an instance's live figures, which the status does not hold
// (it holds states, so it is written only on change): read from its
// agent's metrics through the API server's pod proxy.
type figures struct {
	// Position is a PostgreSQL WAL location (the primary's current one, a
	// replica's replayed one); empty for MySQL and MariaDB, whose metrics
	// carry no GTID.
	Position string `json:"position,omitempty"`
	// LagSeconds, LagBytes (PostgreSQL) and LagTransactions (MySQL,
	// MariaDB) are a replica's lag behind its source.
	LagSeconds      *float64 `json:"lagSeconds,omitempty"`
	LagBytes        *float64 `json:"lagBytes,omitempty"`
	LagTransactions *float64 `json:"lagTransactions,omitempty"`
	// Up: the agent's last scrape reached the server.
	Up bool `json:"up"`
	// walBytes is the position as bytes, for comparing replicas.
	walBytes *float64
}

// readFigures scrapes one instance's agent: TLS when the pod has its
// certificate, plain before.
func (c *Clients) readFigures(ctx context.Context, engine dbv1.Engine, pod string) (*figures, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var body []byte
	var err error
	for _, scheme := range []string{"https", "http"} {
		body, err = c.Kube.CoreV1().Pods(c.Namespace).ProxyGet(scheme, pod, strconv.Itoa(agentMetricsPort), "/metrics", nil).DoRaw(ctx)
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s's metrics: %w", pod, err)
	}
	return parseFigures(engine, string(body))
}

// parseFigures reads the figures out of an agent's metrics.
func parseFigures(engine dbv1.Engine, text string) (*figures, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	value := func(name string) *float64 {
		f, ok := families[name]
		if !ok || len(f.GetMetric()) == 0 {
			return nil
		}
		v := metricValue(f.GetMetric()[0])
		return &v
	}
	f := &figures{LagSeconds: value("database_replication_lag_seconds")}
	if up := value("database_instance_up"); up != nil && *up == 1 {
		f.Up = true
	}
	if engine == dbv1.EnginePostgreSQL {
		f.LagBytes = value("database_replication_lag_bytes")
		if f.walBytes = value("database_wal_bytes_total"); f.walBytes != nil {
			f.Position = lsn(uint64(*f.walBytes))
		}
	} else {
		f.LagTransactions = value("database_replication_lag_transactions")
	}
	return f, nil
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// lsn writes a WAL position as PostgreSQL does (pg_lsn: high/low 32 bits in hex).
func lsn(b uint64) string { return fmt.Sprintf("%X/%X", b>>32, b&0xFFFFFFFF) }

// lag says a replica's lag in a few characters: "0", "1.2s", "3 tx, 4s".
func (f *figures) lag() string {
	if f == nil {
		return ""
	}
	var parts []string
	if f.LagBytes != nil && *f.LagBytes > 0 {
		parts = append(parts, humanBytes(int64(*f.LagBytes)))
	}
	if f.LagTransactions != nil && *f.LagTransactions > 0 {
		parts = append(parts, fmt.Sprintf("%.0f tx", *f.LagTransactions))
	}
	if f.LagSeconds != nil && *f.LagSeconds > 0 {
		parts = append(parts, strconv.FormatFloat(*f.LagSeconds, 'f', 1, 64)+"s")
	}
	if len(parts) == 0 && (f.LagSeconds != nil || f.LagBytes != nil || f.LagTransactions != nil) {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// humanBytes is n in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGT"[exp])
}
