package controller

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/engine"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update,namespace=system

// The primary Lease (<name>-primary) names the one server that may take
// writes. The instance agent of the pod it names renews it while its server
// answers, and stops that server when it cannot prove it still holds it
// (internal/agent). The operator creates the Lease and moves it, never
// renews it: to the new primary before promoting it, at once when the old
// primary is fenced, otherwise only once the Lease has expired by the
// operator's own clock.

func leaseName(db *dbv1.Database) string { return db.Name + "-primary" }

// leaseLabels select the Lease with the Database's objects, and let the
// operator's cache (which holds only what it manages) see it.
func leaseLabels(db *dbv1.Database) map[string]string {
	l := selectorLabels(db)
	l[labelManagedBy] = managedBy
	return l
}

// leaseDuration is the primary Lease's duration (LeaseDuration, or the
// agent's default).
func (r *DatabaseReconciler) leaseDuration() time.Duration {
	if r.LeaseDuration > 0 {
		return r.LeaseDuration
	}
	return agent.DefaultLeaseDuration
}

// leaseClock remembers when the operator first saw each version of each
// primary Lease, on its monotonic clock. A Lease has expired once its
// duration plus the margin has passed since its current version was first
// seen: the agent stopped taking writes at least two margins before.
// After an operator restart every Lease is new to it, so it waits the
// whole time again: safe, never shorter.
type leaseClock struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]leaseSighting
}

type leaseSighting struct {
	version string
	at      time.Time
}

// firstSeen records l's version and returns when it was first seen.
func (c *leaseClock) firstSeen(l *coordinationv1.Lease, now time.Time) time.Time {
	if c == nil {
		return now // a reconciler without a clock sees every Lease anew
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[types.NamespacedName]leaseSighting{}
	}
	key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
	s, ok := c.seen[key]
	if !ok || s.version != l.ResourceVersion {
		s = leaseSighting{version: l.ResourceVersion, at: now}
		c.seen[key] = s
	}
	return s.at
}

// sightings is a watch handler that records every primary Lease version
// as it arrives, and asks for no reconcile.
func (c *leaseClock) sightings() handler.EventHandler {
	see := func(o client.Object) {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Labels[labelName] == chartName {
			c.firstSeen(l, time.Now())
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.ObjectNew)
		},
	}
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// reconcileLease makes the primary Lease exist, naming the recorded
// primary, with the operator's duration and the instance count the agents
// read (a single instance keeps writing while the API server is away). It
// never moves the Lease: only failover and switchover do.
func (r *DatabaseReconciler) reconcileLease(ctx context.Context, db *dbv1.Database, obs *observed) error {
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l)
	members := strconv.Itoa(int(max(db.Spec.Replicas, 1)))
	maxLag := "" // no bound: no annotation
	if m := db.Spec.Failover.MaxLag; m != nil {
		maxLag = strconv.FormatInt(*m, 10)
	}
	seconds := int32(r.leaseDuration() / time.Second)
	if apierrors.IsNotFound(err) {
		now := metav1.NewMicroTime(r.now())
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: leaseName(db), Namespace: db.Namespace, Labels: leaseLabels(db),
				Annotations: leaseAnnotations(nil, members, maxLag)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(primaryName(db, obs)), LeaseDurationSeconds: &seconds,
				AcquireTime: &now, RenewTime: &now},
		}
		if err := controllerutil.SetControllerReference(db, l, r.Scheme); err != nil {
			return err
		}
		err := r.Create(ctx, l)
		if apierrors.IsAlreadyExists(err) {
			// There, but not in the cache: made without the labels the
			// cache selects on. Label it; its holder stays.
			live := &coordinationv1.Lease{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(l), live); err != nil {
				return fmt.Errorf("reading the primary Lease: %w", err)
			}
			if live.Labels == nil {
				live.Labels = map[string]string{}
			}
			maps.Copy(live.Labels, leaseLabels(db))
			if err := r.Update(ctx, live); err != nil {
				return fmt.Errorf("labelling the primary Lease: %w", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating the primary Lease: %w", err)
		}
		log.FromContext(ctx).Info("created the primary Lease", "holder", primaryName(db, obs))
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the primary Lease: %w", err)
	}
	want := leaseAnnotations(l.Annotations, members, maxLag)
	if maps.Equal(l.Annotations, want) && ptr.Deref(l.Spec.LeaseDurationSeconds, 0) == seconds {
		return nil
	}
	l.Annotations = want
	l.Spec.LeaseDurationSeconds = &seconds
	if err := r.Update(ctx, l); err != nil {
		return fmt.Errorf("updating the primary Lease: %w", err)
	}
	return nil
}

