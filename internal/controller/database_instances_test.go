package controller

import (
	"context"
	"errors"
	"testing"

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
