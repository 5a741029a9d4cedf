package agent

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/pki"
)

// TestPeerChannelTLS: with the pod's certificate mounted, the peer channel
// (which carries the token derived from the replication password) is TLS
// only, verified by the member's name; a renewed certificate is served
// without a restart.
func TestPeerChannelTLS(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issue := func() {
		t.Helper()
		crt, key, err := ca.IssueServer("db", pki.Names{DNS: []string{"*.db-headless.ns.svc"}}, now)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM} {
			if err := os.WriteFile(filepath.Join(dir, name+".new"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, name+".new"), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	issue()
	const token = "t0ken"
	a := New(Config{PeerToken: token, TLSDir: dir})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.peerHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		_ = srv.Serve(tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: (&certFiles{dir: dir}).get}))
	}()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	var served atomic.Pointer[big.Int]
	verified := func(caPEM []byte) *tls.Config {
		cfg, err := engine.VerifyTLS(caPEM, "db-1.db-headless.ns.svc")
		if err != nil {
			t.Fatal(err)
		}
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			served.Store(cs.PeerCertificates[0].SerialNumber)
			return nil
		}
		return cfg
	}
	ctx := context.Background()
	if _, err := AskPromoting(ctx, addr, token, verified(ca.CertPEM)); err != nil {
		t.Fatalf("a caller verifying the member: %v", err)
	}
	first := served.Load()
	if _, err := AskPromoting(ctx, addr, token, nil); err == nil {
		t.Error("the peer channel answered plain HTTP")
	}
	other, err := pki.NewCA("another CA", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AskPromoting(ctx, addr, token, verified(other.CertPEM)); err == nil {
		t.Error("a caller trusting another CA accepted the member")
	}
	wrongName, err := engine.VerifyTLS(ca.CertPEM, "db-1.elsewhere.ns.svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AskPromoting(ctx, addr, token, wrongName); err == nil {
		t.Error("a caller expecting another name accepted the member")
	}

	// Renewed in place (a later modification time), served at once.
	time.Sleep(10 * time.Millisecond)
	issue()
	if _, err := AskPromoting(ctx, addr, token, verified(ca.CertPEM)); err != nil {
		t.Fatal(err)
	}
	if s := served.Load(); s.Cmp(first) == 0 {
		t.Errorf("the renewed certificate is not served (serial %v still)", s)
	}
}
