package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"

	"example.com/database-operator/tests/utils/localcluster"
	"example.com/database-operator/tests/utils/processnode"
)

const processNodeName = "process-node-0"

// OperatorImage is the operator's image under `make run` (hack/run.sh gives
// it to the manager as RELATED_IMAGE_MANAGER): backup and restore Jobs take
// the manager binary from it, which the node maps to bin/manager.
const OperatorImage = "example.com/database-operator/manager:dev"

// The pod network of `make run`'s node; the tests' nodes use other ones.
var processNodeCIDR = netip.MustParsePrefix("10.250.0.0/24")

// realPods says whether pods can run as real processes here, and why not.
func realPods(nodes string) (bool, string) {
	switch nodes {
	case "simulated":
		return false, "(--nodes=simulated)"
	case "auto", "process":
	default:
		return false, fmt.Sprintf("unknown --nodes %q: want auto, process or simulated", nodes)
	}
	if os.Geteuid() != 0 {
		return false, "Real pods need root (network and mount namespaces): run `make run` as root."
	}
	_, pgErr := os.Stat(filepath.Join(processnode.PostgresBin, "postgres"))
	_, mariaErr := os.Stat(processnode.MariaDBServer)
	if pgErr != nil && mariaErr != nil {
		return false, "Real pods need the database servers: apt-get install postgresql-15 mariadb-server mariadb-client mariadb-backup (their services may stay stopped)."
	}
	return true, ""
}

// startProcessNode runs the cluster's one node, whose pods are real
// processes: the database images map to the Debian packages, and claims get
// a directory under dir.
func startProcessNode(ctx context.Context, c *localcluster.Cluster, dir, manager string) (*processnode.Node, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "node.log"))
	if err != nil {
		return nil, err
	}
	ca, err := c.CACert()
	if err != nil {
		return nil, err
	}
	images := processnode.DatabaseImages()
	if manager != "" {
		abs, err := filepath.Abs(manager)
		if err != nil {
			return nil, err
		}
		images[OperatorImage] = processnode.Image{Binds: map[string]string{"/manager": abs}}
	}
	return processnode.Start(ctx, cs, processnode.Options{
		KubeletClientCA: ca, APIServer: strings.TrimPrefix(c.Config.Host, "https://"),
		Name: processNodeName, Dir: dir, Bridge: "dbop-run0", NamePrefix: "run", PodCIDR: processNodeCIDR,
		Images:       images,
		StorageClass: "process-node", DefaultStorageClass: true,
		Log: funcr.New(func(prefix, args string) { fmt.Fprintln(logf, prefix, args) }, funcr.Options{}),
	})
}
