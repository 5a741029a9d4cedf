// Package metrics is the database metrics the agent serves on its pod's
// metrics port (/metrics, TLS with the pod's certificate): the series of
// the metric contract (database_*: up, role, replication, connections,
// sizes, WAL volume, the data volume), read with the monitoring account,
// and the Prometheus community's collectors for the engine, imported as
// libraries (postgres_exporter's pg_* and mysqld_exporter's mysql_*). Every
// series carries the constant label database="<Database name>".
//
// A scrape is bounded by a deadline: a server that does not answer gives
// database_instance_up 0 within it (the scrape itself succeeds), and a
// collector still stuck in a hung server from an earlier scrape is not
// started again until it returns (database_last_scrape_error says so).
package metrics

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// Port is the metrics port on the pod's address (containerPort 8012,
// named metrics); Path is where the metrics are.
const (
	Port = 8012
	Path = "/metrics"
)

// DefaultTimeout bounds a scrape unless Prometheus asks for less (its
// X-Prometheus-Scrape-Timeout-Seconds header; Prometheus's own default is 10 s).
const DefaultTimeout = 5 * time.Second

// Config is what the metrics need.
type Config struct {
	// Database is the Database's name: the constant label database.
	Database string
	Engine   dbv1.Engine
	// Server is the local server (127.0.0.1 and its port).
	Server engine.Endpoint
	// Credentials returns the monitoring account's credentials, read at
	// each scrape (a mounted Secret: a rotated password is picked up).
	Credentials func() (engine.Credentials, error)
	// TLSDir holds ca.crt, which the server's certificate is verified
	// with (empty: plain connections, as a pod started before its
	// Database had certificates).
	TLSDir string
	// DataDir is the server's data directory: the data volume's figures
	// are its file system's.
	DataDir string
	// Timeout bounds each scrape (zero: DefaultTimeout).
	Timeout time.Duration
	Log     logr.Logger
}

// Collector reads the metrics. It keeps one connection for the contract's
// series across scrapes (opened again after a failure or when the
// credentials change); the community collectors open their own per scrape
// (their libraries do not take a connection from outside).
type Collector struct {
	cfg   Config
	start time.Time
	libs  []*part
	vol   *part

	// sem serializes samples: the kept connection serves one at a time.
	sem     chan struct{}
	sampler engine.Sampler
	credSum [32]byte
	// sampleBusy: a sample still running after its scrape gave up on it.
	sampleBusy atomic.Bool

	mu sync.Mutex
	// version is the server's version as last read.
	version string
	// fresh, on a replica, is the latest time its applied data is known
	// to have been current: when it was last seen caught up with what it
	// received, or the time its last replayed transaction was committed
	// on the source (when that is later). Zero: not known yet (the
	// collector's start counts then).
	fresh time.Time

	// logged limits how often one message is logged.
	logMu  sync.Mutex
	logged map[string]time.Time
}

// New makes the collector of cfg.
func New(cfg Config) (*Collector, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Credentials == nil {
		return nil, errors.New("metrics: no monitoring credentials")
	}
	if err := initLibraries(); err != nil {
		return nil, err
	}
	c := &Collector{cfg: cfg, start: time.Now(), sem: make(chan struct{}, 1), logged: map[string]time.Time{}}
	c.vol = &part{name: "volume", run: c.volume}
	switch cfg.Engine {
	case dbv1.EnginePostgreSQL:
		c.libs = []*part{{name: "postgres_exporter", run: c.postgresExporter}}
	case dbv1.EngineMySQL, dbv1.EngineMariaDB:
		c.libs = []*part{{name: "mysqld_exporter", run: c.mysqldExporter}}
	default:
		return nil, fmt.Errorf("metrics: unknown engine %q", cfg.Engine)
	}
	return c, nil
}

// Close closes the kept connection.
func (c *Collector) Close() error {
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	if c.sampler != nil {
		err := c.sampler.Close()
		c.sampler = nil
		return err
	}
	return nil
}

