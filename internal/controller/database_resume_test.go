package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// TestInterruptedFailoverResumes: a failover handed the Lease to orders-1
// and the operator died before recording or promoting it; orders-0 came
// back, fenced (its agent lost the Lease). Today nobody would take writes
// for ever. The next reconcile finishes the move when orders-1 has (or
// gets) everything orders-0 holds, undoes it when orders-0 holds writes
// orders-1 never receives (the Lease goes back, orders-0 is restarted to
// take writes: nothing lost), and adopts orders-1 when it was promoted.
func TestInterruptedFailoverResumes(t *testing.T) {
	for _, tt := range []struct {
		name             string
		old, holder      *scriptedServer
		primary, restart string
		holderPromoted   bool
		recorded         bool // the topology names the holder already
		switchover       bool // spec.primary names the holder: a switchover was interrupted
		event            string
	}{
		{name: "the holder has every write: finished", old: &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 100},
			holder: &scriptedServer{role: engine.RoleReplica, readOnly: true, applied: 100}, primary: "orders-1", holderPromoted: true, event: "FailoverResumed"},
		{name: "the holder catches up: finished", old: &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 150},
			holder: &scriptedServer{role: engine.RoleReplica, readOnly: true, applied: 100, catchUpTo: 150}, primary: "orders-1", holderPromoted: true, event: "FailoverResumed"},
		{name: "the old primary holds writes the holder never gets: undone", old: &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 150},
			holder: &scriptedServer{role: engine.RoleReplica, readOnly: true, applied: 100}, primary: "orders-0", restart: "orders-0", event: "FailoverUndone"},
		{name: "the holder recorded (perhaps asked to promote): finished, never undone", old: &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 150},
			holder: &scriptedServer{role: engine.RoleReplica, readOnly: true, applied: 100}, primary: "orders-1", holderPromoted: true, recorded: true, event: "FailoverResumed"},
		{name: "a switchover to the holder: finished as a switchover", old: &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 100},
			holder: &scriptedServer{role: engine.RoleReplica, readOnly: true, applied: 100}, primary: "orders-1", holderPromoted: true, switchover: true, event: "FailoverResumed"},
		{name: "the holder was promoted: adopted", old: &scriptedServer{role: engine.RolePrimary, readOnly: true, applied: 100},
			holder: &scriptedServer{role: engine.RolePrimary, applied: 120}, primary: "orders-1", event: "PrimaryRecordRepaired"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func(d, f time.Duration) { resumeCatchUp, failoverCatchUp = d, f }(resumeCatchUp, failoverCatchUp)
			resumeCatchUp, failoverCatchUp = 300*time.Millisecond, 300*time.Millisecond
			ctx := context.Background()
			db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas = 2
				db.Status.CurrentPrimary = "orders-0"
				db.Finalizers = []string{Finalizer}
				if tt.switchover {
					db.Spec.Primary = "orders-1"
				}
			})
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: leaseName(db), Labels: leaseLabels(db)},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-1"), LeaseDurationSeconds: ptr.To[int32](15)}}
			objs := append([]client.Object{db, lease}, readyPods(db)...)
			if tt.recorded {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: topologyName(db)},
					Data: map[string]string{topologyPrimaryKey: "orders-1", topologyInitializedKey: "true"}})
			}
			servers := map[string]*scriptedServer{"orders-0": tt.old, "orders-1": tt.holder}
			writes := 0
			r, c := newFakeReconciler(t, &writes, objs...)
			r.Instances = scriptedConnector(c, servers)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}); err != nil && tt.event != "FailoverUndone" {
				t.Fatalf("reconcile: %v", err)
			}
			got := &dbv1.Database{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.CurrentPrimary != tt.primary {
				t.Errorf("primary %s, want %s", got.Status.CurrentPrimary, tt.primary)
			}
			if f := got.Status.LastFailover; tt.switchover && f != nil {
				t.Errorf("an interrupted switchover finished as a failover: %+v", f)
			} else if tt.primary == "orders-1" && !tt.switchover && (f == nil || f.From != "orders-0" || f.To != "orders-1") {
				t.Errorf("last failover %+v, want one from orders-0 to orders-1", f)
			}
			if promoted := slices.Contains(tt.holder.calls, "promote"); promoted != tt.holderPromoted {
				t.Errorf("orders-1 promoted %v, want %v (calls %v)", promoted, tt.holderPromoted, tt.holder.calls)
			}
			if slices.Contains(tt.old.calls, "unfence") {
				t.Errorf("the old primary was unfenced in place (calls %v)", tt.old.calls)
			}
			l := &coordinationv1.Lease{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(lease), l); err != nil {
				t.Fatal(err)
			}
			if holderOf(l) != tt.primary {
				t.Errorf("the Lease names %s, want %s", holderOf(l), tt.primary)
			}
			events := strings.Join(eventNotes(r), "\n")
			if !strings.Contains(events, " "+tt.event+" ") {
				t.Errorf("events:\n%s\nwant %s", events, tt.event)
			}
			if restarted := strings.Contains(events, "Restarted orders-0 to take writes again"); restarted != (tt.restart == "orders-0") {
				t.Errorf("orders-0 restarted to take writes %v, want %v; events:\n%s", restarted, tt.restart == "orders-0", events)
			}
		})
	}
}

