package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// A Database deleted with deletionPolicy Retain keeps its volumes; one
// created again under the same name finds them. Instance 0 must not then
// start as the primary whatever it holds: after a failover to instance 2,
// instance 2 holds the newest writes, and instance 0 may hold writes of
// its own nobody else has. So a new Database that finds its claims
// already there adopts them:
//
//   - before its StatefulSet exists it records the kept claims on itself
//     (keptVolumesAnnotation; its pods then start in parallel, each its own
//     data), writes a topology that names no primary (topologyAdoptKey)
//     and a primary Lease with no holder: no server may take writes;
//   - every instance with data starts as it is, read-only and replicating
//     from nobody (the start scripts); one without data waits;
//   - once every kept instance answers, the operator compares their
//     positions (PostgreSQL's timeline and WAL position, MySQL's and
//     MariaDB's GTIDs) and makes the most advanced one the primary (Event
//     KeptVolumesAdopted, naming what each held); the others rejoin it as
//     after a failover (their diverged writes, if any, set aside).

// keptVolumesAnnotation, on a Database, names the claims (comma-separated)
// it found already there when it was created: it adopted them.
const keptVolumesAnnotation = "database.example.com/kept-volumes"

// topologyAdoptKey, in the topology, says that the instances start on kept
// volumes and no primary is chosen yet.
const topologyAdoptKey = "adopt"

// adoptWait is how soon an adoption that waits for its instances looks again.
const adoptWait = 5 * time.Second

// noDataMessage is the termination message of an instance whose kept
// volume holds no data (the start scripts' topology.sh says it): no
// candidate; it clones once a primary is chosen.
const noDataMessage = "no data on this volume"

// adopting: the Database found its volumes kept and has no primary yet
// (none recorded in the topology either).
func adopting(db *dbv1.Database, obs *observed) bool {
	return db.Annotations[keptVolumesAnnotation] != "" && db.Status.CurrentPrimary == "" &&
		(obs == nil || (obs.promoted == "" && obs.recorded == ""))
}

// reconcileKeptVolumes records, before the StatefulSet exists, the claims
// a new Database finds already there (made before it was), and writes the
// topology and Lease that keep every instance read-only until the primary
// is chosen from their data.
func (r *DatabaseReconciler) reconcileKeptVolumes(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if db.Status.CurrentPrimary != "" {
		return nil
	}
	if db.Annotations[keptVolumesAnnotation] == "" {
		sts := &appsv1.StatefulSet{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts); {
		case err == nil:
			return nil // made already: its pods started as a new Database's
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading the StatefulSet: %w", err)
		}
		kept, err := r.keptClaims(ctx, db)
		if err != nil || len(kept) == 0 {
			return err
		}
		patch := client.MergeFrom(db.DeepCopy())
		if db.Annotations == nil {
			db.Annotations = map[string]string{}
		}
		db.Annotations[keptVolumesAnnotation] = strings.Join(kept, ",")
		if err := r.Patch(ctx, db, patch); err != nil {
			return fmt.Errorf("recording the kept volumes %v: %w", kept, err)
		}
		log.FromContext(ctx).Info("found volumes kept from an earlier Database of this name: choosing the primary from their data", "claims", kept)
		r.event(db, corev1.EventTypeNormal, "KeptVolumesFound", "Adopt",
			"Found %s kept from an earlier Database of this name: every instance starts read-only on its data, and the one with the most advanced data becomes the primary",
			strings.Join(kept, ", "))
	}
	if !adopting(db, obs) {
		return nil
	}
	live := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, live); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading the topology: %w", err)
	}
	if p := live.Data[topologyPrimaryKey]; p != "" {
		obs.recorded = p // chosen already: status follows once it serves
		return nil
	}
	// Before any pod starts: a topology naming no primary, a Lease held by
	// no one.
	if err := r.writeTopology(ctx, db, obs); err != nil {
		return err
	}
	return r.reconcileLease(ctx, db, obs)
}

// keptClaims are db's instance claims made before db was (looked for
// before its StatefulSet exists): kept from an earlier Database of the
// same name.
func (r *DatabaseReconciler) keptClaims(ctx context.Context, db *dbv1.Database) ([]string, error) {
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.APIReader.List(ctx, pvcs, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return nil, fmt.Errorf("listing PersistentVolumeClaims: %w", err)
	}
	var kept []string
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		// Timestamps have a second's resolution: a claim of the same second
		// as the Database counts (before its StatefulSet exists, no claim
		// can be its own).
		if pvc.Annotations[recoveryClaimAnnotation] == string(db.UID) {
			continue // made by this Database's recovery
		}
		if pvc.DeletionTimestamp.IsZero() && isVolumeOf(db, pvc) && !pvc.CreationTimestamp.After(db.CreationTimestamp.Time) {
			kept = append(kept, pvc.Name)
		}
	}
	slices.SortFunc(kept, func(a, b string) int { return podOrdinal(a) - podOrdinal(b) })
	return kept, nil
}

