// Package pki issues the certificates the databases serve TLS with: a CA
// the operator keeps (one per namespace) and a server certificate per
// Database signed by it, each renewed well before it expires. Keys are
// ECDSA P-256, which PostgreSQL, MariaDB and MySQL all accept.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Lifetimes. A certificate is renewed once two thirds of its life have
// passed: a server certificate with a month left, a CA with more than three
// years left, so the CA that signs the certificates in use is always the
// one the clients already trust.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 90 * 24 * time.Hour
	// Backdate covers clocks a little behind the operator's: NotBefore
	// is this much before the certificate was made.
	Backdate = 5 * time.Minute
)

// CA is a certificate authority: its certificate and key, and their PEM.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA named commonName, valid from now.
func NewCA(commonName string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	tmpl, err := template(commonName, now, CAValidity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	return parsed(der, key)
}

// ParseCA reads a CA from PEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the CA key does not match its certificate")
	}
	return parsed(cert.Raw, key)
}

func parsed(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encode("CERTIFICATE", der), KeyPEM: encode("EC PRIVATE KEY", keyDER)}, nil
}

// Names are what a server certificate is valid for.
type Names struct {
	DNS []string
	IPs []net.IP
}

// IssueServer signs a server certificate for names, valid from now, and
// returns it and its new key in PEM.
func (ca *CA) IssueServer(commonName string, names Names, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the server key: %w", err)
	}
	tmpl, err := template(commonName, now, ServerValidity)
	if err != nil {
		return nil, nil, err
	}
	tmpl.DNSNames, tmpl.IPAddresses = names.DNS, names.IPs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	// Client auth too: a replica presents it when it streams from the
	// primary, should the primary ask for a client certificate.
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encode("CERTIFICATE", der), encode("EC PRIVATE KEY", keyDER), nil
}

// Due says why a certificate must be (re)issued, or "" when it need not:
// missing or unreadable, not signed by ca, not valid for names, or past two
// thirds of its life.
func Due(certPEM []byte, ca *CA, names Names, now time.Time) string {
	if len(certPEM) == 0 {
		return "no certificate yet"
	}
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return "the certificate cannot be read: " + err.Error()
	}
	if ca != nil {
		if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
			return "the certificate is not signed by the current CA"
		}
	}
	if !slices.Equal(cert.DNSNames, names.DNS) || !slices.EqualFunc(cert.IPAddresses, names.IPs, net.IP.Equal) {
		return "the names the certificate is valid for changed"
	}
	if renewAt := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) * 2 / 3); !now.Before(renewAt) {
		return fmt.Sprintf("the certificate expires at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// ParseCertificate reads the first certificate of a PEM bundle.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// Bundle is the CA bundle clients trust: the current CA first, then those
// it replaced that are still valid (certificates they signed may still be
// served until they are renewed), without duplicates.
func Bundle(now time.Time, pems ...[]byte) []byte {
	var out bytes.Buffer
	seen := map[string]bool{}
	for _, p := range pems {
		for rest := p; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil || block.Type != "CERTIFICATE" || seen[string(block.Bytes)] || now.After(cert.NotAfter) {
				continue
			}
			seen[string(block.Bytes)] = true
			_ = pem.Encode(&out, block)
		}
	}
	return out.Bytes()
}

func template(commonName string, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"database-operator"}},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(validity),
	}, nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
