package main

import (
	"crypto/tls"
	"flag"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	webhookv1 "example.com/database-operator/internal/webhook/v1"
)

// webhookFlags configure the webhook server that serves the Database's
// conversion, defaulting and validating webhooks.
type webhookFlags struct {
	enabled *bool
	host    *string
	port    *int
	certDir *string
	images  *string
}

func bindWebhookFlags(fs *flag.FlagSet) webhookFlags {
	return webhookFlags{
		enabled: fs.Bool("enable-webhooks", true, "serve the Database's conversion, defaulting and validating webhooks (the CRD and the webhook configurations point at them)"),
		host:    fs.String("webhook-host", "", "address the webhook server binds to; empty: every interface"),
		port:    fs.Int("webhook-port", 9443, "port of the webhook server (HTTPS)"),
		images:  fs.String("allowed-image-prefixes", "", "comma-separated prefixes spec.image must start with (for example a registry/project/); empty: any image (each change is recorded in an Event naming the user either way)"),
		certDir: fs.String("webhook-cert-dir", "", "directory with the webhook server's tls.crt and tls.key, reloaded when they change (default: where OLM mounts them, /tmp/k8s-webhook-server/serving-certs)"),
	}
}

// server is the manager's webhook server. It watches its certificate files
// (controller-runtime's certwatcher): a certificate renewed by cert-manager
// or OLM is served without a restart.
func (f webhookFlags) server(tlsOpts []func(*tls.Config)) webhook.Server {
	return webhook.NewServer(webhook.Options{Host: *f.host, Port: *f.port, CertDir: *f.certDir, TLSOpts: tlsOpts})
}

// setup registers the webhooks, and makes the manager ready only once the
// webhook server serves: the API server calls it for every Database write.
func (f webhookFlags) setup(mgr ctrl.Manager) error {
	if !*f.enabled {
		return nil
	}
	var prefixes []string
	for p := range strings.SplitSeq(*f.images, ",") {
		if p = strings.TrimSpace(p); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	if err := webhookv1.Setup(mgr, webhookv1.Options{AllowedImagePrefixes: prefixes}); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
}
