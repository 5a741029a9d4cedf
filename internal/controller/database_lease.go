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
// as it arrives. A renewal asks for no reconcile; a Lease that changed
// hands or was released by a stopping primary (its planned handover) does:
// the operator promotes at once.
func (c *leaseClock) sightings() handler.EventHandler {
	see := func(o client.Object) *coordinationv1.Lease {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Labels[labelName] == chartName {
			c.firstSeen(l, time.Now())
			return l
		}
		return nil
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			l := see(e.ObjectNew)
			old, ok := e.ObjectOld.(*coordinationv1.Lease)
			if l == nil || !ok || l.Labels[labelInstance] == "" {
				return
			}
			if holderOf(old) != holderOf(l) || old.Annotations[agent.HandoverAnnotation] != l.Annotations[agent.HandoverAnnotation] {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.Namespace, Name: l.Labels[labelInstance]}})
			}
		},
	}
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// holderUID is the incarnation of the holder the Lease names ("": any).
func holderUID(l *coordinationv1.Lease) types.UID {
	return types.UID(l.Annotations[agent.HolderUIDAnnotation])
}

// handedForRestartAnnotation, on the primary Lease, says when (the
// operator's clock, RFC 3339) the operator handed it to its holder by name
// alone (takeLeaseForRestart) and restarted that pod: the failover waits
// for the restart (primaryRestarting), through the agent of its next
// incarnation taking the Lease and starting the server. The next handover
// to an incarnation removes it.
const handedForRestartAnnotation = "database.example.com/handed-for-restart"

// handedForRestartAt is when the Lease was handed to its holder for a
// restart the operator made, if it was.
func handedForRestartAt(l *coordinationv1.Lease) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, l.Annotations[handedForRestartAnnotation])
	return at, err == nil
}

// reconcileLease makes the primary Lease exist, naming the recorded
// primary, with the operator's duration and the instance count the agents
// read (a single instance keeps writing while the API server is away). It
// never moves the Lease: only failover and switchover do.
func (r *DatabaseReconciler) reconcileLease(ctx context.Context, db *dbv1.Database, obs *observed) error {
	l := &coordinationv1.Lease{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l)
	members := strconv.Itoa(int(instanceCount(db, obs)))
	maxLag := "" // no bound: no annotation
	if m := db.Spec.Failover.MaxLag; m != nil {
		maxLag = strconv.FormatInt(*m, 10)
	}
	failover := "disabled"
	if failoverEnabled(db) {
		failover = "enabled"
	}
	seconds := int32(r.leaseDuration() / time.Second)
	if apierrors.IsNotFound(err) {
		now := metav1.NewMicroTime(r.now())
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: leaseName(db), Namespace: db.Namespace, Labels: leaseLabels(db),
				Annotations: leaseAnnotations(nil, members, maxLag, failover)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(primaryName(db, obs)), LeaseDurationSeconds: &seconds,
				AcquireTime: &now, RenewTime: &now},
		}
		if adopting(db, obs) {
			l.Spec.HolderIdentity = nil // nobody takes writes before the primary is chosen
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
	want := leaseAnnotations(l.Annotations, members, maxLag, failover)
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

// instanceCount is how many instances the Database has or is about to
// have: what its spec asks for and what its StatefulSet runs, whichever
// is more (a scale-down keeps the primary's instance until it moved).
func instanceCount(db *dbv1.Database, obs *observed) int32 {
	n := instancesToRun(db)
	if sts := obs.statefulSet; sts != nil {
		n = max(n, ptr.Deref(sts.Spec.Replicas, 0), sts.Status.Replicas)
	}
	return n
}

// leaseAnnotations are a Lease's annotations with what the agents read
// from it: the instance count, spec.failover.maxLag (absent: no bound) and
// whether a replica is promoted when the primary fails (a stopping primary
// releases the Lease only then).
func leaseAnnotations(have map[string]string, members, maxLag, failover string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	out[agent.MembersAnnotation] = members
	out[agent.FailoverAnnotation] = failover
	delete(out, agent.MaxLagAnnotation)
	if maxLag != "" {
		out[agent.MaxLagAnnotation] = maxLag
	}
	return out
}

// takeLease hands the primary Lease to pod before it is promoted. It does
// so at once when the Lease is free (released by a stopping primary's
// agent, once its server was fenced), already this pod's, or names the
// incarnation of a pod whose server was just seen taking no writes
// (quiet: that pod, nil for none: fenced, or a read-only replica);
// otherwise only once the Lease has expired, and until then it returns
// how long is left. A pod's name outlives its incarnations: a fence of a
// pod's new incarnation says nothing of an older one the Lease may still
// name (deleted without a grace period, on a node that lost the API
// server). The write is conditional on the version read: a holder that
// renewed meanwhile keeps the Lease. It names pod's incarnation, and drops
// the last handover's record.
func (r *DatabaseReconciler) takeLease(ctx context.Context, db *dbv1.Database, pods []corev1.Pod, pod, quiet *corev1.Pod) (time.Duration, error) {
	return r.takeLeaseAs(ctx, db, pods, pod, quiet, pod.UID)
}

// takeLeaseForRestart hands the Lease to pod, which the operator restarts
// right after to start its server as the primary: to whichever
// incarnation of it runs next. Naming the running one would have the
// next wait for that one's Lease to run out (about 20 s without writes),
// and a graceful restart's replacement starts only once the kubelet
// stopped the running one. That one's server is fenced (a former primary
// on a kept volume, or one a failover fenced), so it takes no writes
// meanwhile; a renewal of its own names it again, and the next
// incarnation then waits for it as before.
func (r *DatabaseReconciler) takeLeaseForRestart(ctx context.Context, db *dbv1.Database, pods []corev1.Pod, pod, quiet *corev1.Pod) (time.Duration, error) {
	return r.takeLeaseAs(ctx, db, pods, pod, quiet, "")
}

func (r *DatabaseReconciler) takeLeaseAs(ctx context.Context, db *dbv1.Database, pods []corev1.Pod, pod, quiet *corev1.Pod, incarnation types.UID) (time.Duration, error) {
	l := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l); err != nil {
		return 0, fmt.Errorf("reading the primary Lease: %w", err)
	}
	holder, uid := holderOf(l), holderUID(l)
	if holder == pod.Name && (uid == "" || (uid == pod.UID && incarnation != "")) {
		return 0, nil
	}
	if holder == pod.Name && uid == pod.UID {
		// Already the running incarnation's, which is fenced: it is
		// handed to the next.
		quiet = pod
	}
	stopped := quiet != nil && holder == quiet.Name && (uid == "" || uid == quiet.UID)
	if holder != "" && !stopped && l.Annotations[agent.MembersSeenAnnotation] == "1" && l.Annotations[agent.MembersAnnotation] != "1" {
		return 0, fmt.Errorf("%s's agent counted itself the only instance when it last renewed the primary Lease (before a scale-up): "+
			"alone, it keeps taking writes while it cannot reach the API server, so its Lease never safely expires; "+
			"nothing is promoted until %s can be fenced or its agent renews", holder, holder)
	}
	if holder != "" && !stopped {
		d := r.longestLeaseDuration(l, pods)
		now := time.Now()
		if left := r.leases.firstSeen(l, now).Add(d + agent.Margin(d)).Sub(now); left > 0 {
			return left, nil
		}
	}
	r.nameHolder(l, pod.Name, incarnation)
	if err := r.Update(ctx, l); err != nil {
		return 0, fmt.Errorf("handing the primary Lease from %q to %s: %w", holder, pod.Name, err)
	}
	log.FromContext(ctx).Info("handed the primary Lease over", "from", holder, "to", pod.Name, "holderStopped", stopped)
	return 0, nil
}