// Handler serves the metrics in the Prometheus exposition formats. Each
// request gathers with its own deadline: the request's, Prometheus's
// scrape timeout (less a tenth, to answer in time) or Config.Timeout,
// whichever is first.
func (c *Collector) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeout := c.cfg.Timeout
		if s, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64); err == nil && s > 0 {
			timeout = min(timeout, time.Duration(s*0.9*float64(time.Second)))
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		promhttp.HandlerFor(c.Registry(ctx), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
	})
}

// Registry is a registry whose Gather scrapes once within ctx.
func (c *Collector) Registry(ctx context.Context) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{"database": c.cfg.Database}, reg).MustRegister(scrape{c: c, ctx: ctx})
	return reg
}

// scrape is one scrape as a prometheus.Collector (unchecked: the
// community collectors' series are not known beforehand).
type scrape struct {
	c   *Collector
	ctx context.Context
}

func (scrape) Describe(chan<- *prometheus.Desc) {}

func (s scrape) Collect(ch chan<- prometheus.Metric) { s.c.collect(s.ctx, ch) }

// part is one concurrent piece of a scrape that streams its series.
type part struct {
	name string
	run  func(ctx context.Context, ch chan<- prometheus.Metric) error
	// busy: still running, maybe from an earlier scrape that gave up on
	// it (a hung server); not started again until it returns.
	busy atomic.Bool
}

