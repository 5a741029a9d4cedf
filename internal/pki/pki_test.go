package pki

import (
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)

func TestIssueAndVerify(t *testing.T) {
	ca, err := NewCA("database-operator CA ns", t0)
	if err != nil {
		t.Fatal(err)
	}
	names := Names{DNS: []string{"orders-rw", "orders-rw.ns.svc", "*.orders-headless.ns.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	certPEM, keyPEM, err := ca.IssueServer("orders", names, t0)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, host := range []string{"orders-rw.ns.svc", "orders-1.orders-headless.ns.svc", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: t0.Add(time.Hour)}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	// Another CA's clients, or another name, are refused.
	other, _ := NewCA("other", t0)
	foreign := x509.NewCertPool()
	foreign.AddCert(other.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: foreign, DNSName: "orders-rw", CurrentTime: t0}); err == nil {
		t.Error("verified against another CA")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "billing-rw", CurrentTime: t0}); err == nil {
		t.Error("verified for a name it does not hold")
	}
	if len(keyPEM) == 0 || !strings.Contains(string(keyPEM), "EC PRIVATE KEY") {
		t.Errorf("key %q", keyPEM)
	}
	// The CA survives a round trip through its Secret; a key of another
	// CA is refused.
	back, err := ParseCA(ca.CertPEM, ca.KeyPEM)
	if err != nil || !back.Cert.Equal(ca.Cert) {
		t.Fatalf("ParseCA: %v", err)
	}
	if _, err := ParseCA(ca.CertPEM, other.KeyPEM); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("a mismatched key: %v", err)
	}
}

func TestDue(t *testing.T) {
	ca, _ := NewCA("ca", t0)
	other, _ := NewCA("other", t0)
	names := Names{DNS: []string{"a", "b"}}
	certPEM, _, err := ca.IssueServer("a", names, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cert  []byte
		ca    *CA
		names Names
		now   time.Time
		want  string
	}{
		{"fresh", certPEM, ca, names, t0.Add(24 * time.Hour), ""},
		{"just before two thirds", certPEM, ca, names, t0.Add(59 * 24 * time.Hour), ""},
		{"two thirds of its life gone", certPEM, ca, names, t0.Add(61 * 24 * time.Hour), "expires at"},
		{"none", nil, ca, names, t0, "no certificate yet"},
		{"garbage", []byte("x"), ca, names, t0, "cannot be read"},
		{"another CA", certPEM, other, names, t0, "not signed by the current CA"},
		{"a name added", certPEM, ca, Names{DNS: []string{"a", "b", "c"}}, t0, "names the certificate is valid for changed"},
	} {
		if got := Due(tc.cert, tc.ca, tc.names, tc.now); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A CA is renewed with more than three years left.
	if got := Due(ca.CertPEM, nil, Names{}, t0.Add(7*365*24*time.Hour)); !strings.Contains(got, "expires at") {
		t.Errorf("a CA 7 years on: %q", got)
	}
}

func TestBundle(t *testing.T) {
	old, _ := NewCA("old", t0.Add(-9*365*24*time.Hour))
	cur, _ := NewCA("current", t0)
	b := Bundle(t0, cur.CertPEM, append(append([]byte{}, old.CertPEM...), cur.CertPEM...))
	if n := strings.Count(string(b), "BEGIN CERTIFICATE"); n != 2 || !strings.HasPrefix(string(b), string(cur.CertPEM)) {
		t.Errorf("bundle of %d certificates, current first %v", n, strings.HasPrefix(string(b), string(cur.CertPEM)))
	}
	// Once the old CA expired it leaves the bundle.
	if n := strings.Count(string(Bundle(t0.Add(2*365*24*time.Hour), cur.CertPEM, old.CertPEM)), "BEGIN CERTIFICATE"); n != 1 {
		t.Errorf("an expired CA stayed in the bundle (%d)", n)
	}
}
