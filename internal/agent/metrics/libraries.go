package metrics

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-sql-driver/mysql"
	pgcollector "github.com/prometheus-community/postgres_exporter/collector"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	mycollector "github.com/prometheus/mysqld_exporter/collector"

	"example.com/database-operator/internal/engine"
)

// The community collectors the agent runs. Each needs only the
// monitoring account's rights (PostgreSQL: pg_monitor; MySQL and MariaDB:
// PROCESS, the replication and binary log monitoring rights, SELECT on
// performance_schema).
var (
	// postgresCollectors are postgres_exporter's: database sizes and
	// connection limits, wraparound, locks, the postmaster's start,
	// replication (as a replica, and the primary's slots), the statistics
	// of the databases, the background writer and checkpointer (the
	// latter from PostgreSQL 17), the WAL receiver and the WAL directory.
	postgresCollectors = []string{"database", "database_wraparound", "locks", "postmaster", "replication",
		"replication_slot", "stat_bgwriter", "stat_checkpointer", "stat_database", "stat_wal_receiver", "wal"}
	// mysqlScrapers are mysqld_exporter's: SHOW GLOBAL STATUS and
	// VARIABLES, the replica status, the binary logs, InnoDB's metrics
	// and the process list by state.
	mysqlScrapers = []mycollector.Scraper{mycollector.ScrapeGlobalStatus{}, mycollector.ScrapeGlobalVariables{},
		mycollector.ScrapeSlaveStatus{}, mycollector.ScrapeBinlogSize{}, mycollector.ScrapeInnodbMetrics{},
		mycollector.ScrapeProcesslist{}}
)

var (
	initOnce sync.Once
	errInit  error
)

// initLibraries gives the community collectors' settings their values.
// Both packages declare them as kingpin flags of kingpin's global
// application, whose defaults are set only when that application parses
// its command line: the agent never hands it its own (its flags are the
// standard library's, on their own FlagSet), so it parses a fixed list
// here once, which turns on the postgres_exporter collectors that are off
// by default and leaves every other flag at its default.
func initLibraries() error {
	initOnce.Do(func() {
		var args []string
		for _, name := range postgresCollectors {
			args = append(args, "--collector."+name)
		}
		if _, err := kingpin.CommandLine.Parse(args); err != nil {
			errInit = fmt.Errorf("metrics: setting the community collectors' defaults: %w", err)
		}
	})
	return errInit
}

// postgresExporter runs postgres_exporter's collectors once, within ctx,
// on a connection of their own.
func (c *Collector) postgresExporter(ctx context.Context, ch chan<- prometheus.Metric) error {
	creds, timeout, err := c.libraryLogin(ctx)
	if err != nil {
		return err
	}
	kv := map[string]string{
		"host": c.cfg.Server.Host, "port": strconv.Itoa(c.cfg.Server.Port), "user": creds.User, "password": creds.Password,
		"dbname": "postgres", "application_name": "database-agent-metrics", "sslmode": "disable",
		"connect_timeout": strconv.Itoa(int(math.Ceil(timeout.Seconds()))),
	}
	if c.cfg.TLSDir != "" {
		// The pod's certificate names 127.0.0.1.
		kv["sslmode"], kv["sslrootcert"] = "verify-full", filepath.Join(c.cfg.TLSDir, "ca.crt")
	}
	var dsn strings.Builder
	for _, k := range []string{"host", "port", "user", "password", "dbname", "application_name", "sslmode", "sslrootcert", "connect_timeout"} {
		if v, ok := kv[k]; ok {
			fmt.Fprintf(&dsn, "%s=%s ", k, pqQuote(v))
		}
	}
	pc, err := pgcollector.NewPostgresCollector(c.libLogger(creds.Password), []string{"template0", "template1"}, dsn.String(), postgresCollectors,
		pgcollector.WithCollectionTimeout(timeout.String()))
	if err != nil {
		return c.redact(err, creds)
	}
	// Collect opens, and closes, its own connection.
	return countSent(pc, ch, "postgres_exporter could not connect")
}

// libraryLogin is what a community collector connects with: the
// monitoring account and the time left of the scrape.
func (c *Collector) libraryLogin(ctx context.Context) (engine.Credentials, time.Duration, error) {
	creds, err := c.cfg.Credentials()
	if err != nil {
		return engine.Credentials{}, 0, fmt.Errorf("the monitoring account's credentials: %w", err)
	}
	timeout := time.Until(deadline(ctx, c.cfg.Timeout))
	if timeout < time.Millisecond {
		return engine.Credentials{}, 0, ctx.Err()
	}
	return creds, timeout, nil
}