// The contract's series.
var (
	descUp          = desc("database_instance_up", "1 when the server answered the agent's last query (this scrape's), else 0.")
	descPrimary     = desc("database_instance_is_primary", "1 when the server is the primary and takes writes (read-write role), 0 on a replica or a fenced primary.")
	descInfo        = desc("database_instance_info", "Always 1: the server's engine and version string.", "engine", "version")
	descStreaming   = desc("database_replication_streaming", "Replica: 1 when its WAL receiver (PostgreSQL) or IO thread (MySQL, MariaDB) is connected to its source.")
	descApplying    = desc("database_replication_applying", "Replica: 1 when it applies what it receives (WAL replay not paused; the SQL thread runs).")
	descLagSeconds  = desc("database_replication_lag_seconds", "Replica: seconds the data it applied is behind its source (0 when it applied everything it received).")
	descLagBytes    = desc("database_replication_lag_bytes", "PostgreSQL replica: bytes of WAL received but not replayed.")
	descLagTxns     = desc("database_replication_lag_transactions", "MySQL/MariaDB replica: transactions received but not applied.")
	descConns       = desc("database_connections", "Client connections now.")
	descConnsMax    = desc("database_connections_max", "The server's max_connections.")
	descXIDAge      = desc("database_postgres_xid_age", "PostgreSQL: age in transactions of the oldest datfrozenxid (wraparound comes at 2^31).")
	descWAL         = desc("database_wal_bytes_total", "PostgreSQL: the WAL position as bytes; MySQL/MariaDB: bytes of the binary logs the server holds (drops when old ones are purged).")
	descSize        = desc("database_size_bytes", "Size of each user database (label datname).", "datname")
	descVolUsed     = desc("database_volume_used_bytes", "Bytes used on the data volume (statfs of the data directory).")
	descVolCapacity = desc("database_volume_capacity_bytes", "Bytes the server can use on the data volume: used plus available (blocks reserved for root are not counted).")
	descScrapeError = desc("database_last_scrape_error", "1 when a collector failed during the last scrape, else 0.")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collect runs one scrape: the sample of the contract's series, the data
// volume and the community collectors side by side, each bounded by ctx.
// The contract's series are sent last, from what the sample returned in
// time (database_instance_up 0 when it did not).
func (c *Collector) collect(ctx context.Context, ch chan<- prometheus.Metric) {
	type sampled struct {
		s   engine.Sample
		err error
	}
	var failed atomic.Bool
	result := make(chan sampled, 1)
	if c.sampleBusy.CompareAndSwap(false, true) {
		go func() {
			defer c.sampleBusy.Store(false)
			s, err := c.sample(ctx)
			result <- sampled{s, err}
		}()
	} else {
		result <- sampled{err: errors.New("the previous sample has not returned yet")}
	}

	out := make(chan prometheus.Metric, 256)
	var wg sync.WaitGroup
	for _, p := range append([]*part{c.vol}, c.libs...) {
		if !p.busy.CompareAndSwap(false, true) {
			c.logOnce(p.name+" busy", p.name+" has not returned since an earlier scrape (a hung server?): not started again until it does")
			failed.Store(true)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.busy.Store(false)
			if err := p.run(ctx, out); err != nil {
				c.logOnce(p.name+" "+err.Error(), p.name+": "+err.Error())
				failed.Store(true)
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()
forward:
	for {
		select {
		case m, ok := <-out:
			if !ok {
				break forward
			}
			if collectorFailed(m) {
				failed.Store(true)
			}
			ch <- m
		case <-ctx.Done():
			// Whatever still runs sends into the void until it returns.
			go func() {
				for range out {
				}
			}()
			failed.Store(true)
			break forward
		}
	}

	var r sampled
	select {
	case r = <-result:
	case <-ctx.Done():
		r.err = fmt.Errorf("no answer within the scrape's deadline: %w", ctx.Err())
	}
	if r.err != nil {
		failed.Store(true)
		c.logOnce("sample "+r.err.Error(), "the server did not answer the metrics query: "+r.err.Error())
	}
	c.sendSample(ch, r.s, r.err == nil)
	ch <- gauge(descScrapeError, boolf(failed.Load()))
}

// sendSample sends the contract's series of a sample (only up, and the
// version last read, when the server did not answer).
func (c *Collector) sendSample(ch chan<- prometheus.Metric, s engine.Sample, ok bool) {
	c.mu.Lock()
	if ok {
		c.version = s.Version
	}
	version := c.version
	c.mu.Unlock()
	ch <- gauge(descUp, boolf(ok))
	if version != "" {
		ch <- gauge(descInfo, 1, string(c.cfg.Engine), version)
	}
	if !ok {
		return
	}
	ch <- gauge(descPrimary, boolf(s.Status.Writable()))
	ch <- gauge(descConns, float64(s.Connections))
	ch <- gauge(descConnsMax, float64(s.MaxConnections))
	ch <- prometheus.MustNewConstMetric(descWAL, prometheus.CounterValue, s.WALBytes)
	for name, size := range s.DatabaseSizes {
		ch <- gauge(descSize, float64(size), name)
	}
	if c.cfg.Engine == dbv1.EnginePostgreSQL {
		ch <- gauge(descXIDAge, float64(s.XIDAge))
	}
	if s.Status.Role != engine.RoleReplica {
		return
	}
	ch <- gauge(descStreaming, boolf(s.Status.Streaming))
	ch <- gauge(descApplying, boolf(s.Applying))
	ch <- gauge(descLagSeconds, c.lagSeconds(s, time.Now()))
	if c.cfg.Engine == dbv1.EnginePostgreSQL {
		ch <- gauge(descLagBytes, float64(s.Status.Behind))
	} else {
		ch <- gauge(descLagTxns, float64(s.Status.Behind))
	}
}

// lagSeconds is how far behind a replica's applied data is at now: 0 when
// it applied everything it received; else the time since its data was
// last known to be current (fresh), which the server's own figure
// (LagSeconds) moves forward when it has one. While MySQL's or MariaDB's
// SQL thread is stopped the server gives none, and the lag grows from
// the moment the replica was last seen current.
func (c *Collector) lagSeconds(s engine.Sample, now time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.Status.Behind == 0 {
		c.fresh = now
		return 0
	}
	if s.LagKnown {
		if t := now.Add(-time.Duration(s.LagSeconds * float64(time.Second))); t.After(c.fresh) {
			c.fresh = t
		}
	}
	fresh := c.fresh
	if fresh.IsZero() {
		fresh = c.start
	}
	return max(0, now.Sub(fresh).Seconds())
}

// sample reads the server with the kept connection, opening it (again)
// when there is none or the credentials changed; a failed sample drops it.
func (c *Collector) sample(ctx context.Context) (engine.Sample, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return engine.Sample{}, ctx.Err()
	}
	defer func() { <-c.sem }()
	creds, err := c.cfg.Credentials()
	if err != nil {
		return engine.Sample{}, fmt.Errorf("the monitoring account's credentials: %w", err)
	}
	if sum := sha256.Sum256([]byte(creds.User + "\x00" + creds.Password)); c.sampler == nil || sum != c.credSum {
		if c.sampler != nil {
			_ = c.sampler.Close()
			c.sampler = nil
		}
		opts := engine.Options{ConnectTimeout: c.cfg.Timeout, CallTimeout: c.cfg.Timeout}
		if opts.TLS, err = c.serverTLS(); err != nil {
			return engine.Sample{}, err
		}
		s, err := engine.OpenSampler(ctx, c.cfg.Engine, c.cfg.Server, creds, opts)
		if err != nil {
			return engine.Sample{}, c.redact(err, creds)
		}
		c.sampler, c.credSum = s, sum
	}
	s, err := c.sampler.Sample(ctx)
	if err != nil {
		_ = c.sampler.Close()
		c.sampler = nil
		return engine.Sample{}, c.redact(err, creds)
	}
	return s, nil
}

// redact keeps the password out of an error that might quote it.
func (c *Collector) redact(err error, creds engine.Credentials) error {
	if creds.Password != "" && strings.Contains(err.Error(), creds.Password) {
		return errors.New(strings.ReplaceAll(err.Error(), creds.Password, "***"))
	}
	return err
}

// volume sends the data volume's figures, as df counts them: capacity is
// what the server can use (used plus available; blocks reserved for root
// are not), so used/capacity reaches 1 when the server can write no more.
// Before the data directory exists (a first start) its parent is used.
func (c *Collector) volume(_ context.Context, ch chan<- prometheus.Metric) error {
	var st syscall.Statfs_t
	dir := c.cfg.DataDir
	if dir == "" {
		return nil
	}
	err := syscall.Statfs(dir, &st)
	if errors.Is(err, os.ErrNotExist) {
		err = syscall.Statfs(filepath.Dir(dir), &st)
	}
	if err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := float64(st.Bsize)
	used := float64(st.Blocks-st.Bfree) * bs
	ch <- gauge(descVolUsed, used)
	ch <- gauge(descVolCapacity, used+float64(st.Bavail)*bs)
	return nil
}

// logOnce logs msg at most once every ten minutes per key: a failing
// collector fails at every scrape.
func (c *Collector) logOnce(key, msg string) {
	now := time.Now()
	c.logMu.Lock()
	if last, ok := c.logged[key]; ok && now.Sub(last) < logEvery {
		c.logMu.Unlock()
		return
	}
	if len(c.logged) >= 100 { // bounded: keys hold error texts
		clear(c.logged)
	}
	c.logged[key] = now
	c.logMu.Unlock()
	c.cfg.Log.Info("metrics: " + msg)
}

const logEvery = 10 * time.Minute

// FileCredentials reads the monitoring account's credentials from dir, its
// Secret mounted (files username and password). The Secret is optional in
// the pod (the operator creates it with the Database's accounts, maybe
// after the pod started): until the kubelet puts it there, the metrics
// say the server does not answer.
func FileCredentials(dir string) func() (engine.Credentials, error) {
	return func() (engine.Credentials, error) {
		if dir == "" {
			return engine.Credentials{}, errors.New("MONITORING_DIR is not set")
		}
		var v [2]string
		for i, f := range []string{"username", "password"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return engine.Credentials{}, fmt.Errorf("not mounted yet: %w", err)
			}
			v[i] = string(b) // exactly the Secret's bytes
		}
		if v[0] == "" || v[1] == "" {
			return engine.Credentials{}, fmt.Errorf("%s: empty username or password", dir)
		}
		return engine.Credentials{User: v[0], Password: v[1]}, nil
	}
}
