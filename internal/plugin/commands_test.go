package plugin

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubefake "k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent/metrics"
	dbfake "example.com/database-operator/pkg/client/clientset/versioned/fake"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const ns = "shop"

// now is the fixed time the tests' ages are counted from.
var now = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// orders is a three-instance PostgreSQL Database as the operator reports it.
func orders(mutate ...func(*dbv1.Database)) *dbv1.Database {
	t := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgreSQL, Replicas: 3, Storage: dbv1.StorageSpec{Size: resource.MustParse("2Gi")},
			Backup: &dbv1.BackupPolicy{Schedule: "0 3 * * *"}},
		Status: dbv1.DatabaseStatus{Phase: dbv1.PhaseRunning, Version: "15", CurrentPrimary: "orders-0", Replicas: 3, ReadyReplicas: 3,
			Endpoints: dbv1.Endpoints{ReadWrite: "orders-rw.shop.svc:5432", ReadOnly: "orders-ro.shop.svc:5432"},
			Conditions: []metav1.Condition{
				{Type: dbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "3/3 instances ready; primary orders-0 serves writes", LastTransitionTime: t(2 * time.Hour)},
				{Type: dbv1.ConditionReplicationHealthy, Status: metav1.ConditionTrue, Reason: "Streaming", Message: "every replica streams", LastTransitionTime: t(2 * time.Hour)},
			},
			Instances: []dbv1.InstanceStatus{
				{Name: "orders-0", Role: "primary", Ready: true},
				{Name: "orders-1", Role: "replica", Ready: true, Replication: dbv1.ReplicationStreaming},
				{Name: "orders-2", Role: "replica", Ready: true, Replication: dbv1.ReplicationStreaming},
			},
			LastFailover:         &dbv1.FailoverRecord{Time: t(26 * time.Hour), From: "orders-1", To: "orders-0", Reason: "orders-1 unreachable for 10s; orders-0 had replayed the most WAL"},
			LastSuccessfulBackup: ptr(t(9 * time.Hour)),
		},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func ptr[T any](v T) *T { return &v }

func backupOf(name, database string, phase dbv1.BackupPhase, ago time.Duration) *dbv1.Backup {
	return &dbv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(now.Add(-ago))},
		Spec:       dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: database}},
		Status:     dbv1.BackupStatus{Phase: phase, Size: 3 << 20, Engine: dbv1.EnginePostgreSQL, Version: "15.18 (Debian 15.18-0+deb12u1)"},
	}
}

// agentMetrics are each pod's /metrics, served through the fake pod proxy.
type agentMetrics map[string]string

// proxied is an answer of the fake pod proxy: a body, or err.
type proxied struct {
	body string
	err  error
}

func (p proxied) DoRaw(context.Context) ([]byte, error) { return []byte(p.body), p.err }
func (p proxied) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(p.body)), p.err
}

// testClients are fake clients holding objs; the pod proxy serves m.
func testClients(m agentMetrics, objs ...runtime.Object) (*Clients, *dbfake.Clientset) {
	var kubeObjs, dbObjs []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *dbv1.Database, *dbv1.Backup:
			dbObjs = append(dbObjs, o)
		default:
			kubeObjs = append(kubeObjs, o)
		}
	}
	kube := kubefake.NewClientset(kubeObjs...)
	kube.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		body, ok := m[a.(k8stesting.ProxyGetAction).GetName()]
		if !ok {
			return true, proxied{err: &proxyError{a.(k8stesting.ProxyGetAction).GetName()}}, nil
		}
		return true, proxied{body: body}, nil
	})
	db := dbfake.NewSimpleClientset(dbObjs...)
	return &Clients{Namespace: ns, Kube: kube, DB: db}, db
}

type proxyError struct{ pod string }

func (e *proxyError) Error() string { return "no agent answers on " + e.pod }

