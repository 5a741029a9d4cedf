package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// primarySampleInterval is how often a healthy primary's position is read
// when spec.failover.maxLag needs it.
const primarySampleInterval = 5 * time.Second

// PrimaryPositions remembers the last replication position the operator
// read on each Database's primary, for spec.failover.maxLag. It lives in
// memory only: after an operator restart the bound applies again once the
// primary has been seen.
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
	obs.requeue = primarySampleInterval
	if r.Positions == nil {
		return
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		log.FromContext(ctx).V(1).Info("cannot sample the primary's position", "pod", pod.Name, "error", err.Error())
		return
	}
	st, err := inst.Status(ctx)
	if err != nil || st.Role != engine.RolePrimary {
		return
	}
	r.Positions.set(db.UID, st.Applied)
}
