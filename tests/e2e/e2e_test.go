package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/tests/utils/poll"
)

// TestPostgresOnRealPods: a two-instance PostgreSQL 15 Database comes up on
// real servers started from the chart's pods; a client that resolves the
// read-write Service through the cluster's DNS writes a row, and the row is
// on the replica behind the read-only Service. The data is on the claims
// (the chart's mount paths are what ran), and Ready says the primary serves
// writes only because the operator asked its server.
func TestPostgresOnRealPods(t *testing.T) {
	t.Parallel()
	db := createDatabase(t, "pg", dbv1.EnginePostgreSQL, "15", 2)
	got := waitRunning(t, db, 2, 5*time.Minute)
	checkReadyVerified(t, got)
	user, password := credentials(t, db)

	open := func(service string) *pgx.Conn {
		t.Helper()
		addr := resolveOne(t, service, db.Namespace)
		c, err := pgConnect(context.Background(), addr, 5432, user, password, 5*time.Second)
		if err != nil {
			t.Fatalf("connecting to %s (%s): %v", service, addr, err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	ctx := context.Background()
	rw := open(db.Name + "-rw")
	for _, stmt := range []string{"CREATE TABLE orders (id serial PRIMARY KEY, note text)", "INSERT INTO orders (note) VALUES ('through -rw')"} {
		if _, err := rw.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	ro := open(db.Name + "-ro")
	eventually(t, 30*time.Second, "the row on the replica", func() string {
		var note string
		if err := ro.QueryRow(ctx, "SELECT note FROM orders").Scan(&note); err != nil {
			return err.Error()
		}
		if note != "through -rw" {
			return fmt.Sprintf("note %q", note)
		}
		return ""
	})
	var inRecovery bool
	if err := ro.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		t.Errorf("-ro reached a server in recovery %v (%v): want the replica", inRecovery, err)
	}
	t.Run("kubectl logs, exec and port-forward", func(t *testing.T) { kubectlReachesPod(t, db, user, password) })
	t.Run("TLS only, verified, renewed in place", func(t *testing.T) { checkTLS(t, db) })
	// The operator points the replica at the primary (primary_conninfo):
	// PostgreSQL logs that setting's value on reload, so it must not hold
	// the password.
	for _, pod := range []string{db.Name + "-0", db.Name + "-1"} {
		if log, err := node.Logs(db.Namespace, pod, "database", false); err != nil || strings.Contains(string(log), password) {
			t.Errorf("%s's server log holds the password (%v)", pod, err)
		}
	}
	t.Run("a wrong environment variable name crash-loops", func(t *testing.T) {
		log := brokenInstance(t, db, "broken-env", func(spec *corev1.PodSpec) {
			for i, e := range spec.Containers[0].Env {
				if e.Name == "POSTGRES_PASSWORD" {
					spec.Containers[0].Env[i].Name = "POSTGRES_PASSWD"
				}
			}
		})
		if !strings.Contains(log, "POSTGRES_PASSWORD") {
			t.Errorf("the log does not name the missing variable:\n%s", log)
		}
	})
	t.Run("a wrong mount path crash-loops", func(t *testing.T) {
		log := brokenInstance(t, db, "broken-mount", func(spec *corev1.PodSpec) {
			for i, m := range spec.Containers[0].VolumeMounts {
				if m.Name == "scripts" {
					spec.Containers[0].VolumeMounts[i].MountPath = "/opt/elsewhere"
				}
			}
		})
		if !strings.Contains(log, "postgres-start.sh") {
			t.Errorf("the log does not name the missing script:\n%s", log)
		}
	})
	// The chart mounts the claim at /var/lib/postgresql/data and PGDATA is
	// below it: the data directory must be on the claim, not in the
	// container's own layer (which a restart throws away).
	for _, pod := range []string{db.Name + "-0", db.Name + "-1"} {
		claim := claimDir(t, db.Namespace, "data-"+pod)
		if _, err := os.Stat(filepath.Join(claim, "pgdata", "PG_VERSION")); err != nil {
			t.Errorf("%s: no PostgreSQL data on its claim (%s): %v", pod, claim, err)
		}
	}
}

// kubectlReachesPod: kubectl reaches an instance through the API server and
// the node's kubelet API, as it would in a cluster.
func kubectlReachesPod(t testing.TB, db *dbv1.Database, user, password string) {
	pod := db.Name + "-0"
	run := func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", db.Namespace}, args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	// The server's own log, as JSON (jsonlog, relayed by the agent).
	if out, code := run("logs", pod); code != 0 || !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		var entry struct {
			Severity string `json:"error_severity"`
			Message  string `json:"message"`
		}
		return json.Unmarshal([]byte(line), &entry) == nil && entry.Severity == "LOG" && entry.Message == "database system is ready to accept connections"
	}) {
		t.Errorf("kubectl logs: exit %d, and no JSON line saying the server is ready:\n%s", code, out)
	}
	if out, code := run("logs", pod, "--tail=1"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("kubectl logs --tail=1: exit %d, want one line:\n%s", code, out)
	}
	// Anyone else on the pod network (a pod, say) is refused: only the API
	// server's client certificate opens the kubelet API.
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := anon.Get(fmt.Sprintf("https://%s/containerLogs/%s/%s/database", net.JoinHostPort(node.IP().String(), "10250"), db.Namespace, pod)); err == nil {
		resp.Body.Close()
		t.Errorf("the kubelet API answered a client without a certificate: %s", resp.Status)
	}
	// In the container: its user, its environment, its socket.
	out, code := run("exec", pod, "--", "sh", "-c", `id -u; psql -U "$POSTGRES_USER" -d postgres -Atc 'SELECT count(*) FROM orders'`)
	if code != 0 || strings.Fields(out)[0] != "999" || !strings.Contains(out, "\n1\n") {
		t.Errorf("kubectl exec: exit %d, want uid 999 and 1 row:\n%s", code, out)
	}
	if out, code := run("exec", pod, "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("kubectl exec of a command exiting 3: exit %d:\n%s", code, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pf := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "-n", db.Namespace, "port-forward", "pod/"+pod, ":5432")
	stdout, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = pf.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var local int
	if _, serr := fmt.Sscanf(line, "Forwarding from 127.0.0.1:%d -> 5432", &local); err != nil || serr != nil {
		t.Fatalf("kubectl port-forward said %q (%v, %v)", line, err, serr)
	}
	c, err := pgConnect(context.Background(), "127.0.0.1", local, user, password, 10*time.Second)
	if err != nil {
		t.Fatalf("connecting through kubectl port-forward: %v", err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 1 {
		t.Errorf("through port-forward: %d rows (%v), want 1", n, err)
	}
}

// brokenInstance runs a copy of a Database's instance pod, changed by
// mutate, and returns its state once it crash-loops, with its log: the pod
// spec the chart renders is what runs, so a wrong name in it must fail.
func brokenInstance(t testing.TB, db *dbv1.Database, name string, mutate func(*corev1.PodSpec)) string {
	t.Helper()
	ctx := context.Background()
	sts, err := cs.AppsV1().StatefulSets(db.Namespace).Get(ctx, db.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := *sts.Spec.Template.Spec.DeepCopy()
	// The claim template becomes a scratch volume: no instance's data is touched.
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	mutate(&spec)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name}, Spec: spec}
	if _, err := cs.CoreV1().Pods(db.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods(db.Namespace).Delete(ctx, name, metav1.DeleteOptions{}) }()
	eventually(t, 2*time.Minute, name+" in CrashLoopBackOff", func() string {
		p, err := cs.CoreV1().Pods(db.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if s := p.Status.ContainerStatuses; len(s) == 1 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CrashLoopBackOff" {
			return ""
		}
		return fmt.Sprintf("statuses %+v", p.Status.ContainerStatuses)
	})
	log, err := node.Logs(db.Namespace, name, "database", false)
	if err != nil {
		t.Fatal(err)
	}
	return string(log)
}

// TestMariaDBOnRealPods: the same for MariaDB 10.11, whose pods run the
// image's entrypoint (the node's stand-in) with the chart's configuration
// in /etc/mysql/conf.d.
func TestMariaDBOnRealPods(t *testing.T) {
	t.Parallel()
	db := createDatabase(t, "maria", dbv1.EngineMariaDB, "10.11", 2)
	got := waitRunning(t, db, 2, 5*time.Minute)
	checkReadyVerified(t, got)
	user, password := credentials(t, db)

	open := func(service string) *sql.DB {
		t.Helper()
		cfg := mariaDBConfig(resolveOne(t, service, db.Namespace), user, password)
		cfg.Timeout = 5 * time.Second
		c := openMariaDB(t, cfg)
		c.SetMaxOpenConns(1)
		return c
	}
	rw := open(db.Name + "-rw")
	for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)",
		"INSERT INTO shop.orders (note) VALUES ('through -rw')"} {
		if _, err := rw.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	ro := open(db.Name + "-ro")
	eventually(t, 30*time.Second, "the row on the replica", func() string {
		var note string
		if err := ro.QueryRow("SELECT note FROM shop.orders").Scan(&note); err != nil {
			return err.Error()
		}
		if note != "through -rw" {
			return fmt.Sprintf("note %q", note)
		}
		return ""
	})
	var readOnly int
	if err := ro.QueryRow("SELECT @@read_only").Scan(&readOnly); err != nil || readOnly != 1 {
		t.Errorf("-ro reached a server with read_only=%d (%v): want the read-only replica", readOnly, err)
	}
	t.Run("TLS only, verified, renewed in place", func(t *testing.T) { checkTLS(t, db) })
	for _, pod := range []string{db.Name + "-0", db.Name + "-1"} {
		claim := claimDir(t, db.Namespace, "data-"+pod)
		if _, err := os.Stat(filepath.Join(claim, "data", "mysql")); err != nil {
			t.Errorf("%s: no MariaDB data on its claim (%s): %v", pod, claim, err)
		}
	}
}

// TestBackupAndRestoreOnRealPods: a Backup of a MariaDB Database runs as a
// real Job pod (the operator's binary copied from its image into the
// database image's container, as in a cluster) onto a volume, and a new
// Database bootstrapped from it has the rows.
func TestBackupAndRestoreOnRealPods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := createDatabase(t, "shop", dbv1.EngineMariaDB, "10.11", 1)
	waitRunning(t, db, 1, 5*time.Minute)
	user, password := credentials(t, db)
	sqlDB := func(d *dbv1.Database, user, password string) *sql.DB {
		return openMariaDB(t, mariaDBConfig(resolveOne(t, d.Name+"-rw", d.Namespace), user, password))
	}
	src := sqlDB(db, user, password)
	for _, stmt := range []string{"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY)",
		"INSERT INTO shop.orders VALUES (1), (2), (3)"} {
		if _, err := src.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "first"}, Spec: dbv1.BackupSpec{
		Database: dbv1.LocalObjectReference{Name: db.Name}, Target: &dbv1.BackupTarget{Volume: &dbv1.VolumeTarget{}}}}
	if err := k8s.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the backup done", func() string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err.Error()
		}
		if !b.Status.Phase.Finished() {
			return fmt.Sprintf("phase %q: %s", b.Status.Phase, b.Status.Message)
		}
		return ""
	})
	if b.Status.Phase != dbv1.BackupCompleted {
		t.Fatalf("backup %s: %s", b.Status.Phase, b.Status.Message)
	}

	restored := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "restored"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMariaDB, Version: "10.11", Replicas: 1,
			Storage:        dbv1.StorageSpec{Size: resource.MustParse("1Gi")},
			DeletionPolicy: dbv1.DeletionPolicyDelete,
			Bootstrap:      &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: b.Name}}}}
	if err := k8s.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, restored, 1, 5*time.Minute)
	ruser, rpassword := credentials(t, restored)
	var n int
	if err := sqlDB(restored, ruser, rpassword).QueryRow("SELECT count(*) FROM shop.orders").Scan(&n); err != nil || n != 3 {
		t.Fatalf("the restored Database has %d rows (%v), want 3", n, err)
	}
}

