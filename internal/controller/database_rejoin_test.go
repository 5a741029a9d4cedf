package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// forkedPrimary is a PostgreSQL primary on timeline 2, which left
// timeline 1 at LSN 1000.
type forkedPrimary struct{ statusInstance }

func (forkedPrimary) ForkPoint(_ context.Context, tli uint32) (engine.Position, bool, error) {
	switch tli {
	case 2:
		return engine.Position{}, false, nil
	case 1:
		return engine.Position{Timeline: 1, LSN: 1000}, true, nil
	}
	return engine.Position{}, false, fmt.Errorf("timeline %d is not in the history of timeline 2", tli)
}

// followedReplica is a standby that counts the calls to follow.
type followedReplica struct {
	statusInstance
	follows *int
}

func (r followedReplica) Follow(context.Context, engine.Endpoint, engine.Credentials) error {
	*r.follows++
	return nil
}

// TestDivergedStandbyRewound: a PostgreSQL standby that replays a
// timeline the primary left before the standby's position holds WAL the
// primary never had: it can never follow, so the operator asks for its
// rewind (topology request, a restart, a Warning Event naming the WAL
// range) instead of re-pointing it forever. A standby behind the fork
// point, on the primary's timeline, or whose replay timeline is unknown,
// is only re-pointed.
func TestDivergedStandbyRewound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replica engine.Status
		rewind  bool
	}{
		{"past the fork point on the old timeline", engine.Status{ReplayTimeline: 1, Applied: engine.Position{Timeline: 1, LSN: 1038}}, true},
		{"behind the fork point on the old timeline", engine.Status{ReplayTimeline: 1, Applied: engine.Position{Timeline: 1, LSN: 990}}, false},
		{"exactly at the fork point", engine.Status{ReplayTimeline: 1, Applied: engine.Position{Timeline: 1, LSN: 1000}}, false},
		{"on the primary's timeline", engine.Status{ReplayTimeline: 2, Applied: engine.Position{Timeline: 2, LSN: 1500}}, false},
		{"replay timeline unknown", engine.Status{Applied: engine.Position{Timeline: 1, LSN: 1038}}, false},
		{"a timeline the primary never had", engine.Status{ReplayTimeline: 7, Applied: engine.Position{Timeline: 7, LSN: 5000}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 2
				db.Status.CurrentPrimary = "orders-0"
			})
			objs := readyPods(db)
			creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-credentials"}, Data: map[string][]byte{
				corev1.BasicAuthUsernameKey: []byte("postgres"), corev1.BasicAuthPasswordKey: []byte("secret")}}
			r, _ := newFakeReconciler(t, new(int), append([]client.Object{db, creds}, objs...)...)
			st := tc.replica
			st.Role, st.ReadOnly, st.Source = engine.RoleReplica, true, "orders-0:5432"
			follows := 0
			r.Instances = &InstanceConnector{
				Client: r.Client,
				Resolve: func(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
					return engine.Endpoint{Host: pod.Name, Port: port}, nil
				},
				Open: func(_ context.Context, _ dbv1.Engine, ep engine.Endpoint, _ engine.Credentials, _ engine.Options) (engine.Instance, error) {
					if ep.Host == "orders-0" {
						return forkedPrimary{statusInstance{st: engine.Status{Role: engine.RolePrimary, Applied: engine.Position{Timeline: 2, LSN: 1500}}}}, nil
					}
					return followedReplica{statusInstance{st: st}, &follows}, nil
				},
			}
			obs := &observed{instances: newInstanceSet(r.Instances, db)}
			defer obs.instances.close()
			primaryPod, replicaPod := objs[0].(*corev1.Pod), objs[1].(*corev1.Pod)
			replicaPod.Status.Conditions = nil // unready: left alone it is re-pointed
			ep, _ := obs.instances.endpoint(ctx, primaryPod)
			p := &rejoin{r: r, db: db, obs: obs, primaryPod: primaryPod, primaryEP: ep}
			if err := p.instance(ctx, replicaPod); err != nil {
				t.Fatal(err)
			}
			rewound := obs.rewind["orders-1"] != "" && len(obs.restart) == 1 && obs.restart[0].Name == "orders-1"
			if rewound != tc.rewind {
				t.Fatalf("rewind asked %t (requests %v, restarts %d), want %t", rewound, obs.rewind, len(obs.restart), tc.rewind)
			}
			var got []string
			for len(r.Recorder.(*events.FakeRecorder).Events) > 0 {
				got = append(got, <-r.Recorder.(*events.FakeRecorder).Events)
			}
			if tc.rewind {
				if follows != 0 {
					t.Errorf("a diverged standby was re-pointed %d times: it can never follow", follows)
				}
				if len(got) != 1 || !strings.HasPrefix(got[0], "Warning DivergedWritesSetAside orders-1 received WAL 0/3E8 to 0/40E on timeline 1 that orders-0 never had") {
					t.Errorf("Events %q, want one naming the diverged WAL range", got)
				}
				return
			}
			if follows != 1 || len(got) != 1 || !strings.HasPrefix(got[0], "Normal ReplicaRepointed") {
				t.Errorf("re-pointed %d times, Events %q: want it re-pointed once", follows, got)
			}
		})
	}
}
