package integration

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	webhookv1 "example.com/database-operator/internal/webhook/v1"
	"example.com/database-operator/tests/utils/localcluster"
)

// testWebhooks is set once by TestMain and only read by the tests.
var testWebhooks *webhookEnv

// webhookEnv is the operator's webhook server in the test process: real TLS
// with a certificate from the local cluster's CA, registered through real
// webhook configurations (clientConfig.url: the API server runs on the host
// and reaches 127.0.0.1, which a Service's Endpoints cannot name) and the
// CRD's conversion strategy Webhook.
type webhookEnv struct {
	certDir string
	addr    string // 127.0.0.1:port
	caPEM   []byte
}

// newWebhookServer issues the serving certificate and returns the server
// the manager should run.
func newWebhookServer(c *localcluster.Cluster, dir string) (webhook.Server, *webhookEnv, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	we := &webhookEnv{certDir: filepath.Join(dir, "webhook-certs"), addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if we.caPEM, err = localcluster.IssueServing(filepath.Join(c.Dir, "pki"), we.certDir); err != nil {
		return nil, nil, fmt.Errorf("issuing the webhook certificate: %w", err)
	}
	return webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: we.certDir}), we, nil
}

// registerWebhooks adds the Database's webhooks to the manager (before it
// starts); startedWebhooks registers them with the API server once the
// server answers.
func registerWebhooks(mgr ctrl.Manager) error { return webhookv1.Setup(mgr, webhookv1.Options{}) }

func startedWebhooks(ctx context.Context, c *localcluster.Cluster, mgr ctrl.Manager, we *webhookEnv) error {
	check := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return check(nil) == nil, nil
	}); err != nil {
		return fmt.Errorf("webhook server not serving: %w", err)
	}
	return localcluster.RegisterWebhooks(ctx, c.Config, localcluster.WebhookOptions{
		Manifests:      "../../config/webhook/manifests.yaml",
		BaseURL:        "https://" + we.addr,
		CABundle:       we.caPEM,
		ConversionCRDs: []string{"databases.example.com"},
	})
}
