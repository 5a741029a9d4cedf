package backup

import (
	"strings"
	"testing"
	"time"
)

func TestDumpGTID(t *testing.T) {
	for name, tt := range map[string]struct{ head, want string }{
		"mariadb": {"-- MariaDB dump\n--\n-- SET GLOBAL gtid_slave_pos='0-1000-42,1-1001-7';\n", "0-1000-42,1-1001-7"},
		"mysql":   {"SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5';\n", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"},
		"none":    {"-- PostgreSQL database dump\n", ""},
		// A row that happens to contain the text is not the header line.
		"in data": {"INSERT INTO t VALUES ('-- SET GLOBAL gtid_slave_pos=''9-9-9''');\n", ""},
	} {
		if got := dumpGTID([]byte(tt.head)); got != tt.want {
			t.Errorf("%s: %q, want %q", name, got, tt.want)
		}
	}
}

func TestWithoutRole(t *testing.T) {
	globals := "CREATE ROLE app;\nALTER ROLE app WITH LOGIN PASSWORD 'x';\nCREATE ROLE postgres;\nALTER ROLE postgres WITH SUPERUSER PASSWORD 'secret';\nCREATE ROLE postgres_reader;\nGRANT pg_read_all_data TO postgres_reader;\n"
	got := string(withoutRole([]byte(globals), "postgres"))
	want := "CREATE ROLE app;\nALTER ROLE app WITH LOGIN PASSWORD 'x';\nCREATE ROLE postgres_reader;\nGRANT pg_read_all_data TO postgres_reader;\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestResultFitsTerminationMessage(t *testing.T) {
	r := Result{Succeeded: true, Message: strings.Repeat("m", 10000), Location: "s3://b/" + strings.Repeat("p", 300)}
	for i := range 500 {
		r.Pruned = append(r.Pruned, strings.Repeat("x", 40)+string(rune('a'+i%26)))
	}
	b := r.Encode()
	if len(b) > MaxResultSize {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := DecodeResult(b)
	if err != nil || !got.Succeeded || len(got.Pruned) == 0 {
		t.Errorf("decoded %+v, %v", got, err)
	}
	small := Result{Reason: ReasonCorrupt, Message: "bad"}
	if got, _ := DecodeResult(small.Encode()); got.Reason != ReasonCorrupt || got.Message != "bad" {
		t.Errorf("a small result changed: %+v", got)
	}
}

func TestParseMaxAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "12h": 12 * time.Hour, "30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour} {
		if got, err := ParseMaxAge(in); err != nil || got != want {
			t.Errorf("%q: %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"-1d", "0d", "30", "1y", "d"} {
		if _, err := ParseMaxAge(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestManifestValidate(t *testing.T) {
	ok := func() *Manifest {
		return &Manifest{Format: FormatVersion, Files: []File{{Name: "dump.sql", Kind: KindSQL, SHA256: strings.Repeat("a", 64)}}}
	}
	if err := ok().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Manifest){
		"newer format":    func(m *Manifest) { m.Format = 2 },
		"no files":        func(m *Manifest) { m.Files = nil },
		"path in name":    func(m *Manifest) { m.Files[0].Name = "../x" },
		"manifest itself": func(m *Manifest) { m.Files[0].Name = ManifestName },
		"no checksum":     func(m *Manifest) { m.Files[0].SHA256 = "" },
	} {
		m := ok()
		mutate(m)
		if m.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The checksum covers every file's name and digest.
	a, b := ok(), ok()
	b.Files[0].SHA256 = strings.Repeat("b", 64)
	if a.Checksum() == b.Checksum() || !strings.HasPrefix(a.Checksum(), "sha256:") {
		t.Errorf("checksums %s %s", a.Checksum(), b.Checksum())
	}
}

func TestWithoutAccounts(t *testing.T) {
	users := "CREATE USER IF NOT EXISTS `mariadb.sys`@`localhost` ACCOUNT LOCK;\n" +
		"CREATE USER IF NOT EXISTS `root`@`%` IDENTIFIED BY PASSWORD '*5E6F';\n" +
		"CREATE USER IF NOT EXISTS `shopper`@`%` IDENTIFIED BY PASSWORD '*0C90';\n" +
		"/*M!100005 GRANT 'reader' TO 'root'@'%' WITH ADMIN OPTION */;\n" +
		"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` IDENTIFIED BY PASSWORD '*5E6F' WITH GRANT OPTION;\n" +
		"GRANT SELECT ON `shop`.* TO `shopper`@`%`;\n" +
		"GRANT SELECT ON `shop`.* TO `rooted`@`%`;\n"
	got := string(withoutAccounts([]byte(users), "root", "mariadb.sys"))
	want := "CREATE USER IF NOT EXISTS `shopper`@`%` IDENTIFIED BY PASSWORD '*0C90';\n" +
		"GRANT SELECT ON `shop`.* TO `shopper`@`%`;\n" +
		"GRANT SELECT ON `shop`.* TO `rooted`@`%`;\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
