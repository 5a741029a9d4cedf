package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// slotServer is a primary whose slots are scripted: it reports lost
// ones, and records what the topology said when each was dropped.
type slotServer struct {
	fakeInstance
	c       client.Client
	db      *dbv1.Database
	lost    []string
	kept    []string
	dropped map[string]string // slot -> the topology's rebuild request for its pod at that moment
}

func (s *slotServer) KeepSlots(_ context.Context, prefix string, names []string) (engine.Slots, error) {
	s.kept = append([]string{prefix}, names...)
	return engine.Slots{Lost: s.lost}, nil
}

func (s *slotServer) DropSlot(ctx context.Context, name string) error {
	cm := &corev1.ConfigMap{}
	_ = s.c.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: topologyName(s.db)}, cm)
	s.dropped[name] = cm.Data[topologyRebuildKey+"orders-1"]
	return nil
}

// TestLostSlotRebuildsItsReplica: the primary keeps a slot per other
// instance; a slot that lost WAL has its replica's rebuild recorded in the
// topology before the slot is dropped (a loss is never forgotten), with an
// Event.
func TestLostSlotRebuildsItsReplica(t *testing.T) {
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Replicas = 3
		db.Status.CurrentPrimary = "orders-0"
	})
	writes := 0
	r, c := newFakeReconciler(t, &writes, db)
	var pods []corev1.Pod
	for _, name := range []string{"orders-0", "orders-1"} { // orders-2 not created yet
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name}})
	}
	srv := &slotServer{c: c, db: db, lost: []string{"orders_1", "orders_2"}, dropped: map[string]string{}}
	obs := &observed{}
	if err := r.keepSlots(context.Background(), db, obs, srv, "orders-0", pods); err != nil {
		t.Fatal(err)
	}
	if want := []string{"orders_", "orders_1", "orders_2"}; !slices.Equal(srv.kept, want) {
		t.Errorf("slots kept %v, want %v", srv.kept, want)
	}
	if token, ok := srv.dropped["orders_1"]; !ok || token == "" {
		t.Errorf("orders_1 dropped %v with the topology's rebuild request %q: want it dropped after the request was recorded", ok, token)
	}
	if _, ok := srv.dropped["orders_2"]; ok {
		t.Error("orders_2 (no pod to rebuild yet) was dropped: its loss would be forgotten")
	}
	if len(obs.restart) != 1 || obs.restart[0].Name != "orders-1" {
		t.Errorf("pods restarted %v, want orders-1", obs.restart)
	}
	select {
	case e := <-r.Recorder.(*events.FakeRecorder).Events:
		if !strings.HasPrefix(e, "Warning ReplicaCannotCatchUp orders-1 fell further behind orders-0") {
			t.Errorf("Event %q", e)
		}
	default:
		t.Error("no Event")
	}
}
