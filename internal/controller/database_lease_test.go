package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
// was first seen, the duration being the longest any pod was started
// with); a fenced holder's moves at once, but only when the fence reached
// the incarnation the Lease names; a Lease a stopping primary released
// moves at once; the move names the new holder's incarnation and counts a
// transition.
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
	if holderOf(l) != db.Name+"-0" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 15 || l.Annotations["database.example.com/members"] != "2" ||
		l.Annotations[agent.FailoverAnnotation] != "enabled" {
		t.Fatalf("created Lease: holder %q, duration %v, annotations %v", holderOf(l), l.Spec.LeaseDurationSeconds, l.Annotations)
	}
	pod := func(name, uid, duration string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
		p.Spec.Containers = []corev1.Container{{Name: "database", Env: []corev1.EnvVar{{Name: "AGENT_LEASE_DURATION", Value: duration}}}}
		return p
	}
	// The holder's agent renewed as incarnation "a"; the pod was deleted
	// without a grace period and is back as "b", fenced.
	l.Annotations[agent.HolderUIDAnnotation] = "a"
	if err := c.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	pods := []corev1.Pod{pod(db.Name+"-0", "b", "15s"), pod(db.Name+"-1", "c", "15s")}
	old := pod(db.Name+"-0", "a", "15s") // the incarnation the Lease names
	left, err := r.takeLease(ctx, db, pods, &pods[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	if left < 17*time.Second || left > 18*time.Second {
		t.Errorf("an unfenced holder's Lease moves in %s, want the duration plus the margin (18 s)", left)
	}
	if left, _ := r.takeLease(ctx, db, pods, &pods[1], &pods[0]); left < 17*time.Second {
		t.Errorf("a fence of incarnation b moved a Lease incarnation a holds (left %s)", left)
	}
	// A pod started with a longer duration than the operator's: the
	// operator waits for that one (its agent never uses a shorter one).
	pods[1] = pod(db.Name+"-1", "c", "60s")
	if left, _ := r.takeLease(ctx, db, pods, &pods[1], nil); left < 71*time.Second || left > 72*time.Second {
		t.Errorf("with a pod started on a 60 s Lease the Lease moves in %s, want 72 s", left)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != db.Name+"-0" {
		t.Fatalf("the Lease moved before it expired: holder %q (%v)", holderOf(l), err)
	}
	if left, err := r.takeLease(ctx, db, pods, &pods[1], &old); err != nil || left != 0 {
		t.Fatalf("a fenced holder's Lease: left %s, %v; want it moved at once", left, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != db.Name+"-1" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 ||
		l.Annotations[agent.HolderUIDAnnotation] != "c" {
		t.Fatalf("after the move: holder %q, transitions %v, annotations %v (%v)", holderOf(l), l.Spec.LeaseTransitions, l.Annotations, err)
	}
	// After a scale-up from one instance: a holder whose agent last
	// renewed counting itself alone keeps writing through an API server
	// outage, so its Lease never moves by expiry.
	l.Annotations[agent.MembersSeenAnnotation] = "1"
	if err := c.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	r.leases = &leaseClock{seen: map[types.NamespacedName]leaseSighting{{Namespace: l.Namespace, Name: l.Name}: {version: l.ResourceVersion, at: time.Now().Add(-time.Hour)}}}
	if _, err := r.takeLease(ctx, db, pods, &pods[0], nil); err == nil || !strings.Contains(err.Error(), "only instance") {
		t.Errorf("the Lease of a holder that counted itself alone: %v, want it refused", err)
	}
	delete(l.Annotations, agent.MembersSeenAnnotation)
	// Released by a stopping primary (no holder): moves at once, and the
	// handover's record goes.
	l.Spec.HolderIdentity = nil
	l.Annotations[agent.HandoverAnnotation] = `{"from":"db-1","released":true}`
	if err := c.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	if left, err := r.takeLease(ctx, db, pods, &pods[0], nil); err != nil || left != 0 {
		t.Fatalf("a released Lease: left %s, %v; want it moved at once", left, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != db.Name+"-0" || l.Annotations[agent.HolderUIDAnnotation] != "b" {
		t.Fatalf("after taking a released Lease: holder %q, annotations %v (%v)", holderOf(l), l.Annotations, err)
	}
	if _, ok := l.Annotations[agent.HandoverAnnotation]; ok {
		t.Errorf("the handover's record stayed on the Lease after the move: %v", l.Annotations)
	}
	// Handed to a pod the operator restarts next (its server fenced): to
	// any incarnation of it, at once, so the next one does not wait for
	// the running one's Lease to run out.
	if left, err := r.takeLeaseForRestart(ctx, db, pods, &pods[0], nil); err != nil || left != 0 {
		t.Fatalf("the Lease for a restart: left %s, %v; want it moved at once", left, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != db.Name+"-0" {
		t.Fatalf("after taking the Lease for a restart: holder %q (%v)", holderOf(l), err)
	}
	if uid, named := l.Annotations[agent.HolderUIDAnnotation]; named {
		t.Errorf("the Lease for a restart names incarnation %q, want any", uid)
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
