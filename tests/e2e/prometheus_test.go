package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
)

// TestPrometheusAlerts: a real Prometheus (built from its module at the
// version promtool uses: PROMETHEUS_BIN, make test-faults) finds the
// database pods with Kubernetes discovery as the PodMonitor does, scrapes
// their agents and the operator, and evaluates the shipped PrometheusRule.
// A replica whose replay the test pauses makes DatabaseReplicaNotReplicating
// (agent series) and DatabaseReplicationUnhealthy (the operator's) fire in
// Prometheus's own alerts API; resumed, they resolve; a Backup that fails
// makes DatabaseLastBackupFailed fire. The rules are the shipped ones with
// every `for:` cut to a few seconds (the expressions are unchanged).
func TestPrometheusAlerts(t *testing.T) {
	fullTier(t)
	dir := os.Getenv("PROMETHEUS_BIN")
	if dir == "" {
		t.Fatal("PROMETHEUS_BIN is not set: make test-faults builds Prometheus (hack/build-tools.sh prometheus) and sets it")
	}
	t.Parallel() // its own Database; Prometheus scrapes its namespace only
	db, _, _, _ := replicatedPair(t, dialects[0], "prom")
	prom := startPrometheus(t, filepath.Join(dir, "prometheus"), db.Namespace, serveOperatorMetrics(t))

	prom.waitTargetsUp(t, 3) // two agents and the operator
	prom.waitAlert(t, "DatabaseReplicaNotReplicating", false, nil)

	repl := db.Name + "-1"
	root := dialects[0].superuser(t, db, podIP(t, db.Namespace, repl))
	if err := execTimeout(root, "SELECT pg_wal_replay_pause()"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	want := map[string]string{"namespace": db.Namespace, "database": db.Name, "pod": repl}
	prom.waitAlert(t, "DatabaseReplicaNotReplicating", true, want)
	prom.waitAlert(t, "DatabaseReplicationUnhealthy", true, map[string]string{"namespace": db.Namespace, "database": db.Name})
	t.Logf("the replication alerts fired %s after the replay was paused", time.Since(paused).Round(time.Second))
	if err := execTimeout(root, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	prom.waitAlert(t, "DatabaseReplicaNotReplicating", false, want)
	prom.waitAlert(t, "DatabaseReplicationUnhealthy", false, map[string]string{"namespace": db.Namespace, "database": db.Name})

	newBackup(t, db.Namespace, "to-nowhere", db.Name, func(b *dbv1.Backup) {
		b.Spec.Target = &dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "https://s3.invalid", Bucket: "backups", CredentialsSecret: dbv1.S3Credentials{Name: "missing"}}}
	})
	if b := waitBackup(t, db.Namespace, "to-nowhere"); b.Status.Phase != dbv1.BackupFailed {
		t.Fatalf("backup %+v, want Failed", b.Status)
	}
	prom.waitAlert(t, "DatabaseLastBackupFailed", true, map[string]string{"namespace": db.Namespace, "database": db.Name})
}

// serveOperatorMetrics serves the in-process operator's registry, as its
// metrics Service would, and returns the address.
func serveOperatorMetrics(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

type prometheusServer struct{ url string }

// startPrometheus runs Prometheus on the shipped rules, scraping the
// database pods of ns the way the PodMonitor in config/prometheus does
// (pods labelled by the chart, port metrics, TLS; the target labels
// namespace, pod, container, endpoint) and the operator at operator, with
// the ServiceMonitor's job name and honor_labels.
func startPrometheus(t *testing.T, bin, ns, operator string) *prometheusServer {
	t.Helper()
	dir := t.TempDir()
	rules := shippedRules(t, "4s")
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	config := fmt.Sprintf(`global: {scrape_interval: 2s, evaluation_interval: 2s, scrape_timeout: 2s}
rule_files: [%q]
scrape_configs:
  - job_name: agents
    scheme: https
    tls_config: {insecure_skip_verify: true}
    kubernetes_sd_configs:
      - role: pod
        kubeconfig_file: %q
        namespaces: {names: [%q]}
    relabel_configs:
      - {action: keep, source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name, __meta_kubernetes_pod_label_app_kubernetes_io_managed_by], regex: database;database-operator}
      - {action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
      - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}
      - {target_label: endpoint, replacement: metrics}
  - job_name: database-operator-controller-manager-metrics
    honor_labels: true
    static_configs: [{targets: [%q]}]
`, filepath.Join(dir, "rules.yaml"), cluster.Kubeconfig, ns, operator)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", tail(string(b), 40))
		}
	})
	p := &prometheusServer{url: "http://" + addr}
	eventually(t, time.Minute, "Prometheus ready", func() string {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status
		}
		return ""
	})
	return p
}

// shippedRules are the rule groups of the shipped PrometheusRule (its
// .spec), each `for:` set to forDuration.
func shippedRules(t *testing.T, forDuration string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../config/prometheus/rules/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []map[string]any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	for _, g := range pr.Spec.Groups {
		rules, _ := g["rules"].([]any)
		for _, r := range rules {
			if rule, ok := r.(map[string]any); ok {
				if _, has := rule["for"]; has {
					rule["for"] = forDuration
				}
			}
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (p *prometheusServer) get(path string, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(into)
}

func (p *prometheusServer) waitTargetsUp(t *testing.T, n int) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("%d targets up", n), func() string {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					ScrapeURL string `json:"scrapeUrl"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := p.get("/api/v1/targets", &r); err != nil {
			return err.Error()
		}
		up, all := 0, []string{}
		for _, tg := range r.Data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
			all = append(all, fmt.Sprintf("%s %s %s", tg.ScrapeURL, tg.Health, tg.LastError))
		}
		if up < n {
			return strings.Join(all, "; ")
		}
		return ""
	})
}

// waitAlert waits until the alert fires (firing) with labels holding
// want, or until no such alert is firing or pending.
func (p *prometheusServer) waitAlert(t *testing.T, name string, firing bool, want map[string]string) {
	t.Helper()
	eventually(t, 3*time.Minute, fmt.Sprintf("%s firing=%v %v", name, firing, want), func() string {
		var r struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		if err := p.get("/api/v1/alerts", &r); err != nil {
			return err.Error()
		}
		seen := []string{}
		for _, a := range r.Data.Alerts {
			if a.Labels["alertname"] != name || !holds(a.Labels, want) {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %v", a.State, a.Labels))
			if firing && a.State == "firing" {
				return ""
			}
		}
		if !firing && len(seen) == 0 {
			return ""
		}
		return fmt.Sprintf("alerts %v", seen)
	})
}

func holds(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}