// TestVersionWithoutServerFailsClearly: a Database asking for a version
// this machine has no server for gets pods that say so in their status.
func TestVersionWithoutServerFailsClearly(t *testing.T) {
	db := createDatabase(t, "pg16", dbv1.EnginePostgreSQL, "16", 1)
	pod := &corev1.Pod{}
	eventually(t, 2*time.Minute, "the pod's waiting reason", func() string {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-0"}, pod); err != nil {
			return err.Error()
		}
		if s := pod.Status.ContainerStatuses; len(s) == 1 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CreateContainerConfigError" {
			return ""
		}
		return fmt.Sprintf("container statuses %+v", pod.Status.ContainerStatuses)
	})
	msg := pod.Status.ContainerStatuses[0].State.Waiting.Message
	for _, want := range []string{"postgres:16", "no local match", "postgres:15"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	// The Database says it too: not "no failure observed" while its only
	// pod can never start.
	eventually(t, time.Minute, "the Database names the pod's failure", func() string {
		got := getDatabase(t, db)
		for _, typ := range []string{dbv1.ConditionInstancesHealthy, dbv1.ConditionDegraded} {
			c := meta.FindStatusCondition(got.Status.Conditions, typ)
			if c == nil || c.Reason != "CreateContainerConfigError" || !strings.Contains(c.Message, db.Name+"-0") || !strings.Contains(c.Message, "no local match") {
				return fmt.Sprintf("%s %+v", typ, c)
			}
		}
		if got.Status.Phase != dbv1.PhaseFailed {
			return fmt.Sprintf("phase %s", got.Status.Phase)
		}
		return ""
	})
	waitEventWithin(t, db.Namespace, db.Name, "Warning InstanceFailing: "+db.Name+"-0", time.Minute)
}

