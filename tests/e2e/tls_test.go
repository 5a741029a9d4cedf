package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	"example.com/database-operator/internal/pki"
)

// checkTLS proves, on a running two-instance Database, that its servers
// take TLS only and are verified by everyone who connects:
//   - an application verifies the -rw Service with the CA bundle from its
//     Secret (ca.crt), by the Service's name;
//   - a plain-text connection is refused, and so is a client trusting
//     another CA (it refuses the server);
//   - the replica streams over TLS and verifies its primary;
//   - a renewed certificate is served without a restart, and the
//     replication stream goes on through it.
func checkTLS(t *testing.T, db *dbv1.Database) {
	ctx := context.Background()
	user, password := credentials(t, db)
	rwAddr := resolveOne(t, db.Name+"-rw", db.Namespace)
	rwName := fmt.Sprintf("%s-rw.%s.svc", db.Name, db.Namespace)

	var ca []byte
	eventually(t, time.Minute, "ca.crt in the application Secret", func() string {
		s, err := cs.CoreV1().Secrets(db.Namespace).Get(ctx, db.Name+"-app", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if ca = s.Data["ca.crt"]; len(ca) == 0 {
			return "no ca.crt"
		}
		return ""
	})
	served := &servedSerial{}
	verified := func(caPEM []byte) *tls.Config {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			t.Fatal("no certificate in the CA bundle")
		}
		return &tls.Config{RootCAs: pool, ServerName: rwName, MinVersion: tls.VersionTLS12, VerifyConnection: served.record}
	}
	other, err := pki.NewCA("another CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pg := db.Spec.Engine == dbv1.EnginePostgreSQL

	// query runs one statement on a new connection to the -rw Service with
	// the given TLS configuration (nil: plain text) and returns its value.
	query := func(cfg *tls.Config, stmt string) (string, error) {
		if pg {
			c, err := pgConnectTLS(ctx, rwAddr, user, password, cfg)
			if err != nil {
				return "", err
			}
			defer c.Close(ctx)
			var v string
			return v, c.QueryRow(ctx, stmt).Scan(&v)
		}
		c := mariaDBTLS(t, rwAddr, user, password, cfg)
		defer c.Close()
		var v string
		return v, c.QueryRow(stmt).Scan(&v)
	}
	probe := "SELECT 'ok'"
	if v, err := query(verified(ca), probe); err != nil || v != "ok" {
		t.Fatalf("a client verifying %s with the application Secret's ca.crt: %q, %v", rwName, v, err)
	}
	if _, err := query(nil, probe); err == nil {
		t.Errorf("a plain-text connection to %s was accepted", rwName)
	} else {
		t.Logf("plain text refused: %v", err)
	}
	if _, err := query(verified(other.CertPEM), probe); err == nil {
		t.Errorf("a client trusting another CA accepted %s's certificate", rwName)
	}

	// Replication: TLS, and the replica verifies the primary's name.
	streamCheck, streamID := "SELECT count(*)::text FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE s.ssl AND r.state = 'streaming'",
		"SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_replication"
	if !pg {
		// The replication thread's session on the primary, by its account.
		streamCheck = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE USER = '" + engine.ReplicationUser + "' AND COMMAND LIKE 'Binlog Dump%'"
		streamID = "SELECT GROUP_CONCAT(ID ORDER BY ID) FROM information_schema.PROCESSLIST WHERE USER = '" + engine.ReplicationUser + "' AND COMMAND LIKE 'Binlog Dump%'"
	}
	eventually(t, time.Minute, "the replica streaming over TLS", func() string {
		if v, err := query(verified(ca), streamCheck); err != nil || v != "1" {
			return fmt.Sprintf("%s streams over TLS (%v)", v, err)
		}
		if !pg {
			if msg := mariaDBReplicaVerifies(t, db, user, password); msg != "" {
				return msg
			}
		}
		return ""
	})
	before, err := query(verified(ca), streamID)
	if err != nil {
		t.Fatal(err)
	}
	first := served.get()

	// Renewal: a deleted certificate Secret is issued again (a new key
	// and serial, the same CA); the kubelet rewrites the mounted files,
	// the agent has the server reload them.
	if err := cs.CoreV1().Secrets(db.Namespace).Delete(ctx, db.Name+"-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the renewed certificate served", func() string {
		if _, err := query(verified(ca), probe); err != nil {
			return err.Error()
		}
		if s := served.get(); s == nil || s.Cmp(first) == 0 {
			return fmt.Sprintf("serial %v still served", s)
		}
		return ""
	})
	if after, err := query(verified(ca), streamID); err != nil || after != before {
		t.Errorf("the replication stream was interrupted by the renewal: sessions %q before, %q after (%v)", before, after, err)
	}
	if v, err := query(verified(ca), streamCheck); err != nil || v != "1" {
		t.Errorf("after the renewal %s replicas stream over TLS (%v)", v, err)
	}
}

// servedSerial records the serial of the last certificate a server
// presented.
type servedSerial struct {
	mu     sync.Mutex
	serial *big.Int
}

func (s *servedSerial) record(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) > 0 {
		s.mu.Lock()
		s.serial = cs.PeerCertificates[0].SerialNumber
		s.mu.Unlock()
	}
	return nil
}

func (s *servedSerial) get() *big.Int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serial
}

// pgConnectTLS connects to PostgreSQL at addr with cfg (nil: plain text,
// sslmode=disable).
func pgConnectTLS(ctx context.Context, addr, user, password string, cfg *tls.Config) (*pgx.Conn, error) {
	c, err := pgx.ParseConfig("sslmode=disable")
	if err != nil {
		return nil, err
	}
	c.Host, c.Port, c.User, c.Password, c.Database = addr, 5432, user, password, "postgres"
	c.ConnectTimeout, c.TLSConfig, c.Fallbacks = 5*time.Second, cfg, nil
	return pgx.ConnectConfig(ctx, c)
}

// mariaDBTLS is a one-connection pool to MariaDB at addr with cfg (nil:
// plain text).
func mariaDBTLS(t testing.TB, addr, user, password string, cfg *tls.Config) *sql.DB {
	c := mariaDBConfig(addr, user, password)
	c.TLS, c.Timeout = cfg, 5*time.Second
	db := openMariaDB(t, c)
	db.SetMaxOpenConns(1)
	return db
}

// mariaDBReplicaVerifies asks the replica (instance 1) whether its
// replication connection uses TLS and verifies the primary's certificate.
func mariaDBReplicaVerifies(t testing.TB, db *dbv1.Database, user, password string) string {
	addr := resolveOne(t, db.Name+"-ro", db.Namespace)
	c := mariaDBTLS(t, addr, user, password, &tls.Config{InsecureSkipVerify: true}) // the replica's own settings are what is checked
	defer c.Close()
	rows, err := c.Query("SHOW SLAVE STATUS")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return "the replica has no replication"
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return err.Error()
	}
	got := map[string]string{}
	for i, c := range cols {
		got[c] = vals[i].String
	}
	if got["Master_SSL_Allowed"] != "Yes" || got["Master_SSL_Verify_Server_Cert"] != "Yes" || got["Slave_IO_Running"] != "Yes" {
		return fmt.Sprintf("replica: SSL allowed %q, verifies %q, IO running %q (%s)", got["Master_SSL_Allowed"], got["Master_SSL_Verify_Server_Cert"], got["Slave_IO_Running"], got["Last_IO_Error"])
	}
	return ""
}
