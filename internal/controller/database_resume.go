package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// A failover or a switchover hands the primary Lease to its candidate
// before it records the candidate and promotes it. Interrupted between the
// two (the operator killed, its leadership lost, the API server away), it
// leaves the Lease naming a server that is still a replica while status
// and the topology name the old primary, whose agent no longer holds the
// Lease: nobody takes writes, and nothing else moves the Lease. So the
// Failover phase compares the Lease's holder with the recorded primary
// first, and finishes or undoes the procedure.

// resumeCatchUp bounds how long a resumed procedure waits for its
// candidate to receive what a returning old primary holds (a variable:
// the unit tests shorten it).
var resumeCatchUp = 10 * time.Second

// resumeInterrupted acts on a Lease that names holder while status names
// another primary:
//   - holder serves writes: it was promoted; it is adopted as the primary;
//   - the procedure had not recorded holder yet (so never asked it to
//     promote), and the old primary answers and holds writes holder lacks
//     (it came back, fenced): holder is given resumeCatchUp to receive
//     them; if it does, the procedure is finished (the failover's steps,
//     holder the candidate); if not, it is undone: the Lease goes back to
//     the old primary, which is restarted to take writes again, and
//     nothing is lost;
//   - otherwise the procedure is finished: holder is promoted (or, when it
//     cannot be reached, the failover rules choose once its Lease expired).
func (r *DatabaseReconciler) resumeInterrupted(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, holder string) error {
	primary := db.Status.CurrentPrimary
	holderPod, primaryPod := podNamed(pods, holder), podNamed(pods, primary)
	if holderPod != nil && stillWritable(ctx, obs, holderPod) {
		obs.promoted = holder
		// The failover that promoted it is recorded as such: the one the
		// topology holds, or, when the record was lost, this adoption.
		if db.Spec.Primary != holder { // not the switchover spec.primary asked for
			obs.failover = &dbv1.FailoverRecord{Time: metav1.Time{Time: r.now()}, From: primary, To: holder,
				Reason: fmt.Sprintf("adopted: the primary Lease had moved to %s, which serves writes, before status said so", holder)}
		}
		if topology, err := r.recordedTopology(ctx, db); err == nil {
			if f := failoverRecordedTo(db, topology, holder); f != nil {
				obs.failover = f
			}
		}
		r.event(db, corev1.EventTypeWarning, "PrimaryRecordRepaired", "Adopt",
			"the primary Lease names %s, which serves as a writable primary, while status names %s: %s is the primary", holder, primary, holder)
		return nil
	}
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return err
	}
	recorded, err := r.recordedPrimary(ctx, db)
	if err != nil {
		return err
	}
	// Once recorded, the holder may have been asked to promote (the record
	// comes first): only a move that stopped before its record is undone.
	if recorded != holder {
		if undo, why := r.holderLacks(ctx, obs, holderPod, primaryPod); undo {
			return r.undoInterrupted(ctx, db, obs, pods, holderPod, primaryPod, why)
		}
	}
	r.event(db, corev1.EventTypeWarning, "FailoverResumed", "Failover",
		"The primary Lease names %s while %s is the recorded primary: a failover or switchover stopped after handing the Lease over; finishing it", holder, primary)
	return r.failover(ctx, db, obs, pods, primaryPod, repl, failoverPlan{resume: holder})
}

// recordedPrimary is the primary the topology names, read afresh from the
// API server (the cache may not have seen the last record yet).
func (r *DatabaseReconciler) recordedPrimary(ctx context.Context, db *dbv1.Database) (string, error) {
	topology, err := r.recordedTopology(ctx, db)
	return topology[topologyPrimaryKey], err
}

// recordedTopology is the topology's data, read afresh from the API server
// (nil when there is none yet).
func (r *DatabaseReconciler) recordedTopology(ctx context.Context, db *dbv1.Database) (map[string]string, error) {
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the topology: %w", err)
	}
	return cm.Data, nil
}

// holderLacks says whether the old primary answers and holds writes the
// Lease's holder, a replica, has not received within resumeCatchUp (and
// what each holds).
func (r *DatabaseReconciler) holderLacks(ctx context.Context, obs *observed, holderPod, primaryPod *corev1.Pod) (bool, string) {
	if holderPod == nil || primaryPod == nil || !primaryPod.DeletionTimestamp.IsZero() {
		return false, ""
	}
	old, err := obs.instances.get(ctx, primaryPod)
	if err != nil {
		return false, ""
	}
	ost, err := old.Status(ctx)
	if err != nil || ost.Role != engine.RolePrimary {
		return false, ""
	}
	next, err := obs.instances.get(ctx, holderPod)
	if err != nil {
		return false, ""
	}
	wait, cancel := context.WithTimeout(ctx, resumeCatchUp)
	defer cancel()
	for {
		st, err := next.Status(wait)
		if err != nil || st.Role != engine.RoleReplica {
			return false, ""
		}
		if c, err := next.Compare(st.Received, ost.Applied); err == nil && c >= 0 {
			return false, ""
		}
		select {
		case <-wait.Done():
			return true, fmt.Sprintf("%s holds writes up to %s, %s received up to %s", primaryPod.Name, ost.Applied, holderPod.Name, st.Received)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// undoInterrupted gives the Lease back to the old primary (its holder is a
// replica that was never promoted: at once) and restarts the old primary's
// pod, whose agent then holds the Lease and starts it as the primary,
// unfenced, with everything it held.
func (r *DatabaseReconciler) undoInterrupted(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, holderPod, primaryPod *corev1.Pod, why string) error {
	if _, err := r.takeLeaseForRestart(ctx, db, pods, primaryPod, holderPod); err != nil {
		return fmt.Errorf("undoing the interrupted move to %s: %w", holderPod.Name, err)
	}
	r.event(db, corev1.EventTypeWarning, "FailoverUndone", "Failover",
		"The primary Lease had moved to %s before the record did, and %s came back holding writes %s lacks (%s): %s is the primary again, restarted to take writes; %s stays a replica",
		holderPod.Name, primaryPod.Name, holderPod.Name, why, primaryPod.Name, holderPod.Name)
	obs.restartPod(primaryPod, "take writes again as the primary (the interrupted failover was undone)")
	return nil
}
