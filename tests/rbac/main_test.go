// Package rbac runs the operator with exactly the RBAC its bundle grants,
// as OLM grants it in each install mode, on a real local control plane
// whose API server keeps an audit log; the log is then read for every
// request the operator's service account made.
package rbac

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/database-operator/internal/controller"
	"example.com/database-operator/tests/utils/localcluster"
)

var (
	cluster *localcluster.Cluster
	scheme  *runtime.Scheme
	k8s     client.Client
	cs      kubernetes.Interface
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	bin := os.Getenv("LOCAL_CLUSTER_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "LOCAL_CLUSTER_BIN is not set: run these tests with `make test-integration`")
		return 1
	}
	dir, err := os.MkdirTemp("", "dbop-rbac-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The managers' logs would drown the test's; their errors show in the
	// Databases' conditions and the audit log.
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// Backup Job pods stay Running (kwok does not complete them): what is
	// checked here is that the operator may make them.
	// The Prometheus operator's CRDs too: the operator applies its
	// monitoring objects where they are served.
	crds := os.Getenv("MONITORING_CRDS")
	if crds == "" {
		fmt.Fprintln(os.Stderr, "MONITORING_CRDS is not set: run these tests with `make test-integration`")
		return 1
	}
	cluster, err = localcluster.Start(ctx, localcluster.Options{BinDir: bin, Dir: dir, CRDDirs: []string{"../../config/crd/bases", crds},
		KeepRunning: []string{controller.JobAppName}, AuditLog: true, Nodes: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting local cluster:", err)
		return 1
	}
	defer cluster.Stop()
	fmt.Printf("local cluster up in %.1fs (logs: %s)\n", time.Since(start).Seconds(), filepath.Join(dir, "logs"))
	if scheme, err = controller.NewScheme(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cluster.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cs, err = kubernetes.NewForConfig(cluster.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	return code
}
