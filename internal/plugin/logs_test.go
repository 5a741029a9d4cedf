package plugin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	dbv1 "example.com/database-operator/api/v1"
)

func TestFormatLine(t *testing.T) {
	for _, tc := range []struct{ name, line, want string }{{
		name: "PostgreSQL jsonlog with detail",
		line: `{"timestamp":"2026-12-06 17:57:58.123 UTC","user":"app","dbname":"app","pid":4242,"remote_host":"127.0.0.1",` +
			`"session_id":"6751b3a6.1092","line_num":3,"ps":"INSERT","session_start":"2026-12-06 17:57:50 UTC","vxid":"3/7","txid":0,` +
			`"error_severity":"ERROR","state_code":"23505","message":"duplicate key value violates unique constraint \"orders_pkey\"",` +
			`"detail":"Key (id)=(1) already exists.","statement":"INSERT INTO orders\nVALUES (1)","application_name":"psql",` +
			`"backend_type":"client backend","query_id":0}`,
		want: `2026-12-06 17:57:58.123 UTC ERROR duplicate key value violates unique constraint "orders_pkey" ` +
			`(detail: Key (id)=(1) already exists.; statement: INSERT INTO orders\nVALUES (1))`,
	}, {
		name: "PostgreSQL jsonlog without detail",
		line: `{"timestamp":"2026-12-06 17:57:58.123 UTC","pid":1,"error_severity":"LOG","message":"database system is ready to accept connections","backend_type":"postmaster"}`,
		want: `2026-12-06 17:57:58.123 UTC LOG database system is ready to accept connections`,
	}, {
		name: "structured logger",
		line: `{"ts":"2026-12-06T17:57:58Z","level":"error","msg":"renewing the Lease","error":"timeout","lease":"orders-primary"}`,
		want: `2026-12-06T17:57:58Z error renewing the Lease (error: timeout)`,
	}, {
		name: "JSON without the expected keys",
		line: `{"zeta":"two words","alpha":1,"nested":{"a":[1,2]},"ok":true,"none":null}`,
		want: `alpha=1 nested={"a":[1,2]} none=null ok=true zeta="two words"`,
	}, {
		name: "JSON with a time and a severity, no message",
		line: `{"time":"17:57:58","severity":"WARNING","rows":12}`,
		want: `17:57:58 WARNING rows=12`,
	}, {
		name: "the agent's key-value line",
		line: `agent: "ts"="2026-12-06 17:57:58.123456" "level"=0 "msg"="holding the primary Lease"`,
		want: `agent: "ts"="2026-12-06 17:57:58.123456" "level"=0 "msg"="holding the primary Lease"`,
	}, {
		name: "plain text",
		line: `2026-12-06 17:57:58.123 UTC [1] LOG:  starting PostgreSQL 17.2`,
		want: `2026-12-06 17:57:58.123 UTC [1] LOG:  starting PostgreSQL 17.2`,
	}, {
		name: "not JSON after all",
		line: `{"message": "cut short`,
		want: `{"message": "cut short`,
	}, {
		name: "two JSON objects",
		line: `{"message":"a"} {"message":"b"}`,
		want: `{"message":"a"} {"message":"b"}`,
	}, {
		name: "empty object",
		line: `{}`,
		want: `{}`,
	}, {
		name: "empty line",
		line: ``,
		want: ``,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatLine(tc.line); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestSplitTimestamp(t *testing.T) {
	ts, text, ok := splitTimestamp("2026-12-06T17:57:58.123456789Z hello world")
	if !ok || text != "hello world" || ts.Nanosecond() != 123456789 {
		t.Errorf("got %v %q %v", ts, text, ok)
	}
	if _, text, ok := splitTimestamp("hello world"); ok || text != "hello world" {
		t.Errorf("no timestamp: got %q %v", text, ok)
	}
	if _, text, ok := splitTimestamp("2026-12-06T17:57:58Z"); !ok || text != "" {
		t.Errorf("empty line: got %q %v", text, ok)
	}
}

func TestMergeLogs(t *testing.T) {
	readErr := errors.New("connection reset")
	sources := []logSource{
		{Name: "orders-0", R: strings.NewReader(
			"2026-12-06T17:00:01Z zero first\n" +
				"2026-12-06T17:00:03Z zero second\n" +
				"a line without a timestamp\n" +
				"2026-12-06T17:00:05.5Z zero last, no newline")},
		{Name: "orders-1", R: strings.NewReader(
			"2026-12-06T17:00:00.999Z one first\n" +
				"2026-12-06T17:00:03Z one same time as zero second\n" +
				"2026-12-06T17:00:04Z one third\r\n")},
		{Name: "orders-2", R: io.MultiReader(strings.NewReader("2026-12-06T17:00:02Z two then fails\n"), iotest.ErrReader(readErr))},
		{Name: "orders-3", R: strings.NewReader("")},
	}
	var got []string
	failed := mergeLogs(sources, func(name, text string) { got = append(got, name+" | "+text) })
	want := []string{
		"orders-1 | one first",
		"orders-0 | zero first",
		"orders-2 | two then fails",
		"orders-0 | zero second",
		"orders-0 | a line without a timestamp",
		"orders-1 | one same time as zero second",
		"orders-1 | one third",
		"orders-0 | zero last, no newline",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("merged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(failed) != 1 || !errors.Is(failed["orders-2"], readErr) {
		t.Errorf("failed %v, want orders-2's read error", failed)
	}
}

func TestFollowLogs(t *testing.T) {
	var out, errOut bytes.Buffer
	p := newLogPrinter(&out, &errOut, []string{"orders-0", "orders-10"})
	followLogs(context.Background(), []logSource{
		{Name: "orders-0", R: strings.NewReader("2026-12-06T17:00:01Z {\"message\":\"hi\",\"error_severity\":\"LOG\"}\n")},
		{Name: "orders-10", R: io.MultiReader(strings.NewReader("2026-12-06T17:00:00Z plain\n"), iotest.ErrReader(errors.New("gone")))},
	}, p)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// Each source is read on its own: their lines in any order.
	if len(lines) != 2 || !contains(lines, "orders-0  | LOG hi") || !contains(lines, "orders-10 | plain") {
		t.Errorf("output:\n%s", out.String())
	}
	if errOut.String() != "orders-10: reading its log: gone\n" {
		t.Errorf("errors: %q", errOut.String())
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

func TestLogsCommand(t *testing.T) {
	db := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0")
	instance := func(name string) *corev1.Pod { return testPod(name, "orders", "replica", true) }
	backupPod := testPod("orders-backup-x7k2p", "orders", "", true)
	backupPod.Labels[labelName] = "database-backup"
	o, out, errOut := testOptions(db, instance("orders-10"), instance("orders-2"), instance("orders-0"), backupPod)

	// The fake answers the logs of the pods in the order they are asked:
	// by ordinal, orders-2 failing.
	logs := []string{
		"2026-12-06T17:00:02Z zero second\n2026-12-06T17:00:04Z {\"timestamp\":\"17:00:04\",\"error_severity\":\"FATAL\",\"message\":\"bye\"}\n",
		"",
		"2026-12-06T17:00:01Z ten first\n2026-12-06T17:00:03Z ten third\n",
	}
	var calls atomic.Int32
	var opts []*corev1.PodLogOptions
	kube := o.clients.Kube.(*kubefake.Clientset)
	kube.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		opts = append(opts, a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions))
		i := calls.Add(1) - 1
		if i == 1 {
			return true, nil, errors.New("container not found")
		}
		return true, &runtime.Unknown{Raw: []byte(logs[i])}, nil
	})
	if err := run(o, newLogsCommand, "orders", "--tail", "20", "--since", "90s", "-c", "agent-binary"); err != nil {
		t.Fatal(err)
	}
	want := "orders-10 | ten first\n" +
		"orders-0  | zero second\n" +
		"orders-10 | ten third\n" +
		"orders-0  | 17:00:04 FATAL bye\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(errOut.String(), "orders-2: reading its log: ") || !strings.Contains(errOut.String(), "container not found") {
		t.Errorf("errors: %q, want orders-2's", errOut)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d logs read, want 3 (the backup pod's not)", calls.Load())
	}
	o0 := opts[0]
	if !o0.Timestamps || o0.Container != "agent-binary" || o0.TailLines == nil || *o0.TailLines != 20 ||
		o0.SinceSeconds == nil || *o0.SinceSeconds != 90 || o0.Follow || o0.Previous {
		t.Errorf("log options %+v", o0)
	}
}

func TestLogsBadInput(t *testing.T) {
	db := testDatabase("orders", dbv1.EnginePostgreSQL, "")
	db.Status.Phase = dbv1.PhasePending
	for _, tc := range []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{name: "unknown Database", args: []string{"nope"}, want: `no Database "nope" in namespace "shop"`},
		{name: "no pods", args: []string{"orders"}, want: "the Database orders has no instance pods (phase Pending)"},
		{name: "bad tail", args: []string{"orders", "--tail", "-2"}, want: "--tail -2", usage: true},
		{name: "bad since", args: []string{"orders", "--since", "-1m"}, want: "--since -1m0s", usage: true},
		{name: "two names", args: []string{"orders", "other"}, want: "want the Database's NAME, got 2", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, _ := testOptions(db)
			err := run(o, newLogsCommand, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if usage := errors.As(err, new(usageError)); usage != tc.usage {
				t.Errorf("usage error: %v, want %v", usage, tc.usage)
			}
		})
	}
}
