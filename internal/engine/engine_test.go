package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestLSN(t *testing.T) {
	for _, s := range []string{"0/0", "0/16B3748", "1A/FF000028"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		if l.String() != strings.ToUpper(s) {
			t.Errorf("%s round-trips to %s", s, l)
		}
	}
	a, _ := ParseLSN("0/FFFFFFFF")
	b, _ := ParseLSN("1/0")
	if a >= b {
		t.Errorf("0/FFFFFFFF >= 1/0")
	}
	for _, bad := range []string{"", "16B3748", "x/1", "1/y"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q) passed", bad)
		}
	}
}

func TestComparePostgres(t *testing.T) {
	p := &postgres{}
	pos := func(tli uint32, lsn string) Position { l, _ := ParseLSN(lsn); return Position{Timeline: tli, LSN: l} }
	tests := []struct {
		a, b Position
		want int
	}{
		{pos(1, "0/3000000"), pos(1, "0/3000000"), 0},
		{pos(1, "0/3000060"), pos(1, "0/3000000"), 1},
		{pos(1, "0/3000000"), pos(1, "1/0"), -1},
		{pos(2, "0/1000"), pos(1, "0/9000000"), 1}, // a newer timeline is ahead
	}
	for _, tt := range tests {
		if got, _ := p.Compare(tt.a, tt.b); got != tt.want {
			t.Errorf("Compare(%v, %v) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestCompareMariaDBGTID(t *testing.T) {
	tests := []compareCase{
		{"0-1-10", "0-1-10", 0, false},
		{"0-1-11", "0-1-10", 1, false},
		{"0-1-9", "0-1-10", -1, false},
		{"0-2-11", "0-1-10", 1, false},               // the new primary wrote after taking over
		{"0-1-10,1-1-5", "0-1-10", 1, false},         // an extra domain
		{"", "0-1-1", -1, false},                     // empty: nothing yet
		{"0-1-10", "0-2-10", 0, true},                // same sequence, different servers: errant
		{"0-1-11,1-1-4", "0-1-10,1-1-5", 0, true},    // ahead in one domain, behind in another
		{" 0-1-3 , 1-2-4 ", "1-2-4,0-1-3", 0, false}, // order and spaces do not matter
		// GTID states, a server's last transaction per writer: the server
		// ids say whose transaction stands at a number.
		{"0-1-100,0-2-103", "0-1-100", 1, false}, // the promoted replica holds its old primary's last
		{"0-1-100", "0-1-100,0-2-103", -1, false},
		{"0-1-100,0-2-103", "0-1-102", 0, true}, // the old primary wrote 101-102 the new one never had
		{"0-1-102", "0-1-100,0-2-103", 0, true}, // (the same, the other way round: further behind is no excuse)
		{"0-2-103", "0-1-102", 1, false},        // a clone's state without server 1's history: by number
		{"0-1-100,0-2-110", "0-1-100,0-2-103", 1, false},
	}
	checkCompare(t, compareMariaDBGTID, tests)
	for _, bad := range []string{"0-1", "a-b-c", "0-1-2-3"} {
		if _, err := compareMariaDBGTID(bad, "0-1-1"); err == nil || errors.Is(err, ErrDiverged) {
			t.Errorf("%q: err %v, want a parse error", bad, err)
		}
	}
}

func TestCompareMySQLGTIDSet(t *testing.T) {
	const u1, u2 = "3E11FA47-71CA-11E1-9E33-C80AA9429562", "4f2d1a10-0000-11e1-9e33-c80aa9429562"
	tests := []compareCase{
		{u1 + ":1-5", strings.ToLower(u1) + ":1-5", 0, false},
		{u1 + ":1-5", u1 + ":1-3", 1, false},
		{u1 + ":1-3:4-5", u1 + ":1-5", 0, false}, // adjacent intervals merge
		{u1 + ":1-5", u1 + ":1-5," + u2 + ":1", -1, false},
		{u1 + ":1-5," + u2 + ":1-2", u1 + ":1-6", 0, true}, // errant transactions from u2
		{u1 + ":1-3:5", u1 + ":1-4", 0, true},              // a gap on each side
		{"", u1 + ":1", -1, false},
		{u1 + ":1-5,\n" + u2 + ":1", u1 + ":1-5", 1, false}, // MySQL wraps long sets
	}
	checkCompare(t, compareMySQLGTIDSet, tests)
	for _, bad := range []string{u1, u1 + ":x", u1 + ":5-1"} {
		if _, err := compareMySQLGTIDSet(bad, u1+":1"); err == nil || errors.Is(err, ErrDiverged) {
			t.Errorf("%q: err %v, want a parse error", bad, err)
		}
	}
}

// TestMySQLStatements covers the MySQL 8.4 SQL, which has no server here:
// the statements a failover sends, in order, with values quoted.
func TestMySQLStatements(t *testing.T) {
	d := mysqlDialect{}
	follow := d.follow(Endpoint{Host: "db-1.db-headless", Port: 3306}, Credentials{User: "repl", Password: "it's\\secret"}, tlsNone, "")
	want := []string{
		"STOP REPLICA",
		"SET GLOBAL super_read_only = ON",
		`CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'db-1.db-headless', SOURCE_PORT = 3306, SOURCE_USER = 'repl', SOURCE_PASSWORD = 'it\'s\\secret', SOURCE_AUTO_POSITION = 1, SOURCE_CONNECT_RETRY = 1, SOURCE_SSL = 0, GET_SOURCE_PUBLIC_KEY = 1`,
		"START REPLICA",
	}
	if fmt.Sprint(follow) != fmt.Sprint(want) {
		t.Errorf("follow:\n got %q\nwant %q", follow, want)
	}
	// With the CA, the source is verified by its name, not its address,
	// and no public key is taken on trust.
	tlsFollow := d.follow(Endpoint{Host: "10.0.0.7", Port: 3306, ServerName: "db-1.db-headless.ns.svc"}, Credentials{User: "repl", Password: "x"}, tlsVerified, "/tls/ca.crt")
	if want := `CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'db-1.db-headless.ns.svc', SOURCE_PORT = 3306, SOURCE_USER = 'repl', SOURCE_PASSWORD = 'x', SOURCE_AUTO_POSITION = 1, SOURCE_CONNECT_RETRY = 1, SOURCE_SSL = 1, SOURCE_SSL_CA = '/tls/ca.crt', SOURCE_SSL_VERIFY_SERVER_CERT = 1`; tlsFollow[2] != want {
		t.Errorf("follow with TLS:\n got %q\nwant %q", tlsFollow[2], want)
	}
	if got := append(d.promote(), d.unfence()...); fmt.Sprint(got) != fmt.Sprint([]string{"STOP REPLICA", "RESET REPLICA ALL", "SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF"}) {
		t.Errorf("promote: %q", got)
	}
	if got := d.fence(); fmt.Sprint(got) != "[SET GLOBAL super_read_only = ON]" {
		t.Errorf("fence: %q", got)
	}
	if got := d.waitApplied("u:1-5", 30); got != "SELECT WAIT_FOR_EXECUTED_GTID_SET('u:1-5', 30)" {
		t.Errorf("waitApplied: %s", got)
	}
	if got := d.received("u:1-5", "u:6-7"); got != "u:1-5,u:6-7" {
		t.Errorf("received: %s", got)
	}
	if strings.Contains(redact(follow[2]), "secret") {
		t.Errorf("redact left the password in: %s", redact(follow[2]))
	}
}

func TestMariaDBStatements(t *testing.T) {
	d := mariadbDialect{}
	follow := d.follow(Endpoint{Host: "10.0.0.7", Port: 3306}, Credentials{User: "root", Password: "pw"}, tlsNone, "")
	if follow[2] != "CHANGE MASTER TO MASTER_HOST = '10.0.0.7', MASTER_PORT = 3306, MASTER_USER = 'root', MASTER_PASSWORD = 'pw', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, MASTER_SSL = 0" {
		t.Errorf("follow: %s", follow[2])
	}
	tlsFollow := d.follow(Endpoint{Host: "10.0.0.7", Port: 3306, ServerName: "db-1.db-headless.ns.svc"}, Credentials{User: "root", Password: "pw"}, tlsVerified, "/tls/ca.crt")
	if tlsFollow[2] != "CHANGE MASTER TO MASTER_HOST = 'db-1.db-headless.ns.svc', MASTER_PORT = 3306, MASTER_USER = 'root', MASTER_PASSWORD = 'pw', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, MASTER_SSL = 1, MASTER_SSL_CA = '/tls/ca.crt', MASTER_SSL_VERIFY_SERVER_CERT = 1" {
		t.Errorf("follow with TLS: %s", tlsFollow[2])
	}
	// A replica started before its Database had certificates has no CA:
	// it still encrypts towards a primary that takes TLS only.
	if f := d.follow(Endpoint{Host: "10.0.0.7", Port: 3306, ServerName: "db-1.db-headless.ns.svc"}, Credentials{User: "root", Password: "pw"}, tlsUnverified, ""); !strings.HasSuffix(f[2], "MASTER_SSL = 1, MASTER_SSL_VERIFY_SERVER_CERT = 0") {
		t.Errorf("follow without a CA: %s", f[2])
	}
	if got := redact(follow[2]); strings.Contains(got, "'pw'") || !strings.Contains(got, "MASTER_USE_GTID") {
		t.Errorf("redact: %s", got)
	}
	if got := d.received("0-1-10", "0-1-8"); got != "0-1-10" {
		t.Errorf("received keeps the further position: %s", got)
	}
}

func TestCredentialsNeverPrinted(t *testing.T) {
	c := Credentials{User: "postgres", Password: "hunter2"}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c)} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("password printed: %s", s)
		}
	}
}

