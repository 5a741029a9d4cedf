package agent

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent/metrics"
	"example.com/database-operator/internal/agent/serverlog"
	"example.com/database-operator/internal/engine"
)

// ProbePort is where the agent serves its probes, /livez and /readyz, to
// the kubelet's HTTP probes (the chart's port "probes"). They say "ok" or
// why not, and nothing else. (They were exec probes: each started this
// 100 MB binary again, about 0.15 CPU seconds; docs/architecture.md.)
const ProbePort = 8010

// DefaultListen is where the agent serves the probes: every address of the
// pod, for the kubelet.
var DefaultListen = fmt.Sprintf(":%d", ProbePort)

// Command runs "agent [flags] -- START-SCRIPT [ARGS...]" and
// "agent probe /livez|/readyz" (what the probes answer, asked from inside
// the pod: kubectl exec). The rest comes from the environment the
// chart sets: POD_NAME, POD_NAMESPACE, AGENT_LEASE, AGENT_ENGINE,
// AGENT_PORT, AGENT_LEASE_DURATION and AGENT_HANDOVER_TIMEOUT (Go
// durations; optional), POD_UID, TOPOLOGY_DIR, PEER_DOMAIN, REPLICATION_PASSWORD (from which
// the peer channel's token derives) and the superuser's credentials
// (POSTGRES_USER/POSTGRES_PASSWORD, or root and ROOT_PASSWORD); for the
// metrics port, DATABASE_NAME, MONITORING_DIR and PGDATA or DATADIR; for
// PostgreSQL's logs, SERVER_LOG_DIR (its log_directory).
func Command(ctx context.Context, args []string, logw io.Writer) error {
	if len(args) > 0 && args[0] == "probe" {
		if len(args) != 2 {
			return fmt.Errorf("usage: agent probe /livez|/readyz")
		}
		return Probe(ctx, fmt.Sprintf("127.0.0.1:%d", ProbePort), args[1])
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	listen := fs.String("listen", DefaultListen, "address of the probe endpoints")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("usage: agent [flags] -- START-SCRIPT [ARGS...]")
	}
	env := func(k string) (string, error) {
		if v := os.Getenv(k); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%s is not set", k)
	}
	cfg := Config{Listen: *listen, Command: fs.Args(), TopologyDir: os.Getenv("TOPOLOGY_DIR"),
		PeerListen: fmt.Sprintf(":%d", PeerPort), PeerDomain: os.Getenv("PEER_DOMAIN")}
	var err error
	for k, dst := range map[string]*string{"POD_NAME": &cfg.Pod, "POD_NAMESPACE": &cfg.Namespace, "AGENT_LEASE": &cfg.LeaseName} {
		if *dst, err = env(k); err != nil {
			return err
		}
	}
	e, err := env("AGENT_ENGINE")
	if err != nil {
		return err
	}
	cfg.Engine = dbv1.Engine(e)
	port, err := strconv.Atoi(os.Getenv("AGENT_PORT"))
	if err != nil {
		return fmt.Errorf("AGENT_PORT: %w", err)
	}
	cfg.Server = engine.Endpoint{Host: "127.0.0.1", Port: port}
	cfg.PodUID = os.Getenv("POD_UID")
	if err := durationsFromEnv(map[string]*time.Duration{"AGENT_LEASE_DURATION": &cfg.LeaseDuration, "AGENT_HANDOVER_TIMEOUT": &cfg.HandoverTimeout,
		EnvBinlogArchiveTimeout: &cfg.BinlogTimeout}); err != nil {
		return err
	}
	cfg.TLSDir = os.Getenv("TLS_DIR")
	if cfg.Engine == dbv1.EnginePostgreSQL {
		cfg.Superuser = engine.Credentials{User: os.Getenv("POSTGRES_USER"), Password: os.Getenv("POSTGRES_PASSWORD")}
	} else {
		cfg.Superuser = engine.Credentials{User: engine.ProfileOf(cfg.Engine).Superuser, Password: os.Getenv("ROOT_PASSWORD")}
	}
	repl, err := env("REPLICATION_PASSWORD")
	if err != nil {
		return err
	}
	cfg.PeerToken = PeerToken(repl)
	cfg.Log = logger(logw).WithValues("pod", cfg.Pod)
	if cfg.BinlogArchive, err = binlogArchiveFromEnv(ctx); err != nil {
		return err
	}
	if cfg.WALStream, err = walStreamFromEnv(ctx); err != nil {
		return err
	}
	if err := withMetrics(&cfg); err != nil {
		// The server runs all the same: metrics are not worth an outage.
		cfg.Log.Error(err, "not serving the database metrics")
	}
	relay := relayServerLog(&cfg)
	rc, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("the agent reaches the API server with the pod's service account: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	cfg.Leases = cs.CoordinationV1().Leases(cfg.Namespace)
	err = New(cfg).Run(ctx)
	if relay != nil {
		// The logging collector outlives its server by a moment and writes
		// the last lines (a crash's): what the previous container's log
		// must hold.
		relay.Drain(5 * time.Second)
	}
	return err
}

// relayServerLog relays PostgreSQL's log from the named pipes in
// SERVER_LOG_DIR to the container's output, and tells the start script to
// point the server's logging collector at them (AGENT_LOG_PIPES): only
// then, since a server opening a pipe nobody reads would wait forever. It
// runs before the server starts, and outlives it (see Command).
func relayServerLog(cfg *Config) *serverlog.Relay {
	dir := os.Getenv("SERVER_LOG_DIR")
	if dir == "" || cfg.Engine != dbv1.EnginePostgreSQL {
		return nil
	}
	relay, err := serverlog.Start(dir, cfg.Log, serverlog.PostgresPipes(os.Stdout, os.Stderr)...)
	if err != nil {
		// The server runs all the same, logging plain text to stderr.
		cfg.Log.Error(err, "not relaying the server's JSON log")
		return nil
	}
	cfg.ServerEnv = append(cfg.ServerEnv, "AGENT_LOG_PIPES="+dir)
	return relay
}

// withMetrics sets up the metrics port: the Database's name from
// DATABASE_NAME (or the Lease's, <name>-primary), the monitoring
// account's credentials from the Secret mounted at MONITORING_DIR (read at
// each scrape: it may appear or rotate after the pod started), the data
// directory from PGDATA or DATADIR.
func withMetrics(cfg *Config) error {
	name := os.Getenv("DATABASE_NAME")
	if name == "" {
		name = strings.TrimSuffix(cfg.LeaseName, "-primary")
	}
	dataDir := os.Getenv("DATADIR")
	if cfg.Engine == dbv1.EnginePostgreSQL {
		dataDir = os.Getenv("PGDATA")
	}
	m, err := metrics.New(metrics.Config{
		Database: name, Engine: cfg.Engine, Server: cfg.Server, TLSDir: cfg.TLSDir, DataDir: dataDir,
		Credentials: metrics.FileCredentials(os.Getenv("MONITORING_DIR")), Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(metrics.Path, m.Handler())
	cfg.MetricsListen, cfg.Metrics = fmt.Sprintf(":%d", metrics.Port), mux
	return nil
}

// logger writes one line of key-value pairs per entry, as the start scripts' lines sit beside it.
func logger(w io.Writer) logr.Logger {
	return funcr.New(func(_, args string) { fmt.Fprintln(w, "agent:", args) }, funcr.Options{LogTimestamp: true})
}

// durationsFromEnv reads each set variable of vars (Go durations).
func durationsFromEnv(vars map[string]*time.Duration) error {
	for k, dst := range vars {
		if v := os.Getenv(k); v != "" {
			var err error
			if *dst, err = time.ParseDuration(v); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return nil
}
