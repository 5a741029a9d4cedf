package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// keyPair is a certificate and its private key.
type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// certSpec describes one certificate to issue.
type certSpec struct {
	cn     string
	orgs   []string
	hosts  []string // DNS names or IPs (server certificates)
	client bool
	server bool
}

func newKey() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126)) }

func newCA(cn string) (*keyPair, error) {
	return sign(nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
}

func (ca *keyPair) issue(s certSpec) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:  pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range s.hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return sign(ca, tmpl)
}

// sign makes a new key and a certificate for it from tmpl, signed by parent
// (self-signed when parent is nil).
func sign(parent *keyPair, tmpl *x509.Certificate) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return nil, err
	}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// write stores the pair as <dir>/<name>.crt and <dir>/<name>.key.
func (ca *keyPair) write(dir, name string) error {
	k, err := keyPEM(ca.key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM(ca.cert), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), k, 0o600)
}

// pki is every certificate and key the control plane uses.
type pki struct {
	dir string
	ca  *keyPair
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// generatePKI writes the cluster CA, the API server's serving certificate,
// an admin client certificate, a separate front-proxy CA and client (the API
// server refuses the cluster CA for the request-header flags) and the
// service-account signing key.
func generatePKI(dir string, extraHosts []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := newCA("database-operator-local-ca")
	if err != nil {
		return nil, err
	}
	if err := ca.write(dir, "ca"); err != nil {
		return nil, err
	}
	serving, err := ca.issue(certSpec{
		cn:     "kube-apiserver",
		hosts:  append([]string{"127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, extraHosts...),
		server: true,
	})
	if err != nil {
		return nil, err
	}
	if err := serving.write(dir, "apiserver"); err != nil {
		return nil, err
	}
	admin, err := ca.issue(certSpec{cn: "admin", orgs: []string{"system:masters"}, client: true})
	if err != nil {
		return nil, err
	}
	if err := admin.write(dir, "admin"); err != nil {
		return nil, err
	}
	fpCA, err := newCA("database-operator-local-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	if err := fpCA.write(dir, "front-proxy-ca"); err != nil {
		return nil, err
	}
	fpClient, err := fpCA.issue(certSpec{cn: "front-proxy-client", client: true})
	if err != nil {
		return nil, err
	}
	if err := fpClient.write(dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPriv, err := keyPEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), saPriv, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}), 0o644); err != nil {
		return nil, err
	}
	return &pki{dir: dir, ca: ca}, nil
}

// CACert is the cluster CA's certificate (PEM): what a node's kubelet API
// trusts the API server's client certificate by.
func (c *Cluster) CACert() ([]byte, error) { return os.ReadFile(c.pki.path("ca.crt")) }

// Issue issues a certificate signed by the cluster CA into dir, for
// components that need one later (a webhook server, say). It returns the
// certificate and key paths.
func (c *Cluster) Issue(dir, name string, hosts []string) (string, string, error) {
	kp, err := c.pki.ca.issue(certSpec{cn: name, hosts: hosts, server: true, client: true})
	if err != nil {
		return "", "", err
	}
	if err := kp.write(dir, name); err != nil {
		return "", "", err
	}
	return filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), nil
}
