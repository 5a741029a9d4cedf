// Package localcluster runs a real Kubernetes control plane on loopback for
// development and tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok (simulated nodes whose pods become Running and
// Ready, and a simulated volume provisioner), all built from Go modules by
// hack/build-tools.sh. Nothing listens beyond 127.0.0.1.
package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// StorageClass is the default storage class; kwok binds its claims.
const StorageClass = "kwok-volume"

// RequiredBinaries are the programs the control plane needs in Options.BinDir.
func RequiredBinaries() []string {
	return []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl"}
}

// Options configure a local cluster.
type Options struct {
	// BinDir holds the binaries and kwok-stages/ (hack/build-tools.sh prints it).
	BinDir string
	// Dir is where certificates, data, logs and the kubeconfig go. It is created.
	Dir string
	// Nodes is the number of simulated nodes (default 3).
	Nodes int
	// APIServerAddresses are more addresses the API server's certificate is
	// valid for: where a process node lets its pods reach it.
	APIServerAddresses []string
	// NoSimulatedNodes starts no kwok and no simulated node or storage:
	// the caller brings its own nodes (a process node) and storage class.
	NoSimulatedNodes bool
	// Timeout bounds the start (default 2 minutes).
	Timeout time.Duration
	// CRDDirs hold CRD manifests to install before the controller manager
	// starts, so its garbage collector knows those kinds from the start.
	CRDDirs []string
	// KeepRunning names pods, by the value of their app.kubernetes.io/name
	// label, that kwok makes Running but never completes even when a Job
	// owns them: a test plays their kubelet (runs their command and writes
	// the outcome into the pod's status).
	KeepRunning []string
	// AuditLog makes the API server write every request's metadata (who,
	// verb, resource, response code; no bodies) to Cluster.AuditLog, one
	// JSON event per line.
	AuditLog bool
}

// bin is the path of the named binary.
func (o Options) bin(name string) string { return filepath.Join(o.BinDir, name) }

// Cluster is a running local control plane.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig.
	Kubeconfig string
	// Config is the admin REST config.
	Config *rest.Config
	// Dir is the cluster's working directory (logs in Dir/logs).
	Dir string
	// EtcdURL is etcd's client URL (plain HTTP on loopback), for tests that
	// look at what the API server stored.
	EtcdURL string
	// AuditLog is the API server's audit log (Options.AuditLog), or "".
	AuditLog string

	pki   *pki
	procs []*process
	// schedulerHealth is kube-scheduler's /healthz, for its restart.
	schedulerHealth string
}

// Start starts the control plane and returns when it is ready: the API
// server answers /readyz, the controller manager and scheduler are healthy,
// the simulated nodes are Ready and the default storage class exists. On
// error everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	opts.setDefaults()
	if err := checkBinaries(opts.BinDir); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	c = &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.pki, err = generatePKI(filepath.Join(dir, "pki"), opts.APIServerAddresses); err != nil {
		return c, fmt.Errorf("generating PKI: %w", err)
	}
	ports, err := freePorts(6)
	if err != nil {
		return c, err
	}
	etcdPort, peerPort, etcdMetrics, apiPort, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	if err := c.writeKubeconfig("https://127.0.0.1:" + strconv.Itoa(apiPort)); err != nil {
		return c, err
	}
	if err := c.startEtcd(ctx, opts, etcdPort, peerPort, etcdMetrics); err != nil {
		return c, err
	}
	cs, err := c.startAPIServer(ctx, opts, apiPort)
	if err != nil {
		return c, err
	}
	if err := c.installCRDDirs(ctx, opts.CRDDirs); err != nil {
		return c, err
	}
	if err := c.startControllerManager(opts, kcmPort); err != nil {
		return c, err
	}
	if err := c.startScheduler(opts, schedPort); err != nil {
		return c, err
	}
	if err := c.waitHealthy(ctx, map[string]int{"kube-controller-manager": kcmPort, "kube-scheduler": schedPort}); err != nil {
		return c, err
	}
	if !opts.NoSimulatedNodes {
		if err := c.startSimulatedNodes(ctx, cs, opts, c.Kubeconfig); err != nil {
			return c, err
		}
	}
	if err := c.waitDefaultServiceAccount(ctx, cs); err != nil {
		return c, err
	}
	return c, nil
}

// setDefaults fills in the options left unset.
func (o *Options) setDefaults() {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
}

// checkBinaries makes sure binDir holds every RequiredBinaries.
func checkBinaries(binDir string) error {
	for _, b := range RequiredBinaries() {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("local cluster binary %s missing in %q (build it with hack/build-tools.sh): %w", b, binDir, err)
		}
	}
	return nil
}

