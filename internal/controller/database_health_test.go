package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// statusInstance answers Status with a fixed status.
type statusInstance struct {
	fakeInstance
	st engine.Status
}

func (i statusInstance) Status(context.Context) (engine.Status, error) { return i.st, nil }
func (statusInstance) Close() error                                    { return nil }

// TestJudgeReplication: each replica's state is judged against the
// primary this reconcile saw writable, and the condition names the ones
// that do not replicate or lag beyond the bound.
func TestJudgeReplication(t *testing.T) {
	primary := engine.Status{Role: engine.RolePrimary, Applied: engine.Position{LSN: 1000}}
	streaming := engine.Status{Role: engine.RoleReplica, ReadOnly: true, Streaming: true, Applying: true, Source: "orders-0:5432", Applied: engine.Position{LSN: 990}}
	with := func(f func(*engine.Status)) engine.Status { s := streaming; f(&s); return s }
	for _, tc := range []struct {
		name      string
		replica   *engine.Status // nil: unreachable
		state     dbv1.ReplicationState
		overBound bool
		lastError string
		cond      metav1.ConditionStatus
		reason    string
	}{
		{"streaming within the bound", &streaming, dbv1.ReplicationStreaming, false, "", "True", dbv1.ReasonReplicasStreaming},
		{"beyond the bound", ptr.To(with(func(s *engine.Status) { s.Applied.LSN = 900 })), dbv1.ReplicationCatchingUp, true, "", "False", dbv1.ReasonReplicationLagOverBound},
		{"receiver down", ptr.To(with(func(s *engine.Status) { s.Streaming, s.Source = false, "" })), dbv1.ReplicationStopped, false, "not connected to orders-0", "False", dbv1.ReasonReplicaNotReplicating},
		{"SQL thread stopped with an error", ptr.To(with(func(s *engine.Status) { s.Applying, s.ReplicationError = false, "Error 'Duplicate entry' on query" })),
			dbv1.ReplicationStopped, false, "Duplicate entry", "False", dbv1.ReasonReplicaNotReplicating},
		{"wrong primary", ptr.To(with(func(s *engine.Status) { s.Source = "elsewhere:5432" })), dbv1.ReplicationStopped, false, "replicates from elsewhere:5432", "False", dbv1.ReasonReplicaNotReplicating},
		{"missing WAL", ptr.To(with(func(s *engine.Status) { s.SourceLost = "requested WAL segment has already been removed" })), dbv1.ReplicationStopped, false, "already been removed", "False", dbv1.ReasonReplicaNotReplicating},
		{"a second primary", ptr.To(with(func(s *engine.Status) { s.Role = engine.RolePrimary })), dbv1.ReplicationStopped, false, "runs as a primary", "False", dbv1.ReasonReplicaNotReplicating},
		{"unreachable", nil, dbv1.ReplicationUnknown, false, "cannot be reached", "True", dbv1.ReasonReplicasStreaming},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 2
				db.Spec.Failover.MaxLag = ptr.To[int64](50)
				db.Status.CurrentPrimary = "orders-0"
				db.Finalizers = []string{Finalizer}
			})
			pods := readyPods(db)
			for _, p := range pods {
				p.(*corev1.Pod).Status.ContainerStatuses = []corev1.ContainerStatus{{Name: databaseContainerName, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			}
			pods[0].(*corev1.Pod).Labels[labelRole] = rolePrimary
			pods[1].(*corev1.Pod).Labels[labelRole] = roleReplica
			creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-credentials"},
				Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte("postgres"), corev1.BasicAuthPasswordKey: []byte("secret")}}
			r, c := newFakeReconciler(t, new(int), append([]client.Object{db, creds}, pods...)...)
			statuses := map[string]*engine.Status{"orders-0": &primary, "orders-1": tc.replica}
			r.Instances = &InstanceConnector{
				Client: c,
				Resolve: func(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
					return engine.Endpoint{Host: pod.Name, Port: port}, nil
				},
				Open: func(_ context.Context, _ dbv1.Engine, ep engine.Endpoint, _ engine.Credentials, _ engine.Options) (engine.Instance, error) {
					if st := statuses[ep.Host]; st != nil {
						return statusInstance{st: *st}, nil
					}
					return nil, fmt.Errorf("no route to %s", ep)
				},
			}
			obs := &observed{instances: newInstanceSet(r.Instances, db)}
			defer obs.instances.close()
			if err := r.observeInstances(ctx, db, obs); err != nil {
				t.Fatal(err)
			}
			in := obs.instanceStates[1]
			if in.Name != "orders-1" || in.Replication != tc.state || in.LagOverBound != tc.overBound || !strings.Contains(in.LastError, tc.lastError) {
				t.Errorf("orders-1: %+v, want %s, over bound %v, error holding %q", in, tc.state, tc.overBound, tc.lastError)
			}
			if p := obs.instanceStates[0]; p.Role != rolePrimary || p.Replication != "" {
				t.Errorf("the primary's entry %+v", p)
			}
			rh := obs.replication
			if tc.state == dbv1.ReplicationUnknown {
				// An unreachable replica is InstancesHealthy's concern (its pod);
				// it is named, not counted as streaming.
				if rh.status != metav1.ConditionFalse || !strings.Contains(rh.message, "orders-1 is Unknown") {
					t.Errorf("ReplicationHealthy %+v for an unreachable replica", rh)
				}
				return
			}
			if rh.status != tc.cond || rh.reason != tc.reason {
				t.Errorf("ReplicationHealthy %+v, want %s %s", rh, tc.cond, tc.reason)
			}
			if tc.cond == metav1.ConditionFalse && !strings.Contains(rh.message, "orders-1") {
				t.Errorf("ReplicationHealthy %q does not name orders-1", rh.message)
			}
		})
	}
}