// eventNotes are the Events r emitted so far, in order ("Type Reason note").
func eventNotes(r *DatabaseReconciler) []string {
	var out []string
	ch := r.Recorder.(*events.FakeRecorder).Events
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestHalfPromotedRecordStays: an interrupted failover left the Lease
// naming orders-1; the next reconcile finishes it, records orders-1 in the
// topology and asks it to promote, and the promotion fails half-way
// (orders-1's server stopped under it and restarts, unreachable). The
// record must stay orders-1's: writing status's primary back into it
// pointed the services at the old primary for a while and lost the
// failover's record (the e2e eviction test saw both). Once orders-1
// serves writes it is adopted with the failover the topology recorded.
func TestHalfPromotedRecordStays(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
		db.Spec.Replicas = 3
		db.Status.CurrentPrimary = "orders-0"
		db.Finalizers = []string{Finalizer}
	})
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: leaseName(db), Labels: leaseLabels(db)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-1"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	servers := map[string]*scriptedServer{
		"orders-0": {role: engine.RolePrimary, readOnly: true, applied: 100},
		"orders-1": {role: engine.RoleReplica, readOnly: true, applied: 100, promoteErr: errors.New("connection reset by peer")},
		"orders-2": {role: engine.RoleReplica, readOnly: true, applied: 100},
	}
	writes := 0
	r, c := newFakeReconciler(t, &writes, append([]client.Object{db, lease}, readyPods(db)...)...)
	r.Instances = scriptedConnector(c, servers)
	topology := func() map[string]string {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	reconcile := func() error {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
		return err
	}

	if err := reconcile(); err == nil {
		t.Fatal("the reconcile whose promotion failed returned no error")
	}
	if got := topology()[topologyPrimaryKey]; got != "orders-1" {
		t.Fatalf("the topology names %q after the promotion failed half-way, want orders-1 (the Lease's holder)", got)
	}
	var rec dbv1.FailoverRecord
	if err := json.Unmarshal([]byte(topology()[topologyFailoverKey]), &rec); err != nil || rec.To != "orders-1" {
		t.Fatalf("the topology's failover record %q (%v), want one to orders-1", topology()[topologyFailoverKey], err)
	}
	delete(servers, "orders-1") // restarting
	_ = reconcile()             // the failover chooses orders-2 and waits for the Lease
	if got := topology()[topologyPrimaryKey]; got != "orders-1" {
		t.Fatalf("the topology names %q while orders-1 restarts, want orders-1 (the Lease's holder)", got)
	}
	if slices.Contains(servers["orders-0"].calls, "unfence") {
		t.Errorf("the old primary was unfenced (calls %v)", servers["orders-0"].calls)
	}

	servers["orders-1"] = &scriptedServer{role: engine.RolePrimary, applied: 120} // started as the primary
	if err := reconcile(); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	got := &dbv1.Database{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.CurrentPrimary != "orders-1" || topology()[topologyPrimaryKey] != "orders-1" {
		t.Fatalf("primary %q, recorded %q: want orders-1", got.Status.CurrentPrimary, topology()[topologyPrimaryKey])
	}
	if f := got.Status.LastFailover; f == nil || f.To != "orders-1" || !f.Time.Equal(&rec.Time) {
		t.Errorf("last failover %+v, want the recorded %+v", f, rec)
	}
}
