package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/pki"
)

// TestMetricsServedOverTLS: a running agent serves its metrics handler on
// the metrics port over TLS only, with the pod's certificate (the one the
// peer channel serves): a scraper verifying it with the Database's CA
// connects, plain HTTP gets nothing.
func TestMetricsServedOverTLS(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	crt, key, err := ca.IssueServer("db", pki.Names{DNS: []string{"*.db-headless.ns.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := New(Config{Namespace: "ns", Pod: "db-1", LeaseName: "db-primary", Leases: fake.NewClientset().CoordinationV1().Leases("ns"),
		TopologyDir: t.TempDir(), Listen: "127.0.0.1:0", TLSDir: dir, Command: []string{"sh", "-c", "exec sleep 600"},
		MetricsListen: addr, Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "database_instance_up 1")
		}),
		Check: func(context.Context) (engine.Status, error) {
			return engine.Status{Role: engine.RoleReplica, ReadOnly: true}, nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("the agent ended: %v", err)
		}
	}()

	verified, err := engine.VerifyTLS(ca.CertPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: verified}}
	var body string
	waitFor(t, "the metrics served over TLS", 5*time.Second, func() bool {
		resp, err := client.Get("https://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if body != "database_instance_up 1\n" {
		t.Errorf("served %q", body)
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the metrics port answered plain HTTP")
		}
	}
	other, err := pki.NewCA("another CA", now)
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := engine.VerifyTLS(other.CertPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: untrusted}}).Get("https://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		t.Error("a scraper trusting another CA accepted the agent")
	}
}
