package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubefake "k8s.io/client-go/kubernetes/fake"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
	dbfake "example.com/database-operator/pkg/client/clientset/versioned/fake"
)

const testPassword = "pa55-w0rd-s3cret"

// testOptions are Options on fake clients holding objs, in namespace shop,
// and the buffers of their output and error streams.
func testOptions(objs ...runtime.Object) (*Options, *bytes.Buffer, *bytes.Buffer) {
	var dbObjs, kubeObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*dbv1.Database); ok {
			dbObjs = append(dbObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
	o := &Options{
		ConfigFlags: genericclioptions.NewConfigFlags(true),
		IOStreams:   genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut},
		Timeout:     time.Minute,
		clients: &Clients{
			Namespace: "shop",
			DB:        dbfake.NewSimpleClientset(dbObjs...),
			Kube:      kubefake.NewSimpleClientset(kubeObjs...),
		},
	}
	return o, out, errOut
}

// run runs cmd of o with args.
func run(o *Options, newCmd func(*Options) *cobra.Command, args ...string) error {
	cmd := newCmd(o)
	cmd.SetArgs(args)
	cmd.SetOut(o.Out)
	cmd.SetErr(o.ErrOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	return cmd.ExecuteContext(context.Background())
}

func testDatabase(name string, e dbv1.Engine, primary string, instances ...dbv1.InstanceStatus) *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec:       dbv1.DatabaseSpec{Engine: e},
		Status: dbv1.DatabaseStatus{
			Phase: dbv1.PhaseRunning, CurrentPrimary: primary, Instances: instances,
			Replicas: int32(len(instances)), ReadyReplicas: int32(len(instances)),
		},
	}
}

// testAppSecret is the Secret the operator writes for the Database name.
func testAppSecret(name, scheme, port string) *corev1.Secret {
	host := name + "-rw.shop.svc"
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-app", Namespace: "shop"},
		Data: map[string][]byte{
			"username": []byte("app"), "password": []byte(testPassword), "database": []byte("app"),
			"host": []byte(host), "port": []byte(port),
			"uri": []byte(scheme + "://app:" + testPassword + "@" + host + ":" + port + "/app"),
		},
	}
}