func pgMetrics(wal, lagBytes, lagSeconds float64, replica bool) string {
	var b strings.Builder
	b.WriteString("# TYPE database_instance_up gauge\ndatabase_instance_up 1\n")
	b.WriteString("# TYPE database_wal_bytes_total counter\ndatabase_wal_bytes_total " + ftoa(wal) + "\n")
	if replica {
		b.WriteString("# TYPE database_replication_lag_bytes gauge\ndatabase_replication_lag_bytes " + ftoa(lagBytes) + "\n")
		b.WriteString("# TYPE database_replication_lag_seconds gauge\ndatabase_replication_lag_seconds " + ftoa(lagSeconds) + "\n")
	}
	return b.String()
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func TestAgentMetricsPort(t *testing.T) {
	if agentMetricsPort != metrics.Port {
		t.Errorf("agentMetricsPort %d, the agent serves on %d", agentMetricsPort, metrics.Port)
	}
}

// TestStatusTable compares status's table with testdata/status.golden
// (go test -run TestStatusTable -update rewrites it).
func TestStatusTable(t *testing.T) {
	m := agentMetrics{
		"orders-0": pgMetrics(0x1_0300_0148, 0, 0, false),
		"orders-1": pgMetrics(0x1_0300_0100, 72, 0.4, true),
	} // orders-2's agent does not answer
	db := orders()
	db.Status.FirstRecoverabilityPoint = ptr(metav1.NewTime(now.Add(-9 * time.Hour)))
	db.Status.LastRecoverableTime = ptr(metav1.NewTime(now.Add(-40 * time.Second)))
	db.Spec.Backup.Verify = &dbv1.VerifyPolicy{Schedule: "30 4 * * 0"}
	db.Status.LastVerifiedTime = ptr(metav1.NewTime(now.Add(-7 * time.Hour)))
	db.Status.Conditions = append(db.Status.Conditions, metav1.Condition{Type: dbv1.ConditionBackupVerified, Status: metav1.ConditionTrue,
		Reason: "Verified", Message: "restore drill orders-202612060430-drill recovered Backup orders-old", LastTransitionTime: metav1.NewTime(now.Add(-7 * time.Hour))})
	c, _ := testClients(m, db, backupOf("orders-new", "orders", dbv1.BackupRunning, time.Minute),
		backupOf("orders-old", "orders", dbv1.BackupCompleted, 9*time.Hour), backupOf("other", "billing", dbv1.BackupCompleted, time.Hour))
	v, err := c.statusOf(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := v.write(&out, "", now); err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/status.golden", out.String())
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, got)
	}
}

func TestSwitchoverRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, instance, want string
		mutate               func(*dbv1.Database)
	}{
		{"during a failover", "orders-1", "a failover of orders is under way: its primary orders-0 has been unhealthy since 2026-12-06T11:59:30Z",
			func(db *dbv1.Database) {
				db.Status.PrimaryUnhealthySince = ptr(metav1.NewTime(now.Add(-30 * time.Second)))
			}},
		{"not an instance", "orders-7", "orders-7 is not an instance of Database orders (its instances: orders-0, orders-1, orders-2)", nil},
		{"the primary", "0", "orders-0 is the primary already", nil},
		{"not ready", "orders-2", "orders-2 is not ready: the operator only promotes a ready replica",
			func(db *dbv1.Database) { db.Status.Instances[2].Ready = false }},
		{"one instance", "", "the Database orders has one instance: there is no replica to switch over to (scale it up first)",
			func(db *dbv1.Database) { db.Spec.Replicas = 1 }},
		{"another under way", "orders-1", "a switchover of orders to orders-2 is under way already (spec.primary); wait for it to end",
			func(db *dbv1.Database) { db.Spec.Primary = "orders-2" }},
		{"no primary", "", "the Database orders has no primary yet (phase Provisioning)",
			func(db *dbv1.Database) { db.Status.CurrentPrimary, db.Status.Phase = "", dbv1.PhaseProvisioning }},
		{"no replica streams", "", "the Database orders has no ready, streaming replica to switch over to (see kubectl database status orders)",
			func(db *dbv1.Database) {
				db.Status.Instances[1].Replication = dbv1.ReplicationStopped
				db.Status.Instances[2].Ready = false
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mutate []func(*dbv1.Database)
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			c, fake := testClients(agentMetrics{}, orders(mutate...))
			err := c.switchover(context.Background(), io.Discard, "orders", tc.instance, false)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			for _, a := range fake.Actions() {
				if a.GetVerb() == "patch" {
					t.Errorf("the Database was patched: %v", a)
				}
			}
		})
	}
}

