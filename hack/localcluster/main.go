// Command localcluster starts and stops the local control plane that
// `make cluster` and `make run` use.
//
//	localcluster up   --bin-dir DIR --dir .local   # start in the background, return when ready
//	localcluster down --dir .local                  # stop it and wait until it is gone
//	localcluster serve --bin-dir DIR --dir .local   # run in the foreground until SIGTERM/SIGINT
//	    --nodes auto|process|simulated                # real pods on a process node (root, Debian's
//	                                                # PostgreSQL 15 / MariaDB 10.11) or kwok's simulated ones
//	localcluster webhooks --dir .local --manifests config/webhook/manifests.yaml --webhook-addr 127.0.0.1:9443
//	                                                # issue the webhook server's certificate from the
//	                                                # cluster CA into .local/webhook-certs and register
//	                                                # the webhooks and the CRD's conversion at that address
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"example.com/database-operator/tests/utils/localcluster"
	"example.com/database-operator/tests/utils/processnode"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|down|serve|webhooks [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	binDir := fs.String("bin-dir", os.Getenv("LOCAL_CLUSTER_BIN"), "directory with the control-plane binaries (hack/build-tools.sh prints it)")
	dir := fs.String("dir", ".local", "state directory: kubeconfig, logs, data, bin/ links")
	crds := fs.String("crds", "", "directory of CRD manifests to install before the controller manager starts")
	manifests := fs.String("manifests", "config/webhook/manifests.yaml", "webhooks: the generated webhook configurations")
	nodes := fs.String("nodes", "auto", "up/serve: process (pods are real processes: needs root and the Debian database packages), simulated (kwok), or auto (process when possible)")
	manager := fs.String("manager", "bin/manager", "up/serve: the manager binary that the operator's image ("+OperatorImage+") runs on the process node")
	webhookAddr := fs.String("webhook-addr", "127.0.0.1:9443", "webhooks: where the operator's webhook server listens")
	_ = fs.Parse(os.Args[2:])

	var err error
	switch os.Args[1] {
	case "up":
		err = up(*binDir, *dir, *crds, *nodes, *manager)
	case "down":
		err = down(*dir)
	case "serve":
		err = serve(*binDir, *dir, *crds, *nodes, *manager)
	case "webhooks":
		err = webhooks(*dir, *manifests, *webhookAddr)
	default:
		err = fmt.Errorf("unknown command %q: want up, down, serve or webhooks", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func pidFile(dir string) string   { return filepath.Join(dir, "cluster.pid") }
func readyFile(dir string) string { return filepath.Join(dir, "cluster.ready") }

// running returns the pid of a live supervisor recorded in dir, or 0.
func running(dir string) int {
	b, err := os.ReadFile(pidFile(dir))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// up starts `serve` detached (its own session, logging to dir/cluster.log)
// and waits until it reports ready or dies.
func up(binDir, dir, crds, nodes, manager string) error {
	if pid := running(dir); pid != 0 {
		if _, err := os.Stat(readyFile(dir)); err == nil {
			fmt.Printf("local cluster already running (pid %d); KUBECONFIG=%s\n", pid, filepath.Join(dir, "cluster", "kubeconfig"))
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(readyFile(dir))
	logf, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "serve", "--bin-dir", binDir, "--dir", dir, "--crds", crds, "--nodes", nodes, "--manager", manager)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	start := time.Now()
	for {
		if _, err := os.Stat(readyFile(dir)); err == nil {
			kc, _ := filepath.Abs(filepath.Join(dir, "kubeconfig"))
			fmt.Printf("local cluster ready in %.1fs; export KUBECONFIG=%s\n", time.Since(start).Seconds(), kc)
			return nil
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "cluster.log"))
			return fmt.Errorf("cluster exited (%w):\n%s", err, log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func down(dir string) error {
	pid := running(dir)
	if pid == 0 {
		fmt.Println("local cluster not running")
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	for i := 0; i < 300; i++ {
		if syscall.Kill(pid, 0) != nil {
			fmt.Println("local cluster stopped")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("local cluster did not stop within 30s")
}

func serve(binDir, dir, crds, nodes, manager string) error {
	if binDir == "" {
		return errors.New("--bin-dir (or LOCAL_CLUSTER_BIN) is required")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stateDir := filepath.Join(dir, "cluster")
	_ = os.RemoveAll(stateDir)                   // a fresh cluster every time: no stale etcd or certificates
	_ = os.RemoveAll(filepath.Join(dir, "node")) // nor the claims of the cluster before
	if err := os.WriteFile(pidFile(dir), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile(dir))
	opts := localcluster.Options{BinDir: binDir, Dir: stateDir}
	if crds != "" {
		abs, err := filepath.Abs(crds)
		if err != nil {
			return err
		}
		opts.CRDDirs = []string{abs}
	}
	processNode, why := realPods(nodes)
	if nodes == "process" && !processNode {
		return fmt.Errorf("--nodes=process: %s", why)
	}
	opts.NoSimulatedNodes = processNode
	if processNode {
		opts.APIServerAddresses = []string{processnode.NodeAddress(processNodeCIDR).String()}
	}
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Stop()
	if processNode {
		n, err := startProcessNode(ctx, c, filepath.Join(dir, "node"), manager)
		if err != nil {
			return err
		}
		defer n.Wait()
		fmt.Printf("pods run as real processes on node %s (pod network %s, DNS at %s)\n", processNodeName, processNodeCIDR, n.IP())
	} else {
		fmt.Printf("pods are SIMULATED (kwok): no database server runs. %s\n", why)
	}
	if err := linkBinaries(binDir, filepath.Join(dir, "bin")); err != nil {
		return err
	}
	kc := filepath.Join(dir, "kubeconfig")
	_ = os.Remove(kc)
	if err := os.Symlink(c.Kubeconfig, kc); err != nil {
		return err
	}
	if err := os.WriteFile(readyFile(dir), nil, 0o644); err != nil {
		return err
	}
	defer os.Remove(readyFile(dir))
	fmt.Println("ready; logs in", filepath.Join(stateDir, "logs"))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("stopping")
			return nil
		case <-tick.C:
			if err := c.Failed(); err != nil {
				return err
			}
		}
	}
}

// linkBinaries links the control-plane binaries (kubectl among them) into dir.
func linkBinaries(binDir, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, b := range localcluster.RequiredBinaries() {
		link := filepath.Join(dir, b)
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(binDir, b), link); err != nil {
			return err
		}
	}
	return nil
}

// webhooks gives the operator run on the host (`make run`) what OLM or
// cert-manager give it in a cluster: a serving certificate (from the local
// cluster's CA, in dir/webhook-certs) and webhook configurations, plus the
// CRD's conversion webhook, pointing at it.
func webhooks(dir, manifests, addr string) error {
	if running(dir) == 0 {
		return errors.New("the local cluster is not running (make cluster)")
	}
	certDir := filepath.Join(dir, "webhook-certs")
	ca, err := localcluster.IssueServing(filepath.Join(dir, "cluster", "pki"), certDir)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := localcluster.RegisterWebhooks(ctx, cfg, localcluster.WebhookOptions{
		Manifests: manifests, BaseURL: "https://" + addr, CABundle: ca, ConversionCRDs: []string{"databases.example.com"},
	}); err != nil {
		return err
	}
	fmt.Printf("webhooks registered at https://%s; certificate in %s\n", addr, certDir)
	return nil
}