// TestPodsReachTheAPIServer: a pod reaches the API server where the
// kubelet's environment says (KUBERNETES_SERVICE_HOST and _PORT), trusts
// it by its service account's CA and is known by its token.
func TestPodsReachTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueNamespace(t)}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	t.Cleanup(func() { logPods(t, ns.Name) })
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "client"}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](2),
		Containers: []corev1.Container{{Name: "database", Image: "postgres:15", Command: []string{"sh", "-c",
			`curl -sS --cacert ` + sa + `/ca.crt -H "Authorization: Bearer $(cat ` + sa + `/token)" ` +
				`"https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat ` + sa + `/namespace)/pods/client"`}}},
	}}
	// The default ServiceAccount may be a moment behind the namespace.
	eventually(t, 30*time.Second, "the pod created", func() string {
		if err := k8s.Create(ctx, pod); err != nil {
			return err.Error()
		}
		return ""
	})
	eventually(t, time.Minute, "the pod done", func() string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err.Error()
		}
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			return string(pod.Status.Phase)
		}
		return ""
	})
	log, err := node.Logs(ns.Name, "client", "database", false)
	if err != nil {
		t.Fatal(err)
	}
	// Authenticated as its service account, which may not read pods: a
	// Forbidden that names it proves the API server knew the token.
	if !strings.Contains(string(log), "system:serviceaccount:"+ns.Name+":default") {
		t.Errorf("the pod did not reach the API server as its service account:\n%s", log)
	}
}

