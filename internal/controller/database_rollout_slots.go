package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultConcurrentRollouts is how many Databases roll a pod template
// change out at once unless --max-concurrent-rollouts says otherwise.
const DefaultConcurrentRollouts = 2

// RolloutSlots bounds how many Databases roll a pod template change out at
// once. An operator upgrade that changes the template (the agent's image,
// the chart) changes every Database's at the same moment; rolling them all
// at once would put every primary through a switchover together, and a
// bad new template would reach every Database before anyone saw it fail
// on the first. A Database holds a slot from its first restart until no
// pod is left on the old template (or it is deleted). The record is in
// memory: after an operator restart, the Databases still rolling take
// their slots again as they are reconciled (at most Max were rolling).
type RolloutSlots struct {
	// Max is the number of slots (DefaultConcurrentRollouts when below 1).
	Max int

	mu      sync.Mutex
	holders []types.UID
}

// acquire takes a slot for uid, or reports that it holds one already; it
// returns false (and how many roll) when every slot is taken. A nil
// RolloutSlots has no bound.
func (s *RolloutSlots) acquire(uid types.UID) (ok bool, rolling int) {
	if s == nil {
		return true, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.holders, uid) {
		return true, len(s.holders)
	}
	limit := s.Max
	if limit < 1 {
		limit = DefaultConcurrentRollouts
	}
	if len(s.holders) >= limit {
		return false, len(s.holders)
	}
	s.holders = append(s.holders, uid)
	return true, len(s.holders)
}

// release gives uid's slot back (nothing when it holds none).
func (s *RolloutSlots) release(uid types.UID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holders = slices.DeleteFunc(s.holders, func(u types.UID) bool { return u == uid })
}
