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
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"example.com/database-operator/internal/controller"
	"example.com/database-operator/tests/utils/localcluster"
	"example.com/database-operator/tests/utils/processnode"
)

const (
	nodeName      = "process-node-0"
	operatorImage = "example.com/database-operator/manager:test"
)

var (
	// kubectl and kubeconfig run kubectl against the cluster, as a user would.
	kubectl, kubeconfig string

	k8s  client.Client
	cs   kubernetes.Interface
	node *processnode.Node
)

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
	podCIDR := netip.MustParsePrefix("10.252.0.0/24")
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: bin, Dir: filepath.Join(dir, "cluster"),
		CRDDirs: []string{"../../config/crd/bases"}, NoSimulatedNodes: true,
		APIServerAddresses: []string{processnode.NodeAddress(podCIDR).String()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting local cluster:", err)
		return 1
	}
	defer c.Stop()
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
	nodeLog, _ := os.Create(filepath.Join(dir, "node.log"))
	node, err = processnode.Start(ctx, cs, processnode.Options{
		Name: nodeName, Dir: filepath.Join(dir, "node"), Bridge: "dbop-e2e0", NamePrefix: "e2e",
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
	opLog, _ := os.Create(filepath.Join(dir, "operator.log"))
	ctrl.SetLogger(zap.New(zap.WriteTo(opLog)))
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The operator reaches instances at their pod addresses, on the node's
	// bridge, as it would in a cluster.
	if err := controller.Setup(mgr, controller.Options{Values: controller.ValueOptions{
		OperatorImage: operatorImage, NoNetworkPolicy: true,
	}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgrCtx, stopMgr := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()

	code := m.Run()
	stopMgr()
	<-mgrDone
	cancel()
	node.Wait()
	if code != 0 {
		fmt.Printf("cluster, node and operator logs kept in %s\n", dir)
	} else {
		c.Stop()
		_ = os.RemoveAll(dir)
	}
	return code
}