// startEtcd starts etcd (plain HTTP on loopback) and waits until it is
// healthy.
func (c *Cluster) startEtcd(ctx context.Context, opts Options, port, peerPort, metricsPort int) error {
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	c.EtcdURL = etcdURL
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if err := c.start("etcd", opts.bin("etcd"), []string{
		"--name=local", "--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=local=" + peerURL,
		fmt.Sprintf("--listen-metrics-urls=http://127.0.0.1:%d", metricsPort),
		"--unsafe-no-fsync", "--log-level=warn",
	}, nil); err != nil {
		return err
	}
	return waitFor(ctx, "etcd", c.procs, httpOK(etcdURL+"/health", nil))
}

// startAPIServer starts kube-apiserver on etcd, sets c.Config and waits
// until the API server is ready; it returns a client of it.
func (c *Cluster) startAPIServer(ctx context.Context, opts Options, port int) (kubernetes.Interface, error) {
	var auditFlags []string
	var err error
	if opts.AuditLog {
		if auditFlags, err = c.auditFlags(); err != nil {
			return nil, err
		}
	}
	p := c.pki.path
	if err := c.start("kube-apiserver", opts.bin("kube-apiserver"), append([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		// The endpoint reconciler refuses a loopback address.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"), "--proxy-client-key-file=" + p("front-proxy-client.key"),
		// kubectl logs, exec and port-forward reach a node's kubelet API at
		// its address (a process node's has no resolvable host name), as
		// the cluster's admin.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + p("admin.crt"), "--kubelet-client-key=" + p("admin.key"),
		"--v=0",
	}, auditFlags...), nil); err != nil {
		return nil, err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	// A local cluster serves tests and one developer: no client-side throttling.
	c.Config.QPS, c.Config.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "kube-apiserver /readyz", c.procs, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	return cs, nil
}

// startControllerManager starts kube-controller-manager (waitHealthy waits
// for it), as admin, as the scheduler: these are local test clusters, and it
// spares the per-controller RBAC bootstrap.
func (c *Cluster) startControllerManager(opts Options, port int) error {
	kc, p := c.Kubeconfig, c.pki.path
	return c.start("kube-controller-manager", opts.bin("kube-controller-manager"), []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--controllers=*", "--leader-elect=false",
		"--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"),
		"--cluster-signing-cert-file=" + p("ca.crt"), "--cluster-signing-key-file=" + p("ca.key"),
		"--use-service-account-credentials=false",
		"--pvclaimbinder-sync-period=1s",
		"--concurrent-statefulset-syncs=5",
		"--v=0",
	}, nil)
}

// startScheduler starts kube-scheduler (waitHealthy waits for it), as
// admin.
func (c *Cluster) startScheduler(opts Options, port int) error {
	kc := c.Kubeconfig
	if err := c.start("kube-scheduler", opts.bin("kube-scheduler"), []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false", "--v=0",
	}, nil); err != nil {
		return err
	}
	c.schedulerHealth = fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	return nil
}

// installCRDDirs installs the CRD manifests of each directory, before the
// controller manager starts, so its garbage collector knows those kinds from
// the start.
func (c *Cluster) installCRDDirs(ctx context.Context, dirs []string) error {
	for _, d := range dirs {
		if err := InstallCRDs(ctx, c.Config, d); err != nil {
			return fmt.Errorf("installing CRDs from %s: %w", d, err)
		}
	}
	return nil
}