func testPod(name, db, role string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{
			labelName: chartName, labelInstance: db, labelRole: role,
		}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func TestEngineClientsAreTheProfiles(t *testing.T) {
	for _, e := range []dbv1.Engine{dbv1.EnginePostgreSQL, dbv1.EngineMySQL, dbv1.EngineMariaDB, "unknown"} {
		p, ec := engine.ProfileOf(e), engineClientOf(e)
		if ec.Programs[0] != p.Client || ec.Port != p.Port || ec.PortName != p.PortName || ec.Scheme != p.Scheme {
			t.Errorf("%s: plugin's client %+v, engine's profile %+v (client %s, port %d %s, scheme %s)",
				e, ec, p, p.Client, p.Port, p.PortName, p.Scheme)
		}
	}
	if got := engineClientOf(dbv1.EngineMariaDB).Programs; !slices.Equal(got, []string{"mariadb", "mysql"}) {
		t.Errorf("MariaDB's clients %v, want mariadb then mysql", got)
	}
}

func TestConnectPrint(t *testing.T) {
	postgres := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0",
		dbv1.InstanceStatus{Name: "orders-0", Role: "primary", Ready: true},
		dbv1.InstanceStatus{Name: "orders-1", Role: "replica", Ready: true})
	mariadb := testDatabase("catalog", dbv1.EngineMariaDB, "catalog-1",
		dbv1.InstanceStatus{Name: "catalog-0", Role: "replica", Ready: true},
		dbv1.InstanceStatus{Name: "catalog-1", Role: "primary", Ready: true})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{{
		name: "postgresql",
		args: []string{"orders", "--print"},
		want: `In the cluster: postgresql://app:****@orders-rw.shop.svc:5432/app
Password:       kubectl get secret orders-app -n shop -o jsonpath='{.data.password}' | base64 -d
From here:      kubectl port-forward -n shop pod/orders-0 5432:5432
and meanwhile:  psql -h 127.0.0.1 -p 5432 -U app app   (the password at its prompt, or in PGPASSWORD)
`,
	}, {
		name: "postgresql replica",
		args: []string{"orders", "--print", "--replica"},
		want: `In the cluster: postgresql://app:****@orders-ro.shop.svc:5432/app
Password:       kubectl get secret orders-app -n shop -o jsonpath='{.data.password}' | base64 -d
From here:      kubectl port-forward -n shop pod/orders-1 5432:5432
and meanwhile:  psql -h 127.0.0.1 -p 5432 -U app app   (the password at its prompt, or in PGPASSWORD)
`,
	}, {
		name: "mariadb",
		args: []string{"catalog", "--print"},
		want: `In the cluster: mysql://app:****@catalog-rw.shop.svc:3306/app
Password:       kubectl get secret catalog-app -n shop -o jsonpath='{.data.password}' | base64 -d
From here:      kubectl port-forward -n shop pod/catalog-1 3306:3306
and meanwhile:  mariadb -h 127.0.0.1 -P 3306 -u app app   (the password at its prompt, or in MYSQL_PWD)
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			o, out, _ := testOptions(postgres, mariadb, testAppSecret("orders", "postgresql", "5432"), testAppSecret("catalog", "mysql", "3306"))
			if err := run(o, newConnectCommand, tc.args...); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
			if strings.Contains(out.String(), testPassword) {
				t.Error("the password is printed without --show-password")
			}

			out.Reset()
			if err := run(o, newConnectCommand, append(tc.args, "--show-password")...); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "://app:"+testPassword+"@") {
				t.Errorf("--show-password: no password in the connection string:\n%s", out)
			}
		})
	}
}

func TestConnectPrintKubectlFlags(t *testing.T) {
	o, out, _ := testOptions(testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0"), testAppSecret("orders", "postgresql", "5432"))
	kctx, kubeconfig := "kind-dev", "/home/me/my configs/kube"
	o.ConfigFlags.Context, o.ConfigFlags.KubeConfig = &kctx, &kubeconfig
	if err := run(o, newConnectCommand, "orders", "--print"); err != nil {
		t.Fatal(err)
	}
	want := "kubectl port-forward -n shop --context kind-dev --kubeconfig '/home/me/my configs/kube' pod/orders-0 5432:5432"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output:\n%s\nwant a line with %s", out, want)
	}
}

func TestConnectBadInput(t *testing.T) {
	noPrimary := testDatabase("orders", dbv1.EnginePostgreSQL, "")
	noPrimary.Status.Phase = dbv1.PhaseProvisioning
	noReplica := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0",
		dbv1.InstanceStatus{Name: "orders-0", Role: "primary", Ready: true},
		dbv1.InstanceStatus{Name: "orders-1", Role: "replica", Ready: false})
	secret := testAppSecret("orders", "postgresql", "5432")
	for _, tc := range []struct {
		name  string
		objs  []runtime.Object
		args  []string
		want  string
		usage bool
	}{
		{name: "unknown Database", args: []string{"nope", "--print"}, want: `no Database "nope" in namespace "shop"`},
		{name: "no primary", objs: []runtime.Object{noPrimary, secret}, args: []string{"orders", "--print"},
			want: "the Database orders has no primary yet (phase Provisioning)"},
		{name: "no ready replica", objs: []runtime.Object{noReplica, secret, testPod("orders-1", "orders", "replica", false)},
			args: []string{"orders", "--replica", "--print"}, want: "the Database orders has no ready replica"},
		{name: "no Secret", objs: []runtime.Object{noReplica}, args: []string{"orders", "--print"},
			want: "the application account's Secret orders-app does not exist yet: the operator creates it once the Database runs"},
		{name: "no name", args: []string{"--print"}, want: "want the Database's NAME, got 0", usage: true},
		{name: "no name before --", args: []string{"--", "orders"}, want: "want the Database's NAME, got 0", usage: true},
		{name: "--show-password alone", args: []string{"orders", "--show-password"}, want: "--show-password goes with --print", usage: true},
		{name: "--print with client arguments", args: []string{"orders", "--print", "--", "-c", "SELECT 1"}, want: "which --print does not run", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, out, _ := testOptions(tc.objs...)
			err := run(o, newConnectCommand, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if usage := errors.As(err, new(usageError)); usage != tc.usage {
				t.Errorf("usage error: %v, want %v", usage, tc.usage)
			}
			if strings.Contains(out.String(), testPassword) {
				t.Error("the password is printed")
			}
		})
	}
}

func TestTargetPod(t *testing.T) {
	ctx := context.Background()
	withStatus := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-1",
		dbv1.InstanceStatus{Name: "orders-0", Role: "replica", Ready: false},
		dbv1.InstanceStatus{Name: "orders-1", Role: "primary", Ready: true},
		dbv1.InstanceStatus{Name: "orders-2", Role: "replica", Ready: true},
		dbv1.InstanceStatus{Name: "orders-3", Role: "replica", Ready: true})
	t.Run("primary", func(t *testing.T) {
		o, _, _ := testOptions()
		if pod, err := o.clients.targetPod(ctx, withStatus, false); err != nil || pod != "orders-1" {
			t.Errorf("got %q, %v; want orders-1", pod, err)
		}
	})
	t.Run("replica from the status", func(t *testing.T) {
		o, _, _ := testOptions()
		if pod, err := o.clients.targetPod(ctx, withStatus, true); err != nil || pod != "orders-2" {
			t.Errorf("got %q, %v; want orders-2, the first ready replica", pod, err)
		}
	})
	t.Run("replica from the pods", func(t *testing.T) {
		db := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0")
		o, _, _ := testOptions(
			testPod("orders-0", "orders", "primary", true),
			testPod("orders-1", "orders", "replica", false),
			testPod("orders-2", "orders", "replica", true),
			testPod("other-1", "other", "replica", true),
		)
		if pod, err := o.clients.targetPod(ctx, db, true); err != nil || pod != "orders-2" {
			t.Errorf("got %q, %v; want orders-2, the ready replica pod", pod, err)
		}
	})
	t.Run("no ready replica", func(t *testing.T) {
		db := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0",
			dbv1.InstanceStatus{Name: "orders-0", Role: "primary", Ready: true},
			dbv1.InstanceStatus{Name: "orders-1", Role: "replica", Ready: false})
		o, _, _ := testOptions(testPod("orders-0", "orders", "primary", true), testPod("orders-1", "orders", "replica", false))
		if pod, err := o.clients.targetPod(ctx, db, true); err == nil || !strings.Contains(err.Error(), "no ready replica") {
			t.Errorf("got %q, %v; want no ready replica", pod, err)
		}
	})
}

func TestServerPort(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "database", Ports: []corev1.ContainerPort{{Name: "agent", ContainerPort: 8011}, {Name: "postgresql", ContainerPort: 6543}},
	}}}}
	if got := serverPort(p, engineClientOf(dbv1.EnginePostgreSQL)); got != 6543 {
		t.Errorf("port %d, want the pod's 6543", got)
	}
	if got := serverPort(&corev1.Pod{}, engineClientOf(dbv1.EngineMariaDB)); got != 3306 {
		t.Errorf("port %d, want the default 3306", got)
	}
}

func TestClientCommand(t *testing.T) {
	cr := credentials{User: "app", Password: testPassword, Database: "shopdb"}
	env := []string{"PATH=/usr/bin", "PGPASSWORD=stale", "HOME=/home/me"}
	for _, tc := range []struct {
		engine   dbv1.Engine
		path     string
		host     string
		wantArgs []string
		wantEnv  string
	}{
		{dbv1.EnginePostgreSQL, "/usr/bin/psql", "127.0.0.1",
			[]string{"/usr/bin/psql", "-h", "127.0.0.1", "-p", "40123", "-U", "app", "-d", "shopdb", "-c", "SELECT 1"}, "PGPASSWORD"},
		{dbv1.EngineMariaDB, "/usr/bin/mariadb", "::1",
			[]string{"/usr/bin/mariadb", "-h", "::1", "-P", "40123", "-u", "app", "-D", "shopdb", "-c", "SELECT 1"}, "MYSQL_PWD"},
	} {
		t.Run(string(tc.engine), func(t *testing.T) {
			cmd := clientCommand(engineClientOf(tc.engine), tc.path, env, tc.host, 40123, cr, []string{"-c", "SELECT 1"})
			if cmd.Path != tc.path || !slices.Equal(cmd.Args, tc.wantArgs) {
				t.Errorf("command %s %q, want %q", cmd.Path, cmd.Args, tc.wantArgs)
			}
			for _, a := range cmd.Args {
				if strings.Contains(a, testPassword) {
					t.Errorf("the password is on the command line: %q", cmd.Args)
				}
			}
			// The last of a variable wins (os/exec): the Secret's password.
			if last := cmd.Env[len(cmd.Env)-1]; last != tc.wantEnv+"="+testPassword {
				t.Errorf("environment ends with %q, want the password in %s", last, tc.wantEnv)
			}
			if !slices.Equal(cmd.Env[:len(env)], env) {
				t.Errorf("environment %q, want the plugin's %q first", cmd.Env, env)
			}
			if len(env) != 3 || env[1] != "PGPASSWORD=stale" {
				t.Errorf("the plugin's environment changed: %q", env)
			}
		})
	}
}

func TestRunClientExitCode(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	var out bytes.Buffer
	err = runClient(exec.Command(sh, "-c", "echo hello; exit 3"), "psql", strings.NewReader(""), &out, &out)
	var exit exitCodeError
	if !errors.As(err, &exit) || exit.code != 3 {
		t.Fatalf("error %v, want the client's exit code 3", err)
	}
	if out.String() != "hello\n" {
		t.Errorf("output %q, want the client's", out.String())
	}
	if err := runClient(exec.Command(sh, "-c", "exit 0"), "psql", nil, &out, &out); err != nil {
		t.Errorf("exit 0: %v", err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	ec := engineClientOf(dbv1.EngineMariaDB)
	_, _, err := ec.lookPath()
	if err == nil || !strings.Contains(err.Error(), "mariadb or mysql not found on PATH") || !strings.Contains(err.Error(), "--print") {
		t.Errorf("error %v, want one naming the clients and --print", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mysql"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path, program, err := ec.lookPath()
	if err != nil || program != "mysql" || path != filepath.Join(dir, "mysql") {
		t.Errorf("got %s %s %v, want the mysql fallback", path, program, err)
	}
}

func TestConnectWithoutClient(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	o, _, _ := testOptions(testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0"), testAppSecret("orders", "postgresql", "5432"))
	err := run(o, newConnectCommand, "orders", "--", "-c", "SELECT 1")
	if err == nil || !strings.Contains(err.Error(), "psql not found on PATH") || !strings.Contains(err.Error(), "--print") {
		t.Errorf("error %v, want psql not found, try --print", err)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("connect: %w", exitCodeError{err: errors.New("psql: exit status 3"), code: 3}), 3},
		{usageError{errors.New("want NAME")}, ExitUsage},
		{errors.New("no Database"), ExitFailed},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exit code of %v: %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestConnectionURI(t *testing.T) {
	cr := credentials{User: "app", Password: "p@ss:w/rd", Database: "app", Host: "orders-rw.shop.svc", Port: "5432"}
	if got, want := connectionURI("postgresql", cr, false), "postgresql://app:****@orders-rw.shop.svc:5432/app"; got != want {
		t.Errorf("masked: %s, want %s", got, want)
	}
	if got, want := connectionURI("postgresql", cr, true), "postgresql://app:p%40ss%3Aw%2Frd@orders-rw.shop.svc:5432/app"; got != want {
		t.Errorf("shown: %s, want %s", got, want)
	}
}