// TestSwitchoverChoosesTheMostAdvancedReplica: without an instance, the
// replica that replayed the most WAL is chosen, whatever its ordinal.
func TestSwitchoverChoosesTheMostAdvancedReplica(t *testing.T) {
	m := agentMetrics{
		"orders-1": pgMetrics(1000, 500, 1, true),
		"orders-2": pgMetrics(1400, 100, 0.2, true),
	}
	c, _ := testClients(m, orders())
	var out bytes.Buffer
	if err := c.switchover(context.Background(), &out, "orders", "", false); err != nil {
		t.Fatal(err)
	}
	db, err := c.database(context.Background(), "orders")
	if err != nil || db.Spec.Primary != "orders-2" {
		t.Errorf("spec.primary %q (err %v), want orders-2; said:\n%s", db.Spec.Primary, err, out.String())
	}
}

func TestBackupCreatesABackup(t *testing.T) {
	c, _ := testClients(nil, orders())
	if err := c.backup(context.Background(), io.Discard, "orders", "nightly", false); err != nil {
		t.Fatal(err)
	}
	b, err := c.DB.ExampleV1().Backups(ns).Get(context.Background(), "nightly", metav1.GetOptions{})
	if err != nil || b.Spec.Database.Name != "orders" {
		t.Errorf("Backup %+v (err %v)", b, err)
	}
	if err := c.backup(context.Background(), io.Discard, "nothere", "", false); err == nil || err.Error() != `no Database "nothere" in namespace "shop"` {
		t.Errorf("a backup of a missing Database: %v", err)
	}
}

