package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files")

// pluginDir holds the plugin once built (TestMain removes it).
var pluginDir string

// plugin builds cmd/kubectl-database once for the package.
var plugin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "dbop-plugin-")
	if err != nil {
		return "", err
	}
	pluginDir = dir
	bin := filepath.Join(dir, "kubectl-database")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/kubectl-database").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the plugin: %w\n%s", err, out)
	}
	return bin, nil
})

// runPlugin runs `kubectl database ARGS` as a user would (the cluster's
// kubeconfig, the namespace ns) and returns its output and exit code.
func runPlugin(t testing.TB, ns string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := plugin()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kubectl database %v: %v", args, err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// mustPlugin runs the plugin and fails the test unless it exits 0.
func mustPlugin(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, errOut, code := runPlugin(t, ns, args...)
	if code != 0 {
		t.Fatalf("kubectl database %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	return out
}

// TestKubectlPlugin runs every command of `kubectl database` against real
// servers: status against a golden file, connect running real queries on
// the primary and a replica, a switchover followed to its end, a backup and
// its restore into a new Database, the report (its contents, and no
// Secret's value anywhere in it), the merged logs, and bad input.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	db := createDatabase(t, "orders", dbv1.EnginePostgreSQL, "15", 2)
	waitRunning(t, db, 2, 5*time.Minute)
	ns := db.Namespace

	t.Run("status", func(t *testing.T) { pluginStatus(t, ns) })
	t.Run("connect", func(t *testing.T) { pluginConnect(t, ns) })
	t.Run("switchover", func(t *testing.T) { pluginSwitchover(t, db) })
	t.Run("backup and restore", func(t *testing.T) { pluginBackupRestore(t, ns) })
	t.Run("report", func(t *testing.T) { pluginReport(t, ns) })
	t.Run("logs", func(t *testing.T) { pluginLogs(t, ns) })
	t.Run("bad input", func(t *testing.T) { pluginBadInput(t, ns) })
}

// volatile are the parts of status's table that change from run to run:
// the namespace, ages, WAL positions and lag.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?m)^(Database:\s+)\S+/`), "${1}NS/"},
	{regexp.MustCompile(`\.[a-z0-9-]+\.svc:`), ".NS.svc:"},
	{regexp.MustCompile(`\b[0-9A-F]+/[0-9A-F]{5,}\b`), "LSN"},
	{regexp.MustCompile(`\b\d+(m\d+s|h\d+m|s|m|h|d)\b`), "AGE"},
	{regexp.MustCompile(`(yes +Streaming +LSN +)(0|[0-9.]+ [KMG]?i?B(, [0-9.]+s)?|[0-9.]+s)`), "${1}LAG"},
}

func normalizeStatus(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	// Column widths follow the values: compare cells, not spaces.
	return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ")
}

func pluginStatus(t *testing.T, ns string) {
	golden := "testdata/plugin-status.golden"
	var got string
	// The replica may still be catching up right after Running.
	eventually(t, time.Minute, "status as "+golden, func() string {
		got = normalizeStatus(mustPlugin(t, ns, "status", "orders"))
		want, err := os.ReadFile(golden)
		if err != nil || *updateGolden {
			return ""
		}
		if got != string(want) {
			return "status:\n" + got
		}
		return ""
	})
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := mustPlugin(t, ns, "status", "orders", "-o", "json")
	for _, want := range []string{`"name": "orders"`, `"primary": "orders-0"`, `"position": "`} {
		if !strings.Contains(out, want) {
			t.Errorf("status -o json lacks %s:\n%s", want, out)
		}
	}
}

func pluginConnect(t *testing.T, ns string) {
	mustPlugin(t, ns, "connect", "orders", "--", "-v", "ON_ERROR_STOP=1", "-c",
		"CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 42)")
	if out := mustPlugin(t, ns, "connect", "orders", "--", "-Atc", "SELECT current_user, count(*) FROM items"); strings.TrimSpace(out) != "app|42" {
		t.Errorf("connect to the primary: %q, want app|42", out)
	}
	eventually(t, 30*time.Second, "the replica holds the rows", func() string {
		out := mustPlugin(t, ns, "connect", "orders", "--replica", "--", "-Atc", "SELECT pg_is_in_recovery(), count(*) FROM items")
		if strings.TrimSpace(out) != "t|42" {
			return "connect --replica: " + out
		}
		return ""
	})
	out := mustPlugin(t, ns, "connect", "orders", "--print")
	if !strings.Contains(out, "postgresql://app:****@orders-rw."+ns+".svc:5432/app") {
		t.Errorf("connect --print:\n%s", out)
	}
	s, err := cs.CoreV1().Secrets(ns).Get(context.Background(), "orders-app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, string(s.Data["password"])) {
		t.Errorf("connect --print printed the password:\n%s", out)
	}
	// The client's exit code is the plugin's: psql exits 3 when a script
	// fails under ON_ERROR_STOP.
	script := filepath.Join(t.TempDir(), "bad.sql")
	if err := os.WriteFile(script, []byte("SELECT * FROM nothere;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runPlugin(t, ns, "connect", "orders", "--", "-v", "ON_ERROR_STOP=1", "-f", script); code != 3 ||
		!strings.Contains(errOut, `relation "nothere" does not exist`) {
		t.Errorf("psql failing a script: exit %d, want psql's 3; stderr:\n%s", code, errOut)
	}
}

func pluginSwitchover(t *testing.T, db *dbv1.Database) {
	ns := db.Namespace
	out := mustPlugin(t, ns, "switchover", "orders", "--wait", "--timeout", "4m")
	if !strings.Contains(out, "orders-1 is the primary of orders") {
		t.Errorf("switchover --wait said:\n%s", out)
	}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), db); err != nil || db.Status.CurrentPrimary != "orders-1" {
		t.Fatalf("current primary %q (err %v) after the switchover", db.Status.CurrentPrimary, err)
	}
	if out := mustPlugin(t, ns, "connect", "orders", "--", "-Atc", "SELECT pg_is_in_recovery(), count(*) FROM items"); strings.TrimSpace(out) != "f|42" {
		t.Errorf("the new primary: %q, want f|42", out)
	}
}

func pluginBackupRestore(t *testing.T, ns string) {
	out := mustPlugin(t, ns, "backup", "orders", "--backup-name", "first", "--wait", "--timeout", "4m")
	if !strings.Contains(out, "Backup first completed") {
		t.Errorf("backup --wait said:\n%s", out)
	}
	out = mustPlugin(t, ns, "restore", "first", "--to", "copy", "--replicas", "1", "--wait", "--timeout", "5m")
	if !strings.Contains(out, "Database copy runs with Backup first's data") {
		t.Errorf("restore --wait said:\n%s", out)
	}
	copyDB := &dbv1.Database{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "copy"}, copyDB); err != nil {
		t.Fatal(err)
	}
	if s := copyDB.Spec; s.Engine != dbv1.EnginePostgreSQL || s.Version != "15" || s.Storage.Size.String() != "1Gi" {
		t.Errorf("the restored Database's spec %+v, want the source's engine, version and storage", s)
	}
	if out := mustPlugin(t, ns, "connect", "copy", "--", "-Atc", "SELECT count(*) FROM items"); strings.TrimSpace(out) != "42" {
		t.Errorf("the restored Database: %q rows, want 42", out)
	}
	if !strings.Contains(mustPlugin(t, ns, "status", "orders"), "first ") {
		t.Errorf("status does not list Backup first")
	}
}

