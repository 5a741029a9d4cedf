package engine_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/pki"
	"example.com/database-operator/tests/utils/testservers"
)

// TestPostgresTLS: a real PostgreSQL serving a certificate from the
// operator's CA (internal/pki) with TLS-only client authentication
// (hostssl). The engine, given the CA, connects and verifies the server; a
// plain-text connection, another CA and a name the certificate does not
// hold are each refused.
func TestPostgresTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := testservers.StartPostgresPrimary(t)
	now := time.Now()
	ca, err := pki.NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	ep := engine.Endpoint{Host: "127.0.0.1", Port: p.Port}
	creds := engine.Credentials{User: "postgres", Password: p.Password}
	open := func(caPEM []byte, name string) error {
		c, err := engine.VerifyTLS(caPEM, name)
		if err != nil {
			return err
		}
		inst, err := engine.Open(ctx, dbv1.EnginePostgreSQL, ep, creds, engine.Options{TLS: c})
		if err != nil {
			return err
		}
		defer inst.Close()
		_, err = inst.Status(ctx)
		return err
	}

	if !t.Run("the server takes TLS only, with the CA's certificate", func(t *testing.T) {
		cert, key, err := ca.IssueServer("pg-0", pki.Names{DNS: []string{"orders-rw"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1).To4()}}, now)
		if err != nil {
			t.Fatal(err)
		}
		// The files are written by the server itself (COPY ... TO, one PEM
		// line a row), so they belong to its user.
		conn, err := p.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var hba, hbaText string
		err = conn.QueryRow(ctx, "SELECT current_setting('hba_file'), pg_read_file(current_setting('hba_file'))").Scan(&hba, &hbaText)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(hbaText, "\n") {
			if strings.HasPrefix(l, "host ") {
				l = "hostssl " + strings.TrimPrefix(l, "host ")
			}
			lines = append(lines, l)
		}
		write := func(path, content string) {
			t.Helper()
			q := fmt.Sprintf("COPY (SELECT unnest(string_to_array(%s, E'\\n'))) TO %s", quote(strings.TrimRight(content, "\n")), quote(path))
			if err := p.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		write(p.Dir+"/server.crt", string(cert))
		write(p.Dir+"/server.key", string(key))
		// The server refuses a key others may read (COPY writes 0644).
		if err := os.Chmod(p.Dir+"/server.key", 0o600); err != nil {
			t.Fatal(err)
		}
		write(hba, strings.Join(lines, "\n"))
		for _, s := range []string{
			"ALTER SYSTEM SET ssl_cert_file = " + quote(p.Dir+"/server.crt"),
			"ALTER SYSTEM SET ssl_key_file = " + quote(p.Dir+"/server.key"),
			"ALTER SYSTEM SET ssl = on",
			"SELECT pg_reload_conf()",
		} {
			if err := p.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}) {
		return
	}
	if !t.Run("the engine verifies the server", func(t *testing.T) {
		// The reload takes a moment to reach new connections.
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := open(ca.CertPEM, "")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("verified TLS to the IP the certificate holds: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := open(ca.CertPEM, "orders-rw"); err != nil {
			t.Errorf("verified TLS to a name the certificate holds: %v", err)
		}
	}) {
		return
	}
	t.Run("plain text, another CA and another name are refused", func(t *testing.T) {
		other, _ := pki.NewCA("another CA", now)
		if err := open(other.CertPEM, ""); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("another CA: %v", err)
		}
		if err := open(ca.CertPEM, "billing-rw"); err == nil || !strings.Contains(err.Error(), "valid for orders-rw, not billing-rw") {
			t.Errorf("a name the certificate does not hold: %v", err)
		}
		plain, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=postgres sslmode=disable", p.Port, p.Password))
		if err == nil {
			plain.Close(ctx)
			t.Error("a plain-text connection was accepted")
		} else if !strings.Contains(err.Error(), "no encryption") {
			t.Errorf("a plain-text connection: %v", err)
		}
	})
}

// quote is a PostgreSQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