// nameHolder makes l name the pod, and its incarnation ("" for any), as
// newly acquired; the last handover's record goes.
func (r *DatabaseReconciler) nameHolder(l *coordinationv1.Lease, pod string, incarnation types.UID) {
	now := metav1.NewMicroTime(r.now())
	l.Spec.HolderIdentity = ptr.To(pod)
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	if incarnation != "" {
		l.Annotations[agent.HolderUIDAnnotation] = string(incarnation)
		delete(l.Annotations, handedForRestartAnnotation)
	} else {
		delete(l.Annotations, agent.HolderUIDAnnotation)
		l.Annotations[handedForRestartAnnotation] = now.UTC().Format(time.RFC3339)
	}
	delete(l.Annotations, agent.HandoverAnnotation)
}

// longestLeaseDuration is the longest Lease duration the holder's agent
// may be using: the Lease's own, the operator's, the one the holder last
// renewed with, and the one each instance pod was started with (an agent never uses a shorter one than its pod
// says: an operator restarted with a shorter duration must not promote
// before a primary's guard expires).
func (r *DatabaseReconciler) longestLeaseDuration(l *coordinationv1.Lease, pods []corev1.Pod) time.Duration {
	d := max(r.leaseDuration(), time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0))*time.Second)
	if s, err := strconv.Atoi(l.Annotations[agent.HolderDurationAnnotation]); err == nil {
		d = max(d, time.Duration(s)*time.Second)
	}
	for i := range pods {
		d = max(d, podLeaseDuration(&pods[i]))
	}
	return d
}

// podLeaseDuration is the Lease duration pod's agent was started with
// (AGENT_LEASE_DURATION in its database container; 0 when not set).
func podLeaseDuration(pod *corev1.Pod) time.Duration {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "AGENT_LEASE_DURATION" {
				if d, err := time.ParseDuration(e.Value); err == nil {
					return d
				}
			}
		}
	}
	return 0
}

// AskPromoting tells the agent at host (the candidate's address) that the
// operator is about to promote its server; see agent.AskPromoting.
// With cfg the peer channel is TLS, the agent verified with it.
type AskPromoting func(ctx context.Context, host, token string, cfg *tls.Config) (agent.Promoting, error)

// AgentPromoting is AskPromoting over the agents' peer channel.
func AgentPromoting(ctx context.Context, host, token string, cfg *tls.Config) (agent.Promoting, error) {
	return agent.AskPromoting(ctx, net.JoinHostPort(host, strconv.Itoa(agent.PeerPort)), token, cfg)
}

// AskArchiver reads the binary log archiver of the agent at host.
type AskArchiver func(ctx context.Context, host, token string, cfg *tls.Config) (agent.BinlogArchiving, error)

// AgentArchiver is AskArchiver over the agents' peer channel.
func AgentArchiver(ctx context.Context, host, token string, cfg *tls.Config) (agent.BinlogArchiving, error) {
	return agent.AskArchiver(ctx, net.JoinHostPort(host, strconv.Itoa(agent.PeerPort)), token, cfg)
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