func TestRestore(t *testing.T) {
	failed := backupOf("broken", "orders", dbv1.BackupFailed, time.Hour)
	failed.Status.Reason = dbv1.ReasonJobFailed
	done := backupOf("good", "orders", dbv1.BackupCompleted, time.Hour)
	gone := backupOf("orphan", "deleted", dbv1.BackupCompleted, time.Hour)
	physical := backupOf("physical", "orders", dbv1.BackupCompleted, time.Hour)
	physical.Status.Method, physical.Status.ArchivePath = dbv1.BackupPhysical, "shop/orders/_wal/u"
	c, _ := testClients(nil, orders(), failed, done, gone, physical)
	ctx := context.Background()
	for _, tc := range []struct {
		backup string
		ro     restoreOptions
		want   string
	}{
		{"broken", restoreOptions{to: "copy"}, "the Backup broken is Failed (JobFailed): only a Completed backup can be restored"},
		{"nothere", restoreOptions{to: "copy"}, `no Backup "nothere" in namespace "shop"`},
		{"good", restoreOptions{to: "orders"}, "the Database orders exists already: restore into a new name"},
		{"orphan", restoreOptions{to: "copy"}, "the source Database deleted is gone: give --storage-size"},
		{"good", restoreOptions{to: "copy", storageSize: "lots"}, `--storage-size "lots": quantities must match`},
		{"good", restoreOptions{to: "copy", targetTime: "2026-12-06T12:00:00Z"}, "the Backup good cannot be recovered to a moment"},
		{"physical", restoreOptions{to: "copy", targetTime: "noon"}, `recoveryTarget.time "noon" is not an RFC 3339 time`},
		{"physical", restoreOptions{to: "copy", targetLSN: "0/3000000", targetName: "x"}, "give one of --target-time, --target-lsn and --target-name"},
	} {
		if err := c.restore(ctx, io.Discard, tc.backup, tc.ro); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("restore %s %+v: %v, want %q", tc.backup, tc.ro, err, tc.want)
		}
	}

	if err := c.restore(ctx, io.Discard, "good", restoreOptions{to: "copy", replicas: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := c.database(ctx, "copy")
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Spec; s.Engine != dbv1.EnginePostgreSQL || s.Version != "15" || s.Replicas != 1 || s.Storage.Size.String() != "2Gi" ||
		s.Bootstrap == nil || s.Bootstrap.Backup == nil || s.Bootstrap.Backup.Name != "good" {
		t.Errorf("restored Database's spec %+v", s)
	}
	if err := c.restore(ctx, io.Discard, "physical", restoreOptions{to: "at-noon", targetTime: "2026-12-06T12:00:00.25Z"}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.database(ctx, "at-noon"); err != nil || got.Spec.Bootstrap.RecoveryTarget == nil || got.Spec.Bootstrap.RecoveryTarget.Time != "2026-12-06T12:00:00.25Z" {
		t.Errorf("recovered to a moment: %+v (err %v)", got.Spec.Bootstrap, err)
	}
	if err := c.restore(ctx, io.Discard, "orphan", restoreOptions{to: "adopted", storageSize: "5Gi"}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.database(ctx, "adopted"); err != nil || got.Spec.Storage.Size.String() != "5Gi" || got.Spec.Replicas != 1 {
		t.Errorf("restored without a source: %+v (err %v)", got, err)
	}
}

// TestExitCodes: a wrong command line exits 2 with its reason, a missing
// kubeconfig 1 with what to do.
func TestExitCodes(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status"}, ExitUsage, "error: want the Database's name, got 0 argument(s)"},
		{[]string{"status", "a", "b"}, ExitUsage, "error: want the Database's name, got 2 argument(s)"},
		{[]string{"status", "orders", "--bogus"}, ExitUsage, "error: unknown flag: --bogus"},
		{[]string{"status", "orders", "-o", "wide"}, ExitUsage, `error: --output "wide": want json or yaml`},
		{[]string{"restore", "good"}, ExitUsage, "error: --to NEW_NAME is required"},
		{[]string{"status", "orders"}, ExitFailed, "error: no kubeconfig: give --kubeconfig, set KUBECONFIG, or write ~/.kube/config"},
		{[]string{"nonsense"}, ExitUsage, `error: unknown command "nonsense"`},
	} {
		var out, errOut bytes.Buffer
		code := Main(tc.args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		if code != tc.code || !strings.HasPrefix(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, said %q; want %d, %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	c, _ := testClients(nil, orders(func(db *dbv1.Database) {
		db.Status.Instances[2].Ready = false
		db.Status.Instances[2].Failure = &dbv1.InstanceFailure{Reason: "CrashLoopBackOff"}
	}))
	var out bytes.Buffer
	if err := c.listDatabases(context.Background(), &out, ns); err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/list.golden", out.String())

	out.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.watchDatabases(ctx, &out, ns); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  shop/orders  postgresql 15 Running  3/3 ready  primary orders-0  orders-0 primary, orders-1 replica, orders-2 replica not ready (CrashLoopBackOff)\n") {
		t.Errorf("watch printed:\n%s", out.String())
	}
}

func TestReleaseOf(t *testing.T) {
	for _, tc := range []struct {
		engine      dbv1.Engine
		version, in string
	}{
		{dbv1.EnginePostgreSQL, "15", "15.18 (Debian 15.18-0+deb12u1)"},
		{dbv1.EnginePostgreSQL, "17", "17.2"},
		{dbv1.EngineMariaDB, "10.11", "10.11.6-MariaDB-0+deb12u1-log"},
		{dbv1.EngineMySQL, "8.4", "8.4.3"},
		{dbv1.EngineMariaDB, "", ""},
	} {
		if got := releaseOf(tc.engine, tc.in); got != tc.version {
			t.Errorf("releaseOf(%s, %q) = %q, want %q", tc.engine, tc.in, got, tc.version)
		}
	}
}