// uniqueNamespace names a namespace for one run of a test (-count=N never
// meets one that is still terminating).
func uniqueNamespace(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
}

func createDatabase(t testing.TB, name string, e dbv1.Engine, version string, replicas int32, mutate ...func(*dbv1.Database)) *dbv1.Database {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueNamespace(t)}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: dbv1.DatabaseSpec{Engine: e, Version: version, Replicas: replicas,
			Storage:        dbv1.StorageSpec{Size: resource.MustParse("1Gi")},
			DeletionPolicy: dbv1.DeletionPolicyDelete},
	}
	for _, m := range mutate {
		m(db)
	}
	if err := k8s.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logPods(t, ns.Name) })
	return db
}

// logPods puts the pods' states and logs into a failed test's output.
func logPods(t testing.TB, ns string) {
	if !t.Failed() {
		return
	}
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	if evs, err := cs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s/%s %s: %s", e.EventTime.Format(time.TimeOnly), e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		}
	}
	for _, p := range pods.Items {
		for uid, log := range node.DeletedLogs(p.Namespace, p.Name, "database") {
			t.Logf("--- %s (deleted incarnation %s)/database log:\n%s", p.Name, uid, tail(agentLines(string(log)), 4000))
		}
		t.Logf("pod %s: phase %s, node %q, statuses %+v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.ContainerStatuses)
		for _, c := range p.Spec.Containers {
			if log, err := node.Logs(p.Namespace, p.Name, c.Name, false); err == nil {
				t.Logf("--- %s/%s log:\n%s", p.Name, c.Name, tail(string(log), 3000))
			}
		}
	}
}

