// Package integration runs the operator against a real local control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok),
// started once for the package by TestMain.
package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	olmcrds "github.com/operator-framework/api/crds"
	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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
	servers *serverRegistry
	// operatorCondition is where the operator reports Upgradeable.
	operatorCondition types.NamespacedName
	// jobs runs the backup and restore Jobs' pods.
	jobs *jobRunner
}

// serverRegistry maps instance pods (simulated by kwok) to real database
// servers on loopback: the resolver the in-process operator uses.
type serverRegistry struct {
	mu    sync.Mutex
	ports map[string]int // namespace/pod -> port
}

func (s *serverRegistry) set(namespace, pod string, port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ports[namespace+"/"+pod] = port
}

func (s *serverRegistry) resolve(_ context.Context, pod *corev1.Pod, _ int) (engine.Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	port, ok := s.ports[pod.Namespace+"/"+pod.Name]
	if !ok {
		return engine.Endpoint{}, fmt.Errorf("no server runs for pod %s/%s", pod.Namespace, pod.Name)
	}
	return engine.Endpoint{Host: "127.0.0.1", Port: port}, nil
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
	// Backup and restore Job pods are run by the test (jobRunner), not
	// completed by kwok.
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
	servers := &serverRegistry{ports: map[string]int{}}
	// The operator reports Upgradeable to an OperatorCondition, as under
	// OLM. Its writes go through an uncounted client: the steady-state test
	// counts the Database reconciler's writes, and the reporter writes only
	// when some Database starts or ends a failover or switchover.
	condKey, err := installOperatorCondition(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "OperatorCondition:", err)
		return 1
	}
	if err := controller.Setup(mgr, controller.Options{
		Values:      controller.ValueOptions{OperatorNamespace: "database-operator-system", OperatorImage: "example.com/database-operator/manager:test"},
		Resolve:     servers.resolve,
		Upgradeable: controller.NamespacedConditions{Client: userClient, Key: condKey},
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

	// The Jobs' program is the manager binary, built as the image has it.
	manager := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", manager, "../../cmd").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the manager: %v\n%s", err, out)
		return 1
	}
	jobs := newJobRunner(userClient, manager, servers, dir)
	go jobs.loop(ctx)

	testEnv = env{cluster: c, client: userClient, writes: writes, servers: servers, operatorCondition: condKey, jobs: jobs}
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

// installOperatorCondition installs OLM's OperatorCondition CRD and the
// object OLM would make for the operator's CSV.
func installOperatorCondition(ctx context.Context, c *localcluster.Cluster) (types.NamespacedName, error) {
	key := types.NamespacedName{Namespace: "database-operator-system", Name: "database-operator.v0.2.0"}
	ext, err := apiextclient.NewForConfig(c.Config)
	if err != nil {
		return key, err
	}
	crd := olmcrds.OperatorCondition()
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return key, err
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		return key, err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return key, err
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}); err != nil {
		return key, err
	}
	oc := &apiv2.OperatorCondition{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	// The CRD takes a moment to be served.
	return key, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cl.Create(ctx, oc) == nil, nil
	})
}
