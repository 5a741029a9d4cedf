package controller

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// primarySampleInterval is how often a healthy primary's position is read
// when spec.failover.maxLag needs it.
const primarySampleInterval = 5 * time.Second

// PrimaryPositions remembers the last replication position the operator
// read on each Database's primary, for spec.failover.maxLag. Each new
// sample is also written to the topology ConfigMap (annotation
// primaryPositionAnnotation), so an operator that restarts, or another
// replica that takes the leadership, still bounds a failover by it.
type PrimaryPositions struct {
	mu   sync.Mutex
	last map[types.UID]engine.Position
}

func (p *PrimaryPositions) set(uid types.UID, pos engine.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[types.UID]engine.Position{}
	}
	p.last[uid] = pos
}

func (p *PrimaryPositions) get(uid types.UID) (engine.Position, bool) {
	if p == nil {
		return engine.Position{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pos, ok := p.last[uid]
	return pos, ok
}

// forget drops a deleted Database's record.
func (p *PrimaryPositions) forget(uid types.UID) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, uid)
}

// samplePrimary records the healthy primary's position and asks to be
// called again, so the record stays recent. A failed read is only logged:
// the previous sample stays, and the bound is a best effort by nature.
func (r *DatabaseReconciler) samplePrimary(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, obs *observed) {
	obs.requeueWithin(primarySampleInterval)
	if r.Positions == nil {
		return
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		log.FromContext(ctx).V(1).Info("cannot sample the primary's position", "pod", pod.Name, "error", err)
		return
	}
	st, err := inst.Status(ctx)
	if err != nil || st.Role != engine.RolePrimary {
		return
	}
	r.Positions.set(db.UID, st.Applied)
	if err := r.persistPrimaryPosition(ctx, db, st.Applied); err != nil {
		log.FromContext(ctx).Error(err, "cannot record the primary's position; the bound rests on memory until the next sample")
	}
}

// persistPrimaryPosition writes pos into the topology ConfigMap's
// annotation (not its data: the instances read that).
func (r *DatabaseReconciler) persistPrimaryPosition(ctx context.Context, db *dbv1.Database, pos engine.Position) error {
	b, err := json.Marshal(pos)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, cm); err != nil {
		return err
	}
	if cm.Annotations[primaryPositionAnnotation] == string(b) {
		return nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, primaryPositionAnnotation, string(b))
	return r.Patch(ctx, cm, patch, client.FieldOwner(FieldOwner))
}

// lastPrimaryPosition is the primary's last sampled position: this
// process's, else the one recorded in the topology by an earlier one.
func (r *DatabaseReconciler) lastPrimaryPosition(ctx context.Context, db *dbv1.Database) (engine.Position, bool) {
	if pos, ok := r.Positions.get(db.UID); ok {
		return pos, true
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, cm); err != nil {
		return engine.Position{}, false
	}
	var pos engine.Position
	if v := cm.Annotations[primaryPositionAnnotation]; v == "" || json.Unmarshal([]byte(v), &pos) != nil {
		return engine.Position{}, false
	}
	return pos, true
}