// leaseAnnotations are a Lease's annotations with what the agents read
// from it: the instance count and spec.failover.maxLag (absent: no bound).
func leaseAnnotations(have map[string]string, members, maxLag string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	out[agent.MembersAnnotation] = members
	delete(out, agent.MaxLagAnnotation)
	if maxLag != "" {
		out[agent.MaxLagAnnotation] = maxLag
	}
	return out
}

// takeLease hands the primary Lease to pod before it is promoted. It does
// so at once when the Lease is free, already pod's, or its holder's server
// was just fenced (fenced: it takes no writes, whatever its agent does);
// otherwise only once the Lease has expired, and until then it returns how
// long is left. The write is conditional on the version read: a holder
// that renewed meanwhile keeps the Lease.
func (r *DatabaseReconciler) takeLease(ctx context.Context, db *dbv1.Database, pod string, fenced bool) (time.Duration, error) {
	l := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l); err != nil {
		return 0, fmt.Errorf("reading the primary Lease: %w", err)
	}
	holder := holderOf(l)
	if holder == pod {
		return 0, nil
	}
	if holder != "" && !fenced {
		d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, int32(agent.DefaultLeaseDuration/time.Second))) * time.Second
		now := time.Now()
		if left := r.leases.firstSeen(l, now).Add(d + agent.Margin(d)).Sub(now); left > 0 {
			return left, nil
		}
	}
	now := metav1.NewMicroTime(r.now())
	l.Spec.HolderIdentity = ptr.To(pod)
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	if err := r.Update(ctx, l); err != nil {
		return 0, fmt.Errorf("handing the primary Lease from %q to %s: %w", holder, pod, err)
	}
	log.FromContext(ctx).Info("handed the primary Lease over", "from", holder, "to", pod, "holderFenced", fenced)
	return 0, nil
}

// AskPromoting tells the agent at host (the candidate's address) that the
// operator is about to promote its server; see agent.AskPromoting.
// With cfg the peer channel is TLS, the agent verified with it.
type AskPromoting func(ctx context.Context, host, token string, cfg *tls.Config) (agent.Promoting, error)

// AgentPromoting is AskPromoting over the agents' peer channel.
func AgentPromoting(ctx context.Context, host, token string, cfg *tls.Config) (agent.Promoting, error) {
	return agent.AskPromoting(ctx, net.JoinHostPort(host, strconv.Itoa(agent.PeerPort)), token, cfg)
}

// failsafeHold is how long the candidate must wait before its promotion:
// while the API server was unreachable for the old primary, the candidate
// may have confirmed it (the failsafe), letting it take writes until that
// confirmation runs out. The candidate stops confirming from this call on.
func (r *DatabaseReconciler) failsafeHold(ctx context.Context, obs *observed, pod *corev1.Pod, repl engine.Credentials) (time.Duration, error) {
	if r.Agents == nil {
		return 0, nil
	}
	ep, err := obs.instances.endpoint(ctx, pod)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	// The agent serves its peer channel with the pod's certificate (a pod
	// without one, not rolled yet, in plain HTTP), reached at its address
	// and verified by its DNS name.
	var opts engine.Options
	if err := obs.instances.connector.tlsOptions(ctx, obs.instances.db, ep, &opts); err != nil {
		return 0, err
	}
	p, err := r.Agents(ctx, ep.Host, agent.PeerToken(repl.Password), opts.TLS)
	if err != nil {
		return 0, fmt.Errorf("asking %s's agent whether it confirmed another primary: %w", pod.Name, err)
	}
	return time.Duration(p.RemainingMillis) * time.Millisecond, nil
}
