// Command manager runs database-operator: the controller manager with the
// Database reconciler, the Database's webhooks (conversion, defaulting,
// validation), health probes and secured Prometheus metrics.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/operator-framework/operator-lib/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/pitr"
	"example.com/database-operator/internal/backup/wal"
	"example.com/database-operator/internal/controller"
	// +kubebuilder:scaffold:imports
)

func main() {
	// One signal handler for the process (controller-runtime allows one).
	if err := dispatch(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "database-operator:", err)
		os.Exit(1)
	}
}

// dispatch runs a subcommand (the programs backup and restore Jobs run
// from this same binary, the agent, PostgreSQL's archive and restore
// commands) or, by default, the manager.
func dispatch(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "backup":
			return backup.Command(ctx, args[1:], os.Stderr)
		case "restore":
			return backup.RestoreCommand(ctx, args[1:], os.Stderr)
		case "agent":
			return agent.Command(ctx, args[1:], os.Stderr)
		case "recover":
			return pitr.Command(ctx, args[1:], os.Stderr)
		case "wal-push":
			return wal.PushCommand(ctx, args[1:], os.Stderr)
		case "wal-fetch":
			return wal.FetchCommand(ctx, args[1:], os.Stderr)
		case "copy-binary":
			if len(args) != 2 {
				return fmt.Errorf("usage: copy-binary DESTINATION")
			}
			return backup.CopyBinary(args[1])
		}
	}
	return run(ctx, args)
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var (
		metricsAddr    = fs.String("metrics-bind-address", ":8443", "address of the metrics endpoint (HTTPS, authenticated and authorized through the API server); 0 disables it")
		insecure       = fs.Bool("metrics-insecure", false, "serve metrics over plain HTTP without authentication (local development only)")
		probeAddr      = fs.String("health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
		leaderElect    = fs.Bool("leader-elect", true, "elect a leader so that only one replica of the operator reconciles")
		leaderNS       = fs.String("leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's namespace)")
		watchNS        = fs.String("watch-namespaces", os.Getenv("WATCH_NAMESPACES"), "comma-separated namespaces to manage; empty manages all")
		operatorNS     = fs.String("operator-namespace", os.Getenv("POD_NAMESPACE"), "namespace the operator runs in; let through the Databases' NetworkPolicies")
		enableHTTP2    = fs.Bool("enable-http2", false, "serve metrics over HTTP/2 (off: mitigates HTTP/2 rapid-reset attacks)")
		networkPolicy  = fs.Bool("network-policy", true, "render a NetworkPolicy for each Database (turn off where the network plugin does not enforce them)")
		monitoringObjs = fs.Bool("monitoring-objects", os.Getenv("MONITORING_OBJECTS") != "false", "apply the operator's ServiceMonitor, the database pods' PodMonitor and the alerts' PrometheusRule in the operator's namespace where the cluster serves monitoring.coreos.com/v1 (the Prometheus operator), owned by the Deployment OPERATOR_DEPLOYMENT names (default from MONITORING_OBJECTS: an OLM Subscription sets it in spec.config.env)")
		metricsCertDir = fs.String("metrics-cert-dir", "", "directory with tls.crt and tls.key for the metrics server; empty generates a self-signed certificate")
		leaseDuration  = fs.Duration("primary-lease-duration", agent.DefaultLeaseDuration, "duration of each Database's primary Lease: a primary cut off from the API server stops taking writes after four fifths of it, and failover waits six fifths of it for a primary it cannot fence")
		workers        = fs.Int("database-workers", controller.DefaultDatabaseWorkers, "Databases reconciled at once: a slow or hung server of one Database must not hold up another's failover")
		rollouts       = fs.Int("max-concurrent-rollouts", controller.DefaultConcurrentRollouts, "Databases that roll a pod template change out at once: an operator upgrade changes every Database's template, and they are rolled a few at a time")
		rolloutReady   = fs.Duration("rollout-ready-timeout", controller.DefaultRolloutReadyTimeout, "how long a rollout waits for a restarted instance to become ready before it reports the rollout stuck (RolloutStuck) and lets other Databases roll")
	)
	webhooks := bindWebhookFlags(fs)
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// JSON in production (the default); --zap-devel switches to console logs.
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	var namespaces []string
	for _, ns := range strings.Split(*watchNS, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}

	scheme, err := controller.NewScheme()
	if err != nil {
		return err
	}
	// +kubebuilder:scaffold:scheme
	var tlsOpts []func(*tls.Config)
	if !*enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   *metricsAddr,
		SecureServing: !*insecure,
		CertDir:       *metricsCertDir,
		TLSOpts:       tlsOpts,
	}
	if !*insecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		WebhookServer:                 webhooks.server(tlsOpts),
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        *probeAddr,
		LeaderElection:                *leaderElect,
		LeaderElectionID:              "database-operator.example.com",
		LeaderElectionNamespace:       *leaderNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(namespaces),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if *leaseDuration < 5*time.Second {
		return fmt.Errorf("--primary-lease-duration=%s: want at least 5s", *leaseDuration)
	}
	if *rollouts < 1 {
		return fmt.Errorf("--max-concurrent-rollouts=%d: want at least 1", *rollouts)
	}
	if *workers < 1 {
		return fmt.Errorf("--database-workers=%d: want at least 1", *workers)
	}
	opts := controller.Options{Values: controller.ValueOptions{
		OperatorNamespace: *operatorNS, NoNetworkPolicy: !*networkPolicy, Images: controller.ImagesFromEnv(os.Environ()),
		OperatorImage: os.Getenv("RELATED_IMAGE_MANAGER")}, DatabaseWorkers: *workers, PrimaryLeaseDuration: *leaseDuration,
		ConcurrentRollouts: *rollouts, RolloutReadyTimeout: *rolloutReady, NoMonitoringObjects: !*monitoringObjs,
		OperatorDeployment: os.Getenv("OPERATOR_DEPLOYMENT")}
	// OLM names the operator's OperatorCondition in the Deployment it
	// manages; without it (a kustomize install) there is nothing to report to.
	if os.Getenv("OPERATOR_CONDITION_NAME") != "" {
		// Read and written directly: one object, no need to cache all of them.
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		opts.Upgradeable = conditions.InClusterFactory{Client: direct}
	} else {
		ctrl.Log.WithName("setup").Info("not managed by OLM (OPERATOR_CONDITION_NAME unset): Upgradeable is not reported")
	}
	if err := controller.Setup(mgr, opts); err != nil {
		return err
	}
	if err := webhooks.setup(mgr); err != nil {
		return err
	}
	// +kubebuilder:scaffold:builder
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting manager", "namespaces", namespaces, "leaderElection", *leaderElect)
	return mgr.Start(ctx)
}