func pluginReport(t *testing.T, ns string) {
	file := filepath.Join(t.TempDir(), "report.zip")
	mustPlugin(t, ns, "report", "orders", "-f", file)
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	contents := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		contents[f.Name] = string(b)
	}
	var names []string
	for n := range contents {
		names = append(names, n)
	}
	listing := strings.Join(names, "\n")
	for _, want := range []string{"orders-0", "orders-1", "database.log", "event", "statefulset", "Backup", "first"} {
		if !strings.Contains(strings.ToLower(listing+"\n"+strings.Join(mapValues(contents), "\n")), strings.ToLower(want)) {
			t.Errorf("the report holds nothing about %q; its files:\n%s", want, listing)
		}
	}
	// No Secret's value, of any namespace, anywhere in the report; but the
	// values that name rather than protect (a user name, a host, a port, a
	// database name), which the report leaves in place as the objects and
	// logs are full of them (docs/troubleshooting.md says so).
	secrets, err := cs.CoreV1().Secrets("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if len(v) < 4 || notSecretKeys[k] {
				continue
			}
			checked++
			for name, body := range contents {
				if strings.Contains(body, string(v)) || strings.Contains(body, base64.StdEncoding.EncodeToString(v)) {
					t.Errorf("%s holds the value of Secret %s/%s key %s", name, s.Namespace, s.Name, k)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no Secret value to look for: the redaction check checked nothing")
	}
	t.Logf("the report: %d files; %d Secret values looked for and not found", len(contents), checked)
}