// pqQuote quotes a value of a libpq connection string.
func pqQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// mysqldExporter runs mysqld_exporter's scrapers once, within ctx, on a
// connection of their own.
func (c *Collector) mysqldExporter(ctx context.Context, ch chan<- prometheus.Metric) error {
	creds, timeout, err := c.libraryLogin(ctx)
	if err != nil {
		return err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.Passwd = "tcp", c.cfg.Server.String(), creds.User, creds.Password
	// The driver's socket timeouts bound what the library runs without a
	// context (its connection check, the version query).
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = timeout, timeout, timeout
	cfg.AllowNativePasswords = true
	if tc, err := c.serverTLS(); err != nil {
		return err
	} else if tc != nil {
		name := "database-agent-metrics"
		if err := mysql.RegisterTLSConfig(name, tc); err != nil {
			return err
		}
		cfg.TLSConfig = name
	}
	e := mycollector.New(ctx, cfg.FormatDSN(), mysqlScrapers, c.libLogger(creds.Password),
		mycollector.EnableLockWaitTimeout(true), mycollector.SetLockWaitTimeout(2))
	return countSent(e, ch, "mysqld_exporter could not connect")
}

// countSent collects col into ch, an error when it sent nothing (it could
// not connect: the libraries only log that).
func countSent(col prometheus.Collector, ch chan<- prometheus.Metric, none string) error {
	inner := make(chan prometheus.Metric)
	done := make(chan struct{})
	n := 0
	go func() {
		for m := range inner {
			n++
			ch <- m
		}
		close(done)
	}()
	col.Collect(inner)
	close(inner)
	<-done
	if n == 0 {
		return fmt.Errorf("%s", none)
	}
	return nil
}

// deadline is ctx's deadline, or d from now.
func deadline(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}

// serverTLS verifies the local server with the mounted CA (nil: no TLS).
func (c *Collector) serverTLS() (*tls.Config, error) {
	if c.cfg.TLSDir == "" {
		return nil, nil
	}
	ca, err := os.ReadFile(filepath.Join(c.cfg.TLSDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	return engine.VerifyTLS(ca, "")
}

// The series by which the libraries say one of their collectors failed
// (0), or, for mysqld_exporter, that the server did not answer.
var failureSeries = []string{`fqName: "pg_scrape_collector_success"`, `fqName: "mysql_exporter_collector_success"`, `fqName: "mysql_up"`}

// collectorFailed says whether m is a library's report of a failed collector.
func collectorFailed(m prometheus.Metric) bool {
	d := m.Desc().String()
	for _, s := range failureSeries {
		if strings.Contains(d, s) {
			var out dto.Metric
			return m.Write(&out) == nil && out.GetGauge().GetValue() == 0
		}
	}
	return false
}

// libLogger is the libraries' logger: their errors reach the agent's log,
// each message at most every ten minutes (a failing collector fails at
// every scrape), with the password cut out; the rest is dropped.
func (c *Collector) libLogger(password string) *slog.Logger {
	return slog.New(&libHandler{c: c, password: password})
}

type libHandler struct {
	c        *Collector
	password string
	attrs    []slog.Attr
}

func (h *libHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *libHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	// Keyed without the timing attributes, which differ every time.
	key := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "duration_seconds" {
			key += " " + a.Key + "=" + a.Value.String()
		}
		return true
	})
	// The password this logger was made with, and the current one (the
	// libraries keep the loggers of their first use).
	msg := b.String()
	secrets := []string{h.password}
	if creds, err := h.c.cfg.Credentials(); err == nil {
		secrets = append(secrets, creds.Password)
	}
	for _, p := range secrets {
		if p != "" {
			msg, key = strings.ReplaceAll(msg, p, "***"), strings.ReplaceAll(key, p, "***")
		}
	}
	h.c.logOnce(key, msg)
	return nil
}

func (h *libHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &libHandler{c: h.c, password: h.password, attrs: append(append([]slog.Attr{}, h.attrs...), attrs...)}
}

func (h *libHandler) WithGroup(string) slog.Handler { return h }