// agentLines are the agent's lines of a database container's log (the
// server's own lines are many).
func agentLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "agent:") || strings.Contains(l, "-start:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func waitRunning(t testing.TB, db *dbv1.Database, replicas int32, timeout time.Duration) *dbv1.Database {
	t.Helper()
	got := &dbv1.Database{}
	eventually(t, timeout, fmt.Sprintf("%s Running with %d ready", db.Name, replicas), func() string {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != dbv1.PhaseRunning || got.Status.ReadyReplicas != replicas {
			return fmt.Sprintf("phase %q, %d ready, conditions %+v", got.Status.Phase, got.Status.ReadyReplicas, got.Status.Conditions)
		}
		return ""
	})
	return got
}

// checkReadyVerified: the operator asked the primary's server, and said so.
func checkReadyVerified(t testing.TB, db *dbv1.Database) {
	t.Helper()
	eventually(t, 30*time.Second, "Ready saying the primary serves writes", func() string {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(db), db); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.HasSuffix(c.Message, "primary "+db.Status.CurrentPrimary+" serves writes") {
			return fmt.Sprintf("Ready %+v", c)
		}
		return ""
	})
}

func credentials(t testing.TB, db *dbv1.Database) (user, password string) {
	t.Helper()
	s, err := cs.CoreV1().Secrets(db.Namespace).Get(context.Background(), db.Name+"-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data["username"]), string(s.Data["password"])
}

// clusterResolver resolves names through the node's DNS, as a pod does.
func clusterResolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", net.JoinHostPort(node.IP().String(), "53"))
	}}
}

// pgConnect opens a PostgreSQL session on host:port as user, to the
// postgres database.
func pgConnect(ctx context.Context, host string, port int, user, password string, timeout time.Duration) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = host, uint16(port), user, password, "postgres"
	cfg.ConnectTimeout = timeout
	cfg.TLSConfig, cfg.Fallbacks = pgTLS(), nil
	return pgx.ConnectConfig(ctx, cfg)
}

// pgTLS is the test clients' TLS for PostgreSQL: see mariaDBConfig.
// (ParseConfig("") leaves TLS off: its first host is the local socket.)
func pgTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test plumbing; checkTLS verifies
}

// mariaDBConfig is a client configuration for host:3306 as user. The
// servers take TLS only; these clients reach pods and Services by address
// and do not check the certificate (as pgx's default sslmode=prefer does
// not): checkTLS is where clients verify it, as applications do.
func mariaDBConfig(host, user, password string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = user, password, "tcp", net.JoinHostPort(host, "3306")
	cfg.TLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test plumbing; checkTLS verifies
	return cfg
}

// openMariaDB opens a pool from cfg, closed when the test ends.
func openMariaDB(t testing.TB, cfg *mysql.Config) *sql.DB {
	t.Helper()
	// A connector, not a DSN: a DSN cannot carry a *tls.Config.
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := sql.OpenDB(connector)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// resolveOne resolves a Service's name through the node's DNS, as a pod
// would, and returns its one address.
func resolveOne(t testing.TB, service, ns string) string {
	t.Helper()
	r := clusterResolver()
	name := fmt.Sprintf("%s.%s.svc.cluster.local", service, ns)
	var addrs []string
	eventually(t, 30*time.Second, "one address for "+name, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if addrs, err = r.LookupHost(ctx, name); err != nil {
			return err.Error()
		}
		if len(addrs) != 1 {
			return fmt.Sprintf("addresses %v", addrs)
		}
		return ""
	})
	return addrs[0]
}

// claimDir is where the node keeps a claim's data.
func claimDir(t testing.TB, ns, claim string) string {
	t.Helper()
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil {
		t.Fatalf("volume %s of %s is not the node's", pv.Name, claim)
	}
	return pv.Spec.Local.Path
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	poll.Eventually(t, 200*time.Millisecond, timeout, what, cond)
}