// reconcileAdopt chooses the primary among the kept volumes once every
// instance on one answers; until then it waits, and the phases after it
// (which act on a primary) do not run.
func (r *DatabaseReconciler) reconcileAdopt(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if !adopting(db, obs) || r.Instances == nil {
		return nil
	}
	obs.halt = true
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	var cands []candidate
	var empty []string
	for _, claim := range strings.Split(db.Annotations[keptVolumesAnnotation], ",") {
		name := strings.TrimPrefix(claim, volumeClaimTemplate+"-")
		pod := podNamed(pods, name)
		if saysNoData(pod) {
			empty = append(empty, name)
			continue
		}
		c, why := r.adoptionCandidate(ctx, obs, pod)
		if why != "" {
			obs.wait(dbv1.ReasonCreating, fmt.Sprintf("choosing the primary among the kept volumes: waiting for %s (%s)", name, why))
			obs.requeueWithin(adoptWait)
			return nil
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		// Kept, but empty: a new Database's first primary.
		first := podNamed(pods, db.Name+"-0")
		if first == nil {
			obs.requeueWithin(adoptWait)
			return nil
		}
		// Recorded, not promoted: it starts a new database once named,
		// and counts as initialized only once it served.
		if err := r.recordPrimary(ctx, db, first.Name); err != nil {
			return err
		}
		if _, err := r.takeLease(ctx, db, pods, first, nil); err != nil {
			return err
		}
		obs.recorded, obs.halt = first.Name, false
		r.event(db, corev1.EventTypeNormal, "KeptVolumesAdopted", "Adopt", "no kept volume holds data (%s): %s starts a new database", strings.Join(empty, ", "), first.Name)
		return nil
	}
	best, why := mostAdvanced(cands)
	if len(empty) > 0 {
		why += "; no data on " + strings.Join(empty, ", ")
	}
	return r.adopt(ctx, db, obs, pods, best, why)
}

// saysNoData: pod's database container last ended saying its volume holds
// no data.
func saysNoData(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, c := range pod.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
			if t != nil && strings.HasPrefix(t.Message, noDataMessage) {
				return true
			}
		}
	}
	return false
}

// adoptionCandidate is pod's server as it answers (why it cannot be, when
// it does not).
func (r *DatabaseReconciler) adoptionCandidate(ctx context.Context, obs *observed, pod *corev1.Pod) (candidate, string) {
	switch {
	case pod == nil:
		return candidate{}, "no pod yet"
	case !podStarted(pod):
		return candidate{}, "its server has not started"
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		return candidate{}, err.Error()
	}
	st, err := inst.Status(ctx)
	if err != nil {
		return candidate{}, err.Error()
	}
	if st.Writable() {
		return candidate{}, "it takes writes, which no instance may before the primary is chosen"
	}
	return candidate{pod: pod, inst: inst, status: st}, ""
}

// mostAdvanced is the candidate whose data holds every other's (the
// newest timeline and furthest WAL position; the GTID set that contains
// the others), and what the others held. Candidates that cannot be
// ordered against it (they diverged: each holds writes the other lacks)
// are named: they rejoin it with their own writes set aside.
func mostAdvanced(cands []candidate) (candidate, string) {
	best := cands[0]
	for _, c := range cands[1:] {
		if further(c, best) {
			best = c
		}
	}
	var held, diverged []string
	for _, c := range cands {
		if c.pod.Name == best.pod.Name {
			continue
		}
		held = append(held, fmt.Sprintf("%s at %s", c.pod.Name, c.status.Applied))
		if _, err := c.inst.Compare(c.status.Applied, best.status.Applied); errors.Is(err, engine.ErrDiverged) {
			diverged = append(diverged, c.pod.Name)
		}
	}
	why := fmt.Sprintf("%s holds the most advanced data, %s", best.pod.Name, best.status.Applied)
	if len(held) > 0 {
		why += "; the others: " + strings.Join(held, ", ")
	}
	if len(diverged) > 0 {
		why += "; diverged from it (their own writes are set aside when they rejoin): " + strings.Join(diverged, ", ")
	}
	return best, why
}

// further: c's data is further than b's; when they diverged (neither holds
// the other's), the one that holds more, then the lower ordinal: the
// choice never depends on the order looked at.
func further(c, b candidate) bool {
	if cmp, err := c.inst.Compare(c.status.Applied, b.status.Applied); err == nil {
		return cmp > 0
	}
	lc, _ := c.inst.Lag(engine.Position{}, c.status.Applied)
	lb, _ := b.inst.Lag(engine.Position{}, b.status.Applied)
	return lc > lb || (lc == lb && podOrdinal(c.pod.Name) < podOrdinal(b.pod.Name))
}

// adopt makes best the primary: recorded in the topology, the Lease
// handed to it (no one held it), then writable: a PostgreSQL standby is
// promoted (a new timeline), a PostgreSQL former primary, which its start
// script fenced, is restarted (the start script then starts it as the
// primary), MySQL and MariaDB are promoted in place.
func (r *DatabaseReconciler) adopt(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod, best candidate, why string) error {
	name := best.pod.Name
	if err := r.recordPrimary(ctx, db, name); err != nil {
		return fmt.Errorf("recording %s as the primary: %w", name, err)
	}
	restart := db.Spec.Engine == dbv1.EnginePostgreSQL && best.status.Role == engine.RolePrimary
	take := r.takeLease
	if restart {
		take = r.takeLeaseForRestart
	}
	if _, err := take(ctx, db, pods, best.pod, nil); err != nil {
		return err
	}
	switch {
	case restart:
		obs.restartPod(best.pod, "start it as the primary chosen among the kept volumes")
	default:
		if err := best.inst.Promote(ctx); err != nil {
			return fmt.Errorf("promoting %s, the primary chosen among the kept volumes: %w", name, err)
		}
	}
	obs.promoted, obs.halt = name, false
	log.FromContext(ctx).Info("chose the primary among the kept volumes", "primary", name, "why", why)
	r.event(db, corev1.EventTypeNormal, "KeptVolumesAdopted", "Adopt", "%s is the primary: %s", name, why)
	return nil
}
