package controller

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
)

// TestLeaseClock: a Lease's expiry counts from when the operator first saw
// its current version; any change (a renewal) starts the count again.
func TestLeaseClock(t *testing.T) {
	c := &leaseClock{}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-primary", Namespace: "ns", ResourceVersion: "1"}}
	t0 := time.Now()
	if got := c.firstSeen(l, t0); !got.Equal(t0) {
		t.Errorf("first sighting at %v, want %v", got, t0)
	}
	if got := c.firstSeen(l, t0.Add(5*time.Second)); !got.Equal(t0) {
		t.Errorf("the same version seen again moved its first sighting to %v", got)
	}
	l.ResourceVersion = "2"
	if got := c.firstSeen(l, t0.Add(6*time.Second)); !got.Equal(t0.Add(6 * time.Second)) {
		t.Errorf("a renewed Lease kept its old first sighting %v", got)
	}
	var none *leaseClock
	if got := none.firstSeen(l, t0); !got.Equal(t0) {
		t.Errorf("without a clock every Lease is new: got %v", got)
	}
}

// TestTakeLease: the Lease of a primary that could not be fenced moves
// only after it expired (the duration plus the margin since its version
// was first seen); a fenced holder's moves at once; the move names the
// new holder and counts a transition.
func TestTakeLease(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Spec.Replicas = 2 })
	writes := 0
	r, c := newFakeReconciler(t, &writes, db)
	r.leases = &leaseClock{}
	if err := r.reconcileLease(ctx, db, &observed{}); err != nil {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l); err != nil {
		t.Fatal(err)
	}
	if holderOf(l) != db.Name+"-0" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 15 || l.Annotations["database.example.com/members"] != "2" {
		t.Fatalf("created Lease: holder %q, duration %v, annotations %v", holderOf(l), l.Spec.LeaseDurationSeconds, l.Annotations)
	}
	left, err := r.takeLease(ctx, db, db.Name+"-1", false)
	if err != nil {
		t.Fatal(err)
	}
	if left < 17*time.Second || left > 18*time.Second {
		t.Errorf("an unfenced holder's Lease moves in %s, want the duration plus the margin (18 s)", left)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != db.Name+"-0" {
		t.Fatalf("the Lease moved before it expired: holder %q (%v)", holderOf(l), err)
	}
	if left, err := r.takeLease(ctx, db, db.Name+"-1", true); err != nil || left != 0 {
		t.Fatalf("a fenced holder's Lease: left %s, %v; want it moved at once", left, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != db.Name+"-1" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
		t.Fatalf("after the move: holder %q, transitions %v (%v)", holderOf(l), l.Spec.LeaseTransitions, err)
	}
}

// TestLeaseCarriesTheLagBound: spec.failover.maxLag reaches the agents on
// the Lease (their replicas' readiness), and leaves it when unset.
func TestLeaseCarriesTheLagBound(t *testing.T) {
	ctx := context.Background()
	db := newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Spec.Replicas = 2; db.Spec.Failover.MaxLag = ptr.To[int64](4096) })
	writes := 0
	r, c := newFakeReconciler(t, &writes, db)
	r.leases = &leaseClock{}
	l := &coordinationv1.Lease{}
	for _, want := range []string{"4096", "8192", ""} {
		switch want {
		case "8192":
			db.Spec.Failover.MaxLag = ptr.To[int64](8192)
		case "":
			db.Spec.Failover.MaxLag = nil
		}
		if err := r.reconcileLease(ctx, db, &observed{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l); err != nil {
			t.Fatal(err)
		}
		got, ok := l.Annotations[agent.MaxLagAnnotation]
		if got != want || ok != (want != "") || l.Annotations[agent.MembersAnnotation] != "2" {
			t.Errorf("maxLag %q: Lease annotations %v", want, l.Annotations)
		}
	}
}
