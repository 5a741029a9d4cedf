package engine

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // MariaDB's mysql_native_password hash is SHA-1 by definition
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// ReplicationUser is the account replicas stream the primary's changes
// with. The start scripts create it with a new primary and the operator
// keeps its password; a restore leaves the restored Database's own.
const ReplicationUser = "streaming_replica"

// MonitoringUser is the account metrics are read with.
const MonitoringUser = "monitor"

// Account is an application account: it logs in, owns its database and
// can do anything inside it, and nothing else. It has no superuser,
// replication or READ ONLY ADMIN right, so a fenced primary or a replica
// (read-only) refuses its writes, which is what fencing relies on.
//
// With Replication, it is the replication account instead: it may stream
// the primary's changes (PostgreSQL's REPLICATION attribute, MySQL's and
// MariaDB's REPLICATION SLAVE) and nothing else, no database included, so
// the superuser stays the operator's own.
//
// With Monitoring, it is the monitoring account: it reads the server's
// statistics and replication state (PostgreSQL's pg_monitor role; MySQL
// and MariaDB: PROCESS, the replication monitoring rights, and
// performance_schema) and no table of any database, and writes nothing.
type Account struct {
	User, Password, Database string
	Replication, Monitoring  bool
}

func (a Account) kind() string {
	switch {
	case a.Replication:
		return "replication account"
	case a.Monitoring:
		return "monitoring account"
	}
	return "application account"
}

func (a Account) validate() error {
	fields := map[string]string{"user": a.User, "database": a.Database}
	if a.Replication && a.Monitoring {
		return fmt.Errorf("account %s: replication or monitoring, not both", a.User)
	}
	if a.Replication || a.Monitoring {
		if a.Database != "" {
			return fmt.Errorf("%s %s: it owns no database (%q given)", a.kind(), a.User, a.Database)
		}
		delete(fields, "database")
	}
	for what, v := range fields {
		if v == "" || len(v) > 63 || strings.ContainsAny(v, "'\"`\\\x00") {
			return fmt.Errorf("%s: %s %q must be 1 to 63 characters without quotes or backslashes", a.kind(), what, v)
		}
	}
	if a.Password == "" {
		return fmt.Errorf("%s %s: empty password", a.kind(), a.User)
	}
	return nil
}

// SCRAMVerifier is PostgreSQL's stored form of a SCRAM-SHA-256 password
// (RFC 5802 with PostgreSQL's encoding): sent instead of the password, it
// keeps the password out of the server's logs (a failed statement is
// logged with its text). It holds base64, '$' and ':' only: a literal
// whatever standard_conforming_strings says.
func SCRAMVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	const iterations = 4096
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(msg string) []byte {
		h := hmac.New(sha256.New, salted)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac("Client Key"))
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, enc(salt), enc(stored[:]), enc(mac("Server Key"))), nil
}

// nativePasswordHash is MariaDB's mysql_native_password hash, given with
// IDENTIFIED BY PASSWORD so that no statement (nor the binary log that
// replicates it) carries the password itself.
func nativePasswordHash(password string) string {
	first := sha1.Sum([]byte(password)) //nolint:gosec // the server's format
	second := sha1.Sum(first[:])        //nolint:gosec // the server's format
	return "*" + strings.ToUpper(hex.EncodeToString(second[:]))
}

// MariaDBIdentifiedBy is the IDENTIFIED BY clause that gives a MariaDB
// account password: its native hash, so the password itself is in no
// statement a server could echo in an error or a log.
func MariaDBIdentifiedBy(password string) string {
	return "IDENTIFIED BY PASSWORD " + mysqlLiteral(nativePasswordHash(password))
}

// MySQLLiteral is s as a MySQL or MariaDB string literal.
func MySQLLiteral(s string) string { return mysqlLiteral(s) }