// waitDefaultServiceAccount waits until the default namespace's
// ServiceAccount exists (the controller manager makes it).
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, cs kubernetes.Interface) error {
	return waitFor(ctx, "default ServiceAccount", c.procs, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// waitHealthy waits until the components, by name, answer /healthz on
// their port.
func (c *Cluster) waitHealthy(ctx context.Context, ports map[string]int) error {
	insecure := &tls.Config{InsecureSkipVerify: true} // self-signed in-memory health certificates
	for name, port := range ports {
		if err := waitFor(ctx, name+" /healthz", c.procs, httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecure)); err != nil {
			return err
		}
	}
	return nil
}

// startSimulatedNodes starts kwok with its simulated nodes, pods and volume
// provisioning, and waits until the nodes are Ready.
func (c *Cluster) startSimulatedNodes(ctx context.Context, cs kubernetes.Interface, opts Options, kc string) error {
	bin := func(name string) string { return filepath.Join(opts.BinDir, name) }
	stages, err := c.writeStages(filepath.Join(opts.BinDir, "kwok-stages"), opts.KeepRunning)
	if err != nil {
		return err
	}
	if err := c.start("kwok", bin("kwok"), []string{
		"--kubeconfig=" + kc, "--config=" + stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
	}, []string{"HOME=" + c.Dir}); err != nil {
		return err
	}
	if err := c.createNodesAndStorage(ctx, cs, opts.Nodes); err != nil {
		return err
	}
	return waitFor(ctx, "nodes Ready", c.procs, nodesReady(cs, opts.Nodes))
}

func (c *Cluster) start(name, bin string, args, env []string) error {
	p, err := startProcess(c.Dir, name, bin, args, env)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// Stop stops every component, newest first, and waits for each to exit.
// It is safe to call more than once.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	c.procs = nil
}

// RestartAPIServer stops kube-apiserver, leaves it down for down (clients
// see connections refused, as during an upgrade or a crash of the control
// plane), starts it again with the same flags and waits until it is ready.
// etcd keeps every object.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	np, err := c.restart("kube-apiserver", down)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	return waitFor(ctx, "kube-apiserver /readyz after its restart", []*process{np}, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// RestartScheduler restarts kube-scheduler and waits until it is healthy.
// After API server restarts its cache can be left corrupted ("Pod updated
// on a different node than previously added to. Scheduler cache is
// corrupted"), and it then schedules nothing more: a control plane
// restarted as a whole restarts it too.
func (c *Cluster) RestartScheduler(ctx context.Context) error {
	np, err := c.restart("kube-scheduler", 0)
	if err != nil {
		return err
	}
	return waitFor(ctx, "kube-scheduler /healthz after its restart", []*process{np},
		httpOK(c.schedulerHealth, &tls.Config{InsecureSkipVerify: true})) // self-signed in-memory health certificate
}

// restart stops the named component, leaves it down for down and starts it
// again with the same flags.
func (c *Cluster) restart(name string, down time.Duration) (*process, error) {
	for i, p := range c.procs {
		if p.name != name {
			continue
		}
		p.stop(10 * time.Second)
		time.Sleep(down)
		np, err := startProcess(c.Dir, p.name, p.bin, p.args, p.env)
		if err != nil {
			return nil, err
		}
		c.procs[i] = np
		return np, nil
	}
	return nil, fmt.Errorf("no %s in this cluster", name)
}

// Failed returns an error when a component has exited on its own.
func (c *Cluster) Failed() error {
	for _, p := range c.procs {
		if done, err := p.exited(); done {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig(server string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.pki.path("ca.crt")}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: c.pki.path("admin.crt"), ClientKey: c.pki.path("admin.key")}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, c.Kubeconfig)
}

// writeStages joins kwok's Stage documents into one config file (kwok has no
// built-in stages, and a KwokConfiguration document beside them fails).
func (c *Cluster) writeStages(stageDir string, keepRunning []string) (string, error) {
	files, err := filepath.Glob(filepath.Join(stageDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no kwok stages in %s: %w", stageDir, err)
	}
	var docs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		doc := strings.TrimSpace(string(b))
		if filepath.Base(f) == "pod-complete.yaml" && len(keepRunning) > 0 {
			doc = strings.Replace(doc, "    matchExpressions:\n", "    matchExpressions:\n"+notNamed(keepRunning), 1)
		}
		docs = append(docs, doc)
	}
	out := filepath.Join(c.Dir, "kwok-stages.yaml")
	return out, os.WriteFile(out, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

// notNamed is a kwok selector expression that leaves out pods whose
// app.kubernetes.io/name label is one of names.
func notNamed(names []string) string {
	out := "    - key: '.metadata.labels[\"app.kubernetes.io/name\"]'\n      operator: 'NotIn'\n      values:\n"
	for _, n := range names {
		out += "      - '" + n + "'\n"
	}
	return out
}

func (c *Cluster) createNodesAndStorage(ctx context.Context, cs kubernetes.Interface, n int) error {
	for i := range n {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
			},
			Status: corev1.NodeStatus{
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110"),
				},
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110"),
				},
			},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       "kwok.x-k8s.io/volume",
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
		// kwok's simulated volumes have no size to grow; allowing expansion
		// lets the operator's resize path run end to end.
		AllowVolumeExpansion: ptr.To(true),
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating storage class: %w", err)
	}
	return nil
}

func nodesReady(cs kubernetes.Interface, n int) func(context.Context) error {
	return func(ctx context.Context) error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, node := range nodes.Items {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready < n {
			return fmt.Errorf("%d/%d nodes ready: %w", ready, n, errNotYet)
		}
		return nil
	}
}

func httpOK(url string, tlsConfig *tls.Config) func(context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// freePorts asks the kernel for n distinct free ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// auditPolicy logs every request once, when its response is complete, at
// the Metadata level: user, impersonated user, verb, resource, namespace,
// name and response code, never a request or response body (Secrets).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
`

// auditFlags writes the audit policy and returns the API server's flags
// for a JSON log at c.AuditLog.
func (c *Cluster) auditFlags() ([]string, error) {
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	c.AuditLog = filepath.Join(c.Dir, "logs", "audit.log")
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.AuditLog, "--audit-log-format=json",
		"--audit-log-mode=blocking", "--audit-log-maxsize=0"}, nil
}
