package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

type countedInstance struct {
	engine.Instance
	closed *int
}

func (i countedInstance) Close() error { *i.closed++; return nil }

// TestInstanceSet: a reconcile dials each server once and closes every
// connection at its end; a connection whose call failed is dialled again at
// the next use; a server that could not be dialled is not dialled again.
func TestInstanceSet(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EngineMariaDB)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: credentialsSecretName(db)},
		Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte("root"), corev1.BasicAuthPasswordKey: []byte("pw")}}
	dials, closed := map[string]int{}, 0
	var failed func(error)
	set := newInstanceSet(&InstanceConnector{
		Client: fake.NewClientBuilder().WithObjects(secret).Build(),
		Resolve: func(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
			return engine.Endpoint{Host: pod.Name, Port: port}, nil
		},
		Open: func(_ context.Context, _ dbv1.Engine, ep engine.Endpoint, creds engine.Credentials, opts engine.Options) (engine.Instance, error) {
			dials[ep.Host]++
			if creds.Password != "pw" {
				t.Errorf("dialled with password %q", creds.Password)
			}
			if ep.Host == "down" {
				return nil, errors.New("connection refused")
			}
			failed = opts.OnError
			return countedInstance{closed: &closed}, nil
		},
	}, db)
	up := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "up", UID: "1"}}
	down := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "down", UID: "2"}}

	for range 3 {
		if _, err := set.get(ctx, up); err != nil {
			t.Fatal(err)
		}
		if _, err := set.get(ctx, down); err == nil {
			t.Fatal("a server that cannot be dialled: no error")
		}
	}
	if dials["up"] != 1 || dials["down"] != 1 {
		t.Errorf("dials %v, want one per server", dials)
	}
	failed(errors.New("i/o timeout"))
	if _, err := set.get(ctx, up); err != nil {
		t.Fatal(err)
	}
	if dials["up"] != 2 {
		t.Errorf("a connection whose call failed was handed out again (dials %v)", dials)
	}
	// A pod recreated under the same name is another server.
	if _, err := set.get(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "up", UID: "3"}}); err != nil {
		t.Fatal(err)
	}
	set.close()
	if closed != 3 || dials["up"] != 3 {
		t.Errorf("closed %d connections of %d dialled, want all 3", closed, dials["up"])
	}
}

type refusingInstance struct{ engine.Instance }

func (refusingInstance) Fence(context.Context) error { return nil }
func (refusingInstance) Follow(context.Context, engine.Endpoint, engine.Credentials) error {
	return errors.New("access denied")
}

// TestServerActionsAreLogged: every action on a server through the
// reconcile's set is a structured log line when it starts and when it
// ends, naming the pod, the action and how it ended, never a password.
func TestServerActionsAreLogged(t *testing.T) {
	var lines []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	db := newDB(dbv1.EnginePostgreSQL)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: credentialsSecretName(db)},
		Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte("postgres"), corev1.BasicAuthPasswordKey: []byte("pw")}}
	set := newInstanceSet(&InstanceConnector{
		Client: fake.NewClientBuilder().WithObjects(secret).Build(),
		Resolve: func(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
			return engine.Endpoint{Host: pod.Name, Port: port}, nil
		},
		Open: func(context.Context, dbv1.Engine, engine.Endpoint, engine.Credentials, engine.Options) (engine.Instance, error) {
			return refusingInstance{}, nil
		},
	}, db)
	inst, err := set.get(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", UID: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Follow(ctx, engine.Endpoint{Host: "10.0.0.2", Port: 5432}, engine.Credentials{User: engine.ReplicationUser, Password: "s3cret"}); err == nil {
		t.Fatal("the refused follow: no error")
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		`"msg"="server action started" "pod"="orders-1" "action"="fence"`,
		`"msg"="server action done" "pod"="orders-1" "action"="fence"`,
		`"msg"="server action failed" "error"="access denied" "pod"="orders-1" "action"="follow" "primary"="10.0.0.2:5432" "user"="streaming_replica"`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no line with %s in\n%s", want, all)
		}
	}
	if strings.Contains(all, "s3cret") {
		t.Errorf("a password in the log:\n%s", all)
	}
}
