package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// Replication slots (PostgreSQL): the primary keeps one physical slot per
// other instance, so WAL a replica has not received yet (a replica that
// lags, restarts or is down, a former primary to be rewound) is kept for
// it instead of being recycled, never more than max_slot_wal_keep_size
// (the chart's bound: a dead replica cannot fill the disk). A replica
// whose slot lost WAL past that bound can never catch up: it is rebuilt.
// Each replica streams through its own slot (primary_slot_name, set by
// the start script).

// usesSlots: only PostgreSQL has slots (MySQL and MariaDB replicas read
// the binary logs).
func usesSlots(db *dbv1.Database) bool { return db.Spec.Engine == dbv1.EnginePostgreSQL }

// slotPrefix starts the names of a Database's slots; slots named
// otherwise (a user's own) are left alone.
func slotPrefix(db *dbv1.Database) string { return engine.SlotName(db.Name + "-") }

// slotNames are the slots the primary keeps: one per other instance the
// Database has or should have.
func slotNames(db *dbv1.Database, pods []corev1.Pod, primary string) []string {
	var names []string
	for i := range max(int(db.Spec.Replicas), len(pods)) {
		if pod := db.Name + "-" + strconv.Itoa(i); pod != primary {
			names = append(names, engine.SlotName(pod))
		}
	}
	return names
}

// keepSlots makes the primary keep its replicas' slots. For every slot
// that lost WAL, the replica's rebuild is asked for and recorded in the
// topology first; only then is the slot dropped (the next call creates it
// afresh for the rebuilt replica), so a loss is never forgotten.
func (r *DatabaseReconciler) keepSlots(ctx context.Context, db *dbv1.Database, obs *observed, prim engine.Instance, primary string, pods []corev1.Pod) error {
	if !usesSlots(db) {
		return nil
	}
	slots, err := prim.KeepSlots(ctx, slotPrefix(db), slotNames(db, pods, primary))
	if err != nil {
		return fmt.Errorf("replication slots on %s: %w", primary, err)
	}
	var errs []error
	for _, slot := range slots.Lost {
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return engine.SlotName(p.Name) == slot })
		if i < 0 {
			continue // kept lost until its pod exists again to be rebuilt
		}
		pod := &pods[i]
		token := r.now().UTC().Format("20060102T150405Z")
		obs.requestRebuild(pod.Name, token)
		if err := r.writeTopology(ctx, db, obs); err != nil {
			errs = append(errs, fmt.Errorf("recording the rebuild of %s: %w", pod.Name, err))
			continue
		}
		r.event(db, corev1.EventTypeWarning, "ReplicaCannotCatchUp", "Rebuild",
			"%s fell further behind %s than the WAL its replication slot may keep (max_slot_wal_keep_size): it can never catch up; rebuilding it from %s (request %s), its old data kept aside on its volume",
			pod.Name, primary, primary, token)
		obs.restartPod(pod, "rebuild it from "+primary)
		if err := prim.DropSlot(ctx, slot); err != nil {
			errs = append(errs, err)
			continue
		}
		log.FromContext(ctx).Info("lost replication slot dropped; it is made again for the rebuilt replica", "slot", slot, "pod", pod.Name)
	}
	return errors.Join(errs...)
}
