// Package e2e runs the operator against real pods: the local control plane
// with a process node (tests/utils/processnode) as its only node, so every
// instance is a real PostgreSQL 15 or MariaDB 10.11 server started from the
// pod the chart renders (its command, environment, volumes, user, probes),
// and clients reach them as an application would: through the Services'
// DNS names and the pods' addresses.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	olmcrds "github.com/operator-framework/api/crds"
	apiv2 "github.com/operator-framework/api/pkg/operators/v2"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/database-operator/internal/controller"
	"example.com/database-operator/tests/utils/localcluster"
	"example.com/database-operator/tests/utils/olmrbac"
	"example.com/database-operator/tests/utils/processnode"
)

const (
	nodeName      = "process-node-0"
	operatorImage = "example.com/database-operator/manager:test"
	// operatorImageNext is the same binary under a new tag: an operator
	// upgrade that changes every Database's pod template.
	operatorImageNext = "example.com/database-operator/manager:next"
)

var (
	// kubectl and kubeconfig run kubectl against the cluster, as a user would.
	kubectl, kubeconfig string

	k8s  client.Client
	cs   kubernetes.Interface
	node *processnode.Node
	// cluster is the control plane, for tests that restart its API server.
	cluster *localcluster.Cluster
	// operatorCondition is where the operator reports Upgradeable, as
	// under OLM.
	operatorCondition types.NamespacedName
)

// TestMain starts one control plane, one process node and one operator
// for every test of the package.
//
// Parallel tests. A test that makes its own Database (in a namespace of
// its own) and faults only its own pods (a pod's link, machine or server)
// calls t.Parallel(): it runs beside the others once the sequential tests
// are done (`-parallel 3`: most of their time is spent waiting on servers,
// Leases and delays, not on the CPU). The tests that act on what every
// Database shares stay sequential: the operator killed or restarted, the
// API server restarted or cut off from the pods (node.BlockAPI), the node
// cordoned or drained.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin := os.Getenv("LOCAL_CLUSTER_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "LOCAL_CLUSTER_BIN is not set: run these tests with `make test-integration`")
		return 1
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the process node needs root")
		return 1
	}
	dir, err := os.MkdirTemp("", "dbop-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// E2E_NETWORK=N (0-3) gives a second run of this package on the same
	// machine a bridge and addresses of its own.
	netIndex := 0
	if v := os.Getenv("E2E_NETWORK"); v != "" {
		if netIndex, err = strconv.Atoi(v); err != nil || netIndex < 0 || netIndex > 3 {
			fmt.Fprintf(os.Stderr, "E2E_NETWORK=%q: want 0 to 3\n", v)
			return 1
		}
	}
	podCIDR := netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/24", 252+netIndex))
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: bin, Dir: filepath.Join(dir, "cluster"),
		CRDDirs: []string{"../../config/crd/bases"}, NoSimulatedNodes: true,
		APIServerAddresses: []string{processnode.NodeAddress(podCIDR).String()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting local cluster:", err)
		return 1
	}
	defer c.Stop()
	cluster = c
	cs = kubernetes.NewForConfigOrDie(c.Config)
	kubeconfig = c.Kubeconfig
	kubectl = filepath.Join(bin, "kubectl")
	ca, err := c.CACert()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The operator's image is its manager binary, built as the image has it:
	// backup and restore Jobs copy it from there.
	manager := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", manager, "../../cmd").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the manager: %v\n%s", err, out)
		return 1
	}
	images := processnode.DatabaseImages()
	images[operatorImage] = processnode.Image{Binds: map[string]string{"/manager": manager}}
	images[operatorImageNext] = images[operatorImage]
	nodeLog, _ := os.Create(filepath.Join(dir, "node.log"))
	node, err = processnode.Start(ctx, cs, processnode.Options{
		Name: nodeName, Dir: filepath.Join(dir, "node"), Bridge: fmt.Sprintf("dbop-e2e%d", netIndex), NamePrefix: fmt.Sprintf("e2e%d", netIndex),
		PodCIDR: podCIDR, APIServer: strings.TrimPrefix(c.Config.Host, "https://"),
		Images: images,
		// Restarts and probes as a kubelet's, but not slower than a test needs.
		BackoffBase: time.Second, BackoffMax: 10 * time.Second, ProbePeriod: 2 * time.Second,
		StorageClass: "process-node", DefaultStorageClass: true,
		KubeletClientCA: ca,
		Log:             funcr.New(func(prefix, args string) { fmt.Fprintln(nodeLog, prefix, args) }, funcr.Options{}),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting process node:", err)
		return 1
	}

	scheme, err := controller.NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(c.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if operatorCondition, err = installOperatorCondition(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "OperatorCondition:", err)
		return 1
	}
	opLog, _ := os.Create(filepath.Join(dir, "operator.log"))
	ctrl.SetLogger(zap.New(zap.WriteTo(opLog)))
	// The operator reaches instances at their pod addresses, on the node's
	// bridge, as it would in a cluster.
	// The operator runs as its service account with exactly the RBAC its
	// bundle grants (AllNamespaces, as OLM grants it): every test here is
	// also a test of that RBAC.
	opConfig, err := operatorAccount(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "the operator's service account:", err)
		return 1
	}
	op = newOperator(opConfig, scheme, controller.Options{
		Values:      controller.ValueOptions{OperatorImage: operatorImage, NoNetworkPolicy: true},
		Upgradeable: controller.NamespacedConditions{Client: k8s, Key: operatorCondition},
	})
	if err := op.start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "starting the operator:", err)
		return 1
	}

	code := m.Run()
	printFaultTable()
	op.kill()
	cancel()
	node.Wait()
	if pluginDir != "" {
		_ = os.RemoveAll(pluginDir)
	}
	if code != 0 {
		// The logs, not the volumes' data: gigabytes per run, which
		// filled the disk of a machine that ran many (E2E_KEEP_VOLUMES=1
		// keeps them).
		// Never through a volume still mounted (a node that did not stop
		// cleanly): its image would stay attached, and its files gone.
		if claims := filepath.Join(dir, "node", "claims"); os.Getenv("E2E_KEEP_VOLUMES") == "" && !mountsUnder(claims) {
			_ = os.RemoveAll(claims)
		}
		fmt.Printf("cluster, node and operator logs kept in %s\n", dir)
	} else {
		c.Stop()
		_ = os.RemoveAll(dir)
	}
	return code
}

// operatorAccount grants the operator's service account the bundle's RBAC
// for all namespaces and returns a client configuration acting as it.
func operatorAccount(ctx context.Context, c *localcluster.Cluster) (*rest.Config, error) {
	bundle, err := olmrbac.Load(olmrbac.CSVPath)
	if err != nil {
		return nil, err
	}
	const ns = "database-operator-system"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	user, err := bundle.Grant(ctx, k8s, ns, nil)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg, nil
}

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

// mountsUnder reports whether anything is mounted at or below dir.
func mountsUnder(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true // unknown: assume so
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}