type compareCase struct {
	a, b     string
	want     int
	diverged bool
}

// checkCompare runs a table of position comparisons: an order, or divergence.
func checkCompare(t *testing.T, compare func(a, b string) (int, error), tests []compareCase) {
	t.Helper()
	for _, tt := range tests {
		got, err := compare(tt.a, tt.b)
		if tt.diverged {
			if !errors.Is(err, ErrDiverged) {
				t.Errorf("compare(%q, %q): err %v, want diverged", tt.a, tt.b, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("compare(%q, %q) = %d, %v; want %d", tt.a, tt.b, got, err, tt.want)
		}
	}
}

func TestLag(t *testing.T) {
	for _, tc := range []struct {
		name             string
		fn               func(r, p string) (int64, error)
		replica, primary string
		want             int64
	}{
		{"mariadb caught up", mariaDBGTIDLag, "0-1-50", "0-1-50", 0},
		{"mariadb behind", mariaDBGTIDLag, "0-1-40", "0-1-50", 10},
		{"mariadb ahead counts nothing", mariaDBGTIDLag, "0-1-60", "0-1-50", 0},
		{"mariadb per domain", mariaDBGTIDLag, "0-1-40,1-2-5", "0-1-50,1-2-7,2-3-1", 13},
		{"mariadb empty replica", mariaDBGTIDLag, "", "0-1-5", 5},
		{"mariadb states", mariaDBGTIDLag, "0-1-100", "0-1-100,0-2-103", 3},
		{"mysql caught up", mysqlGTIDLag, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", 0},
		{"mysql behind", mysqlGTIDLag, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9", 4},
		{"mysql gaps and sources", mysqlGTIDLag, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3:7",
			"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9,4a6b2e1c-71ca-11e1-9e33-c80aa9429562:1-2", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.replica, tc.primary)
			if err != nil || got != tc.want {
				t.Errorf("lag(%q, %q) = %d, %v; want %d", tc.replica, tc.primary, got, err, tc.want)
			}
		})
	}
	if got := walBytesBehind(0x3000000, 0x3000100); got != 256 {
		t.Errorf("WAL lag %d, want 256", got)
	}
	if got := walBytesBehind(0x3000100, 0x3000000); got != 0 {
		t.Errorf("WAL lag of a replica ahead %d, want 0", got)
	}
	if _, err := mariaDBGTIDLag("bad", "0-1-1"); err == nil {
		t.Error("a malformed GTID was accepted")
	}
}

// TestAccountStatements: each kind of account gets its rights and no
// more, in each MySQL dialect (MySQL 8.4 runs nowhere here: these are its
// only check); a malformed account is refused before any statement.
func TestAccountStatements(t *testing.T) {
	for _, tt := range []struct {
		d    dialect
		a    Account
		want []string
	}{
		{mysqlDialect{}, Account{User: "monitor", Password: "p", Monitoring: true}, []string{
			"CREATE USER IF NOT EXISTS 'monitor'@'%' IDENTIFIED BY 'p'", "ALTER USER 'monitor'@'%' IDENTIFIED BY 'p'",
			"GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'monitor'@'%'", "GRANT SELECT ON performance_schema.* TO 'monitor'@'%'"}},
		{mariadbDialect{}, Account{User: "monitor", Password: "p", Monitoring: true}, []string{
			"CREATE USER IF NOT EXISTS 'monitor'@'%' IDENTIFIED BY PASSWORD '" + nativePasswordHash("p") + "'",
			"ALTER USER 'monitor'@'%' IDENTIFIED BY PASSWORD '" + nativePasswordHash("p") + "'",
			"GRANT PROCESS, BINLOG MONITOR, SLAVE MONITOR ON *.* TO 'monitor'@'%'", "GRANT SELECT ON performance_schema.* TO 'monitor'@'%'"}},
		{mysqlDialect{}, Account{User: "streaming_replica", Password: "p", Replication: true}, []string{
			"CREATE USER IF NOT EXISTS 'streaming_replica'@'%' IDENTIFIED BY 'p'", "ALTER USER 'streaming_replica'@'%' IDENTIFIED BY 'p'",
			"GRANT REPLICATION SLAVE ON *.* TO 'streaming_replica'@'%'"}},
		{mysqlDialect{}, Account{User: "app", Password: "p", Database: "app"}, []string{
			"CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'p'", "ALTER USER 'app'@'%' IDENTIFIED BY 'p'",
			"CREATE DATABASE IF NOT EXISTS `app`", "GRANT ALL PRIVILEGES ON `app`.* TO 'app'@'%'"}},
	} {
		if err := tt.a.validate(); err != nil {
			t.Errorf("%s %s: %v", tt.d.name(), tt.a.kind(), err)
		}
		if got := tt.d.account(tt.a); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s %s:\n got %q\nwant %q", tt.d.name(), tt.a.kind(), got, tt.want)
		}
	}
	for _, bad := range []Account{
		{User: "m", Password: "p", Monitoring: true, Replication: true},
		{User: "m", Password: "p", Monitoring: true, Database: "app"},
		{User: "m", Monitoring: true},
	} {
		if err := bad.validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestMySQLSettingValue(t *testing.T) {
	for in, want := range map[string]string{
		"300":  "300",
		"2.5":  "2.5",
		"32M":  "(32 << 20)",
		"1g":   "(1 << 30)",
		"64K":  "(64 << 10)",
		"ON":   "'ON'",
		"":     "''",
		"1.":   "'1.'",
		"M":    "'M'",
		"a'b":  `'a\'b'`,
		"12MB": "'12MB'",
	} {
		if got := mysqlSettingValue(in); got != want {
			t.Errorf("mysqlSettingValue(%q) = %s, want %s", in, got, want)
		}
	}
	for _, name := range []string{"work_mem", "pg_stat_statements.max"} {
		if err := settingName(name); err != nil {
			t.Errorf("settingName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "1abc", "a; DROP", "A"} {
		if settingName(name) == nil {
			t.Errorf("settingName(%q) accepted it", name)
		}
	}
}
