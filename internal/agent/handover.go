package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/database-operator/internal/engine"
)

// The planned handover. When the primary's pod is asked to stop (deleted,
// evicted by a drain, restarted by a rollout), its server must not go on
// taking writes while the operator promotes a replica: a PostgreSQL smart
// shutdown lets open sessions commit until they end, and the Lease would
// only expire a whole duration later. So before the server stops, the
// agent hands the primary role over as a switchover would:
//
//  1. fence the server (no application session writes any more: the
//     engine's fence, which ends every client session and waits until
//     they are gone, so no commit in flight is acknowledged after);
//  2. read its last position, and wait, within the handover bound (half
//     the grace period), until a replica has received all of it (asked
//     over the peer channel);
//  3. stop the server (the engine's fast shutdown; killed when it does not
//     stop in time: it is fenced, and a kill loses nothing acknowledged);
//  4. only then release the primary Lease (no holder) with a record of the
//     handover (HandoverAnnotation): the operator promotes a replica at
//     once, no Lease expiry and no failover delay, and says so in an
//     Event.
//
// When no replica has everything in time, the Lease is kept (the record
// says why, and the operator warns), and the failover rules apply once it
// has expired. Two servers never take writes at once: the Lease is
// released only once the server is stopped.

// HandoverAnnotation on the primary Lease is the last planned handover of
// its holder (Handover, as JSON), written by that holder's agent as its
// pod stops.
const HandoverAnnotation = "database.example.com/handover"

// FailoverAnnotation on the primary Lease is "enabled" when the operator
// promotes a replica in place of a primary that fails (failover on, more
// than one instance): only then does a stopping primary release the Lease.
// Anything else (an older operator too) keeps it held, so the restarted
// pod takes it again.
const FailoverAnnotation = "database.example.com/failover"

// HolderUIDAnnotation on the primary Lease is the UID of the pod the
// Lease was given to or last renewed by: a pod's name outlives its
// incarnations, and one deleted without a grace period may still run its
// server on a node that lost the API server.
const HolderUIDAnnotation = "database.example.com/holder-uid"

// Handover is a stopping primary's record (HandoverAnnotation).
type Handover struct {
	// From is the stopping primary.
	From string `json:"from"`
	// Position is its server's last position, read once it was fenced.
	Position engine.Position `json:"position"`
	// Released: Replica had received Position, and the Lease was released.
	Released bool   `json:"released,omitempty"`
	Replica  string `json:"replica,omitempty"`
	// Reason says why the Lease was not released.
	Reason string `json:"reason,omitempty"`
	// At is when the record was written.
	At time.Time `json:"at"`
}

// ParseHandover reads a Lease's handover record; false when there is none.
func ParseHandover(l *coordinationv1.Lease) (Handover, bool) {
	var h Handover
	if l == nil {
		return h, false
	}
	v, ok := l.Annotations[HandoverAnnotation]
	if !ok || json.Unmarshal([]byte(v), &h) != nil || h.From == "" {
		return Handover{}, false
	}
	return h, true
}

// DefaultHandoverTimeout bounds the wait for a replica to receive the
// stopping primary's last writes when the chart does not say (half the
// chart's 60 s grace period: the server's own shutdown has the rest).
const DefaultHandoverTimeout = 30 * time.Second

// stopSlack is what the grace period keeps, after the server stopped,
// for the Lease's release and the agent's own exit.
const stopSlack = 5 * time.Second

