// Package integration runs the operator against a real local control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok),
// started once for the package by TestMain. Pods are kwok's simulation: no
// server runs behind them, so these tests are about the API, rendering,
// status and the operator's writes. Failover, switchover, rejoin, backup
// and restore run on real pods in tests/e2e.
package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"example.com/database-operator/internal/controller"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/tests/utils/localcluster"
)

// env is what every test uses: a client as a user would have one, and the
// count of write requests the operator has sent.
type env struct {
	cluster *localcluster.Cluster
	client  client.Client
	writes  *writeCounter
}

// testEnv is set once by TestMain and only read by the tests.
var testEnv env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin := os.Getenv("LOCAL_CLUSTER_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "LOCAL_CLUSTER_BIN is not set: run these tests with `make test-integration`")
		return 1
	}
	dir, err := os.MkdirTemp("", "dbop-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	start := time.Now()
	// The CRDs go in before the controller manager starts, so its garbage
	// collector knows the Database kind from the start (it rediscovers kinds
	// only every 30 s).
	// Backup and restore Job pods stay Running (kwok does not complete
	// them): Backups here are about validation and status, and tests/e2e
	// runs their Jobs for real.
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: bin, Dir: dir, CRDDirs: []string{"../../config/crd/bases"},
		KeepRunning: []string{controller.JobAppName}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting local cluster:", err)
		return 1
	}
	defer c.Stop()
	fmt.Printf("local cluster up in %.1fs (logs: %s)\n", time.Since(start).Seconds(), filepath.Join(dir, "logs"))

	scheme, err := controller.NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	userClient, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// The operator runs in-process, with its own REST config whose transport
	// counts the write requests it sends.
	writes := &writeCounter{}
	opCfg := rest.CopyConfig(c.Config)
	opCfg.Wrap(writes.wrap)
	ctrl.SetLogger(zap.New(zap.WriteTo(openLog(dir)), zap.UseDevMode(false)))
	webhookServer, webhooks, err := newWebhookServer(c, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := ctrl.NewManager(opCfg, ctrl.Options{
		Scheme:                 scheme,
		WebhookServer:          webhookServer,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false, // lease renewals would count as writes
		Cache:                  controller.CacheOptions(nil),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := controller.Setup(mgr, controller.Options{
		Values: controller.ValueOptions{OperatorNamespace: "database-operator-system", OperatorImage: "example.com/database-operator/manager:test"},
		// No server runs behind a simulated pod: say so at once rather
		// than dial the address kwok made up.
		Resolve: func(_ context.Context, pod *corev1.Pod, _ int) (engine.Endpoint, error) {
			return engine.Endpoint{}, fmt.Errorf("pod %s/%s is simulated: no server runs", pod.Namespace, pod.Name)
		},
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := registerWebhooks(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	if err := startedWebhooks(ctx, c, mgr, webhooks); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testWebhooks = webhooks

	testEnv = env{cluster: c, client: userClient, writes: writes}
	code := m.Run()
	cancel()
	if err := <-mgrDone; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	if code != 0 {
		fmt.Printf("cluster and operator logs kept in %s\n", dir)
	} else {
		c.Stop()
		_ = os.RemoveAll(dir)
	}
	return code
}

func openLog(dir string) *os.File {
	f, err := os.Create(filepath.Join(dir, "logs", "operator.log"))
	if err != nil {
		return os.Stderr
	}
	return f
}

// writeCounter records the requests that change state: everything but
// GET (which includes list and watch), HEAD and OPTIONS.
type writeCounter struct {
	mu     sync.Mutex
	writes []string
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			w.mu.Lock()
			w.writes = append(w.writes, req.Method+" "+req.URL.Path)
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// mark returns a position to pass to since.
func (w *writeCounter) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

// since returns the writes after mark to the given namespace.
func (w *writeCounter) since(mark int, namespace string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, wr := range w.writes[mark:] {
		if strings.Contains(wr, "/namespaces/"+namespace+"/") {
			out = append(out, wr)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