// notSecretKeys are the keys whose values the report does not look for.
var notSecretKeys = map[string]bool{"username": true, "host": true, "port": true, "database": true}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func pluginLogs(t *testing.T, ns string) {
	out := mustPlugin(t, ns, "logs", "orders", "--tail", "50")
	for _, pod := range []string{"orders-0", "orders-1"} {
		if !regexp.MustCompile(`(?m)^` + pod + ` +\| `).MatchString(out) {
			t.Errorf("logs has no line of %s:\n%s", pod, tail(out, 3000))
		}
	}
	if strings.Contains(out, `"error_severity"`) {
		t.Errorf("logs left a JSON line as JSON:\n%s", tail(out, 3000))
	}
}

// pluginBadInput: each mistake gets a specific message and exit code.
func pluginBadInput(t *testing.T, ns string) {
	// A Backup of a Database that does not exist fails at once.
	lost := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost"},
		Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: "nothere"}}}
	if err := k8s.Create(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Backup lost Failed", func() string {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(lost), lost); err != nil {
			return err.Error()
		}
		if lost.Status.Phase != dbv1.BackupFailed {
			return fmt.Sprintf("phase %q", lost.Status.Phase)
		}
		return ""
	})
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "nothere"}, 1, `error: no Database "nothere" in namespace "` + ns + `"`},
		{[]string{"switchover", "orders", "orders-9"}, 1, "error: orders-9 is not an instance of Database orders (its instances: orders-0, orders-1)"},
		{[]string{"switchover", "orders", "orders-1"}, 1, "error: orders-1 is the primary already"},
		{[]string{"restore", "nothere", "--to", "x"}, 1, `error: no Backup "nothere" in namespace "` + ns + `"`},
		{[]string{"restore", "first", "--to", "copy"}, 1, "error: the Database copy exists already: restore into a new name"},
		{[]string{"restore", "lost", "--to", "x"}, 1, "error: the Backup lost is Failed (DatabaseNotFound): only a Completed backup can be restored"},
		{[]string{"connect", "nothere"}, 1, `error: no Database "nothere" in namespace "` + ns + `"`},
		{[]string{"status"}, 2, "error: want the Database's name, got 0 argument(s)"},
		{[]string{"backup", "orders", "--wiat"}, 2, "error: unknown flag: --wiat"},
		{[]string{"--kubeconfig", filepath.Join(t.TempDir(), "none"), "status", "orders"}, 1, "error: reading the kubeconfig"},
	} {
		out, errOut, code := runPlugin(t, ns, tc.args...)
		if code != tc.code || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("kubectl database %v: exit %d, stderr %q (stdout %q); want exit %d, %q", tc.args, code, errOut, out, tc.code, tc.want)
		}
	}
}