// stopServer runs the planned handover when this server is the primary
// (see above), then stops the server with the engine's fast shutdown
// (stop), kills it (kill) when it has not stopped by the time the Lease
// must be released, and only then records the handover on the Lease. The
// whole stays within the grace period (twice the handover bound).
func (a *Agent) stopServer(ctx context.Context, stop, kill func(), done <-chan error) error {
	a.mu.Lock()
	a.stopping = true
	a.mu.Unlock()
	bound := a.cfg.HandoverTimeout
	if bound <= 0 {
		bound = DefaultHandoverTimeout
	}
	start, slack := time.Now(), min(stopSlack, bound/2)
	hctx, cancel := context.WithDeadline(ctx, start.Add(bound))
	h := a.prepareHandover(hctx)
	cancel()
	stop()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Until(start.Add(2*bound - slack))):
		// The Lease must not move while the server may still run.
		a.cfg.Log.Info("the server has not stopped in time: killing it (it is fenced: nothing acknowledged is lost)")
		kill()
		err = <-done
	}
	if h != nil {
		rctx, cancel := context.WithDeadline(ctx, start.Add(2*bound-slack/2))
		a.recordHandover(rctx, *h)
		cancel()
	}
	return err
}

// prepareHandover runs the planned handover's first steps (see above)
// when this agent's server is the writable primary: it fences the server,
// reads its last position and waits for a replica to have it. It returns
// the record to write once the server stopped (nil: nothing to write).
func (a *Agent) prepareHandover(ctx context.Context) *Handover {
	a.mu.Lock()
	primary := a.holdsLocked() && a.running && a.writable
	a.mu.Unlock()
	if !primary {
		return nil
	}
	// The last views may be a few seconds old: a switchover may have just
	// moved the Lease and fenced the server.
	if _, err := a.getLease(ctx); err == nil && !a.holds() {
		return nil
	}
	a.mu.Lock()
	members, failover := a.members, a.failover
	a.mu.Unlock()
	log := a.cfg.Log.WithValues("step", "handover")
	// A fence waits for the sessions it ends (engine.Fence): more than a
	// check's second.
	inst, err := a.openLocal(ctx, engine.DefaultCallTimeout)
	if err != nil {
		log.Error(err, "the pod is stopping: cannot reach the server to fence it; it stops without a handover")
		return nil
	}
	defer inst.Close()
	if st, err := inst.Status(ctx); err == nil && !st.Writable() {
		return nil // fenced or a replica already: nothing to hand over
	}
	if err := inst.Fence(ctx); err != nil {
		log.Error(err, "the pod is stopping: fencing the server failed; it stops without a handover")
		return nil
	}
	a.mu.Lock()
	a.writable = false // the guard must not take the fenced server for a writable one
	a.mu.Unlock()
	st, err := inst.Status(ctx)
	if err != nil {
		log.Error(err, "the pod is stopping: the server is fenced, but its last position cannot be read; it stops without a handover")
		return nil
	}
	log.Info("the pod is stopping: fenced the server, which takes no more writes", "position", st.Applied.String())
	switch {
	case members < 2:
		log.Info("a single instance keeps the primary Lease: its pod starts again as the primary")
		return nil
	case !failover:
		log.Info("failover is off: the primary Lease is kept, and the pod starts again as the primary")
		return nil
	}
	h := &Handover{From: a.cfg.Pod, Position: st.Applied}
	h.Replica, h.Reason = a.waitReceived(ctx, inst, st.Applied, members)
	h.Released = h.Replica != ""
	if h.Released {
		log.Info("a replica received every write: the primary Lease is released once the server stopped, for the operator to promote at once", "replica", h.Replica)
	} else {
		log.Info("no replica received every write in time: keeping the primary Lease; the failover rules apply once it expires", "why", h.Reason)
	}
	return h
}

