package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// The local cluster's webhooks: the API server runs on the host, so it can
// call a webhook server on 127.0.0.1 directly. The configurations use
// clientConfig.url rather than a Service: a Service's Endpoints cannot name
// a loopback address (the API server refuses them), and the URL form keeps
// the path the generated manifests name.

// CA returns the cluster CA's certificate (PEM): the caBundle for a
// webhook server whose certificate the cluster CA issued.
func (c *Cluster) CA() ([]byte, error) { return os.ReadFile(c.pki.path("ca.crt")) }

// IssueServing issues a serving certificate for 127.0.0.1 and localhost
// from the CA of the cluster whose PKI is in pkiDir (Dir/pki of a running
// cluster; `make run` uses it from another process), as dir/tls.crt and
// dir/tls.key, where controller-runtime's webhook server looks. It returns
// the CA certificate (PEM).
func IssueServing(pkiDir, dir string) ([]byte, error) {
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEMBytes, err := os.ReadFile(filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEMBytes)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("no PEM in %s/ca.crt or ca.key", pkiDir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the cluster CA key cannot sign")
	}
	ca := &keyPair{cert: cert, key: signer}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kp, err := ca.issue(certSpec{cn: "database-operator-webhook", hosts: []string{"127.0.0.1", "localhost"}, server: true})
	if err != nil {
		return nil, err
	}
	if err := kp.writeAtomically(dir, "tls"); err != nil {
		return nil, err
	}
	return caPEM, nil
}

// WebhookOptions say where the webhook server is and what to register.
type WebhookOptions struct {
	// Manifests is the generated webhook configurations file
	// (config/webhook/manifests.yaml); their Service references become URLs.
	Manifests string
	// BaseURL is https://127.0.0.1:PORT of the webhook server.
	BaseURL string
	// CABundle verifies the webhook server's certificate.
	CABundle []byte
	// ConversionCRDs are the CRDs whose conversion goes to BaseURL/convert.
	ConversionCRDs []string
}

// RegisterWebhooks creates (or replaces) the admission webhook
// configurations of opts.Manifests pointed at opts.BaseURL, and sets the
// conversion strategy of opts.ConversionCRDs to Webhook at BaseURL/convert.
func RegisterWebhooks(ctx context.Context, cfg *rest.Config, opts WebhookOptions) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(opts.Manifests)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLReader(bufioReader(raw))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := registerWebhookConfig(ctx, cs, opts, doc); err != nil {
			return err
		}
	}
	if len(opts.ConversionCRDs) == 0 {
		return nil
	}
	return setConversionWebhooks(ctx, cfg, opts)
}

// webhookURL is BaseURL followed by path, if any.
func (o WebhookOptions) webhookURL(path *string) *string {
	u := strings.TrimSuffix(o.BaseURL, "/")
	if path != nil {
		u += *path
	}
	return &u
}

// pointAtBaseURL makes a webhook's Service reference a URL at BaseURL (the
// same path), verified with CABundle.
func (o WebhookOptions) pointAtBaseURL(cc *admissionregistrationv1.WebhookClientConfig) {
	cc.URL, cc.Service, cc.CABundle = o.webhookURL(serviceRefPath(cc.Service)), nil, o.CABundle
}

// registerWebhookConfig creates (or replaces) the webhook configuration of
// one document of the manifests, pointed at BaseURL; an empty document is
// skipped.
func registerWebhookConfig(ctx context.Context, cs kubernetes.Interface, opts WebhookOptions, doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	switch meta.Kind {
	case "":
		return nil
	case "MutatingWebhookConfiguration":
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := yaml.UnmarshalStrict(doc, m); err != nil {
			return err
		}
		for i := range m.Webhooks {
			opts.pointAtBaseURL(&m.Webhooks[i].ClientConfig)
		}
		return recreate(ctx, cs.AdmissionregistrationV1().MutatingWebhookConfigurations(), m.Name, m)
	case "ValidatingWebhookConfiguration":
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			return err
		}
		for i := range v.Webhooks {
			opts.pointAtBaseURL(&v.Webhooks[i].ClientConfig)
		}
		return recreate(ctx, cs.AdmissionregistrationV1().ValidatingWebhookConfigurations(), v.Name, v)
	default:
		return fmt.Errorf("%s: unexpected kind %q", opts.Manifests, meta.Kind)
	}
}

// setConversionWebhooks sets the conversion strategy of
// opts.ConversionCRDs to Webhook at BaseURL/convert.
func setConversionWebhooks(ctx context.Context, cfg *rest.Config, opts WebhookOptions) error {
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, name := range opts.ConversionCRDs {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: opts.webhookURL(ptrTo("/convert")), CABundle: opts.CABundle},
					ConversionReviewVersions: []string{"v1"},
				},
			}
			_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("conversion webhook of CRD %s: %w", name, err)
		}
	}
	return nil
}

// webhookConfigs is the typed client of one kind of webhook configuration.
type webhookConfigs[T any] interface {
	Delete(context.Context, string, metav1.DeleteOptions) error
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}

// recreate replaces a webhook configuration with obj, whatever the cluster
// held (delete and create: no resourceVersion to carry over).
func recreate[T any](ctx context.Context, api webhookConfigs[T], name string, obj T) error {
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := api.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	return nil
}

func serviceRefPath(s *admissionregistrationv1.ServiceReference) *string {
	if s == nil {
		return nil
	}
	return s.Path
}

func ptrTo[T any](v T) *T { return &v }

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// writeAtomically writes dir/name.key, then dir/name.crt, each through a
// rename, so that a server watching the files never reads half of one.
func (kp *keyPair) writeAtomically(dir, name string) error {
	k, err := keyPEM(kp.key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		file string
		data []byte
		mode os.FileMode
	}{{name + ".key", k, 0o600}, {name + ".crt", certPEM(kp.cert), 0o644}} {
		tmp := filepath.Join(dir, "."+f.file+".tmp")
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.file)); err != nil {
			return err
		}
	}
	return nil
}