// waitReceived polls the other members over the peer channel until one is
// a replica that has received pos; it returns that member, or "" and why
// none did before ctx ended.
func (a *Agent) waitReceived(ctx context.Context, local engine.Instance, pos engine.Position, members int) (string, string) {
	i := strings.LastIndex(a.cfg.Pod, "-")
	if i < 0 {
		return "", "the pod's name has no ordinal"
	}
	for round := 0; ; round++ {
		// Once a second: a switchover may move the Lease meanwhile.
		if round%20 == 0 {
			if _, err := a.getLease(ctx); err == nil && !a.holds() {
				return "", "the primary Lease moved meanwhile"
			}
		}
		var seen []string
		for k := 0; k < members; k++ {
			peer := a.cfg.Pod[:i] + "-" + strconv.Itoa(k)
			if peer == a.cfg.Pod {
				continue
			}
			st, err := a.askStatus(ctx, peer)
			switch {
			case err != nil:
				seen = append(seen, fmt.Sprintf("%s: %v", peer, err))
			case st.Role != engine.RoleReplica:
				seen = append(seen, fmt.Sprintf("%s: not a replica", peer))
			default:
				if c, err := local.Compare(st.Received, pos); err == nil && c >= 0 {
					return peer, ""
				}
				seen = append(seen, fmt.Sprintf("%s: at %s", peer, st.Received))
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Sprintf("no replica received %s in time (%s)", pos, strings.Join(seen, "; "))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// recordHandover writes h on the Lease, and releases the Lease when h
// says so, while this pod holds it (each write conditional on the version
// read; a conflict is read again), until ctx ends.
func (a *Agent) recordHandover(ctx context.Context, h Handover) {
	h.At = time.Now().UTC()
	b, err := json.Marshal(h)
	if err != nil {
		a.cfg.Log.Error(err, "encoding the handover record")
		return
	}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		l, err := a.getLease(rctx)
		if err == nil && !a.holds() {
			cancel()
			a.cfg.Log.Info("the primary Lease is no longer this pod's: nothing to hand over", "holder", holderOf(l))
			return
		}
		if err == nil {
			l = l.DeepCopy()
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[HandoverAnnotation] = string(b)
			if h.Released {
				l.Spec.HolderIdentity = nil
				delete(l.Annotations, HolderUIDAnnotation)
			}
			_, err = a.cfg.Leases.Update(rctx, l, metav1.UpdateOptions{})
		}
		cancel()
		switch {
		case err == nil && h.Released:
			a.mu.Lock()
			a.holder, a.holderUID, a.validUntil = "", "", time.Time{}
			a.mu.Unlock()
			a.cfg.Log.Info("released the primary Lease", "replica", h.Replica, "position", h.Position.String())
			return
		case err == nil:
			return
		case !apierrors.IsConflict(err):
			a.cfg.Log.Error(err, "writing the handover record on the primary Lease")
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	a.cfg.Log.Info("the handover record could not be written in time: the failover rules apply once the Lease expires")
}

// afterStop runs once the server stopped with the pod: a clean stop of a
// server that still holds the Lease (a single instance, or no replica
// caught up) says so by dropping its UID from the Lease, so the pod's next
// incarnation takes it at once instead of waiting for it to expire.
func (a *Agent) afterStop(ctx context.Context) {
	if !a.holds() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := a.getLease(ctx)
	if err != nil || !a.holds() {
		return
	}
	l = l.DeepCopy()
	delete(l.Annotations, HolderUIDAnnotation)
	if _, err := a.cfg.Leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		a.cfg.Log.Info("the server stopped; the primary Lease keeps this pod's UID, so the next start waits for it to expire", "error", err.Error())
		return
	}
	a.cfg.Log.Info("the server stopped cleanly; the primary Lease stays this pod's for its next start")
}

// askStatus asks a member's agent for its server's status.
func (a *Agent) askStatus(ctx context.Context, peer string) (engine.Status, error) {
	addr, cfg, err := a.peerTarget(peer)
	if err != nil {
		return engine.Status{}, err
	}
	var st engine.Status
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = call(cctx, http.MethodGet, "/v1/status", addr, a.cfg.PeerToken, cfg, &st)
	return st, err
}

// serveStatus answers GET /v1/status: this member's server, as it
// reports itself now.
func (a *Agent) serveStatus(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(r) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	st, err := a.serverStatus(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// serverStatus asks the local server for its status over a connection of
// its own (the check loop's, unit tests' Check when set).
func (a *Agent) serverStatus(ctx context.Context) (engine.Status, error) {
	if a.cfg.Check != nil {
		return a.cfg.Check(ctx)
	}
	inst, err := a.openLocal(ctx, time.Second)
	if err != nil {
		return engine.Status{}, err
	}
	defer inst.Close()
	return inst.Status(ctx)
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
