package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
)

// The topology ConfigMap tells the instances' start scripts (the chart's
// files/*-start.sh) what the operator decided: which instance is primary
// (the others clone from it, rewind onto it, start read-only) and which
// instances must rebuild their data from it. It is written before any pod
// is restarted to act on it, so a restarting pod always reads the decision.
const (
	topologyPrimaryKey = "primary"
	topologyRebuildKey = "rebuild-" // + pod name; the value is a request token
	// topologyRewindKey asks a former PostgreSQL primary, which starts
	// fenced, to rewind onto the primary (once its diverged WAL range is
	// in an Event).
	topologyRewindKey = "rewind-" // + pod name; the value is a request token
	// topologyInitializedKey is set once the Database has had a serving
	// primary: from then on a primary without data is a lost volume, and
	// the start scripts refuse to initialize an empty database in its place.
	topologyInitializedKey = "initialized"
	// topologyFailoverKey is the last failover (dbv1.FailoverRecord as
	// JSON), written with the new primary before it is promoted, so a
	// failover whose reconcile ended before status said so is still
	// recorded in status.lastFailover once its primary is adopted.
	topologyFailoverKey = "last-failover"
	// topologyPlainKey marks a pod that serves plain text: it started
	// before its Database had a certificate (an operator upgrade) and has
	// not been rolled yet. Until then its replicas connect to it without
	// TLS; every other server is verified. Only the operator writes it.
	topologyPlainKey = "plain-" // + pod name
)

func topologyName(db *dbv1.Database) string { return db.Name + "-topology" }

// reconcileTopology writes the topology ConfigMap when it changed, then
// restarts (deletes; the StatefulSet recreates) the pods that an earlier
// phase found must start over: a former primary that must rewind, an
// instance that must be rebuilt. Volumes are never touched.
func (r *DatabaseReconciler) reconcileTopology(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if err := r.writeTopology(ctx, db, obs); err != nil {
		return err
	}
	for _, pod := range obs.restart {
		if removedByScaleDown(db, obs, pod.Name) {
			// The StatefulSet deletes it as it shrinks and marks its claim
			// for deletion through it (whenScaled): a pod deleted first
			// would leave the claim behind.
			continue
		}
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("restarting %s: %w", pod.Name, err)
		}
		r.event(db, corev1.EventTypeNormal, "InstanceRestarted", "Restart", "Restarted %s to %s", pod.Name, obs.restartWhy[pod.Name])
	}
	return nil
}

// removedByScaleDown: pod's ordinal is one a scale-down removes, and it is
// not the primary (which moves first).
func removedByScaleDown(db *dbv1.Database, obs *observed, pod string) bool {
	primary := db.Status.CurrentPrimary
	if obs.promoted != "" {
		primary = obs.promoted
	}
	return podOrdinal(pod) >= int(max(db.Spec.Replicas, 1)) && pod != primary
}

// recordPrimary writes pod as the primary into the topology before it is
// promoted: a pod that restarts from then on reads the new primary, and
// never rewinds the promoted instance onto the old one.
func (r *DatabaseReconciler) recordPrimary(ctx context.Context, db *dbv1.Database, pod string) error {
	return r.writeTopology(ctx, db, &observed{promoted: pod})
}

// recordFailover is recordPrimary for a failover: the record goes with it.
func (r *DatabaseReconciler) recordFailover(ctx context.Context, db *dbv1.Database, f *dbv1.FailoverRecord) error {
	return r.writeTopology(ctx, db, &observed{promoted: f.To, failover: f})
}

// writeTopology applies the topology obs calls for, when it differs from
// the live one.
func (r *DatabaseReconciler) writeTopology(ctx context.Context, db *dbv1.Database, obs *observed) error {
	live := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, live)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading topology: %w", err)
	}
	want := desiredTopology(db, obs, live.Data)
	if maps.Equal(want, live.Data) {
		return nil
	}
	// About to write: what the cache holds may be old (a watch that has
	// not caught up since the API server came back), and the record must
	// never go back on a promotion it has not seen.
	if r.APIReader != nil {
		fresh := &corev1.ConfigMap{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, fresh)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading topology: %w", err)
		}
		if want = desiredTopology(db, obs, fresh.Data); maps.Equal(want, fresh.Data) {
			return nil
		}
		if recorded := fresh.Data[topologyPrimaryKey]; obs.promoted == "" && recorded != "" && recorded != want[topologyPrimaryKey] {
			if writable, _ := r.servesWrites(ctx, db, obs, recorded); writable {
				return fmt.Errorf("the topology names %s the primary, which serves writes, while status names %s: the record stays (the next reconcile adopts %s)",
					recorded, want[topologyPrimaryKey], recorded)
			}
			// A failover records its candidate after it took the Lease in
			// its name and before it promotes it: a promotion that failed
			// half-way (the candidate's server stopped under it) leaves a
			// server that does not serve writes yet may have taken some.
			// The Failover phase finishes that move; going back on it here
			// pointed the services at the old primary for a while.
			l := &coordinationv1.Lease{}
			if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading the primary Lease: %w", err)
			} else if err == nil && holderOf(l) == recorded {
				return fmt.Errorf("the topology and the primary Lease name %s the primary while status names %s: the record stays (the Failover phase finishes the move to %s)",
					recorded, want[topologyPrimaryKey], recorded)
			}
		}
	}
	return r.applyTopology(ctx, db, want)
}

// servesWrites says whether the named instance's server answers as a
// writable primary now: false when its pod is missing or going away, or
// the server cannot be reached (nothing is decided on what cannot be seen).
func (r *DatabaseReconciler) servesWrites(ctx context.Context, db *dbv1.Database, obs *observed, name string) (bool, error) {
	if obs.instances == nil {
		return false, nil
	}
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return false, err
	}
	for i := range pods {
		if pods[i].Name != name || !pods[i].DeletionTimestamp.IsZero() {
			continue
		}
		inst, err := obs.instances.get(ctx, &pods[i])
		if err != nil {
			return false, nil
		}
		st, err := inst.Status(ctx)
		return err == nil && st.Writable(), nil
	}
	return false, nil
}

// desiredTopology is the primary plus every rebuild and rewind request,
// old ones kept:
// a start script acts on a token once (it records the last one it carried
// out on the volume), so a kept token costs nothing.
func desiredTopology(db *dbv1.Database, obs *observed, live map[string]string) map[string]string {
	want := map[string]string{topologyPrimaryKey: primaryName(db, obs)}
	if adopting(db, obs) {
		// Kept volumes and no primary chosen yet: none is named.
		want = map[string]string{topologyAdoptKey: "true"}
	}
	if db.Status.CurrentPrimary != "" {
		want[topologyInitializedKey] = "true"
	}
	for k, v := range live {
		if strings.HasPrefix(k, topologyRebuildKey) || strings.HasPrefix(k, topologyRewindKey) || k == topologyFailoverKey {
			want[k] = v
		}
	}
	if obs.failover != nil {
		if b, err := json.Marshal(obs.failover); err == nil {
			want[topologyFailoverKey] = string(b)
		}
	}
	for pod, token := range obs.rebuild {
		want[topologyRebuildKey+pod] = token
	}
	for pod, token := range obs.rewind {
		want[topologyRewindKey+pod] = token
	}
	for i := range obs.pods {
		if podServerName(db, &obs.pods[i]) == "" && obs.pods[i].Spec.Hostname != "" {
			want[topologyPlainKey+obs.pods[i].Name] = "true"
		}
	}
	return want
}

func (r *DatabaseReconciler) applyTopology(ctx context.Context, db *dbv1.Database, data map[string]string) error {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(db.Namespace)
	u.SetName(topologyName(db))
	labels := selectorLabels(db)
	labels[labelManagedBy] = managedBy // in the operator's cache
	u.SetLabels(labels)
	d := map[string]any{}
	for k, v := range data {
		d[k] = v
	}
	u.Object["data"] = d
	if err := stamp(db, u); err != nil {
		return err
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing topology: %w", err)
	}
	return nil
}

// reconcilePrimaryRecord makes status.currentPrimary agree with the durable
// record of the primary: the topology, written before every promotion.
// They differ when a reconcile promoted a server and ended before status
// said so (the operator killed or its leadership lost after the promotion,
// a failed status write). A recorded server that answers as a writable
// primary is the primary: status follows it, so Rejoin fences the other
// one and never the server the replicas follow. One that does not was
// never promoted: nothing changes and the Topology phase writes status's
// primary back into the record.
// failoverRecordedTo is the failover the topology records to the named
// instance when status has not recorded it yet (nil otherwise).
func failoverRecordedTo(db *dbv1.Database, topology map[string]string, to string) *dbv1.FailoverRecord {
	var f dbv1.FailoverRecord
	if err := json.Unmarshal([]byte(topology[topologyFailoverKey]), &f); err != nil || f.To != to ||
		(db.Status.LastFailover != nil && db.Status.LastFailover.Time.Equal(&f.Time)) {
		return nil
	}
	return &f
}

func (r *DatabaseReconciler) reconcilePrimaryRecord(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if r.Instances == nil || db.Status.CurrentPrimary == "" {
		return nil
	}
	live := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: topologyName(db)}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading topology: %w", err)
	}
	recorded, current := live.Data[topologyPrimaryKey], db.Status.CurrentPrimary
	if recorded == "" || recorded == current {
		return nil
	}
	if writable, err := r.servesWrites(ctx, db, obs, recorded); !writable {
		return err // not promoted, or cannot tell now: nothing changes
	}
	obs.promoted = recorded
	// A failover whose status write was lost is recorded all the same.
	obs.failover = failoverRecordedTo(db, live.Data, recorded)
	log.FromContext(ctx).Info("adopting the recorded primary", "recorded", recorded, "status", current)
	r.event(db, corev1.EventTypeWarning, "PrimaryRecordRepaired", "Adopt",
		"status named %s the primary while the topology names %s, which serves as a writable primary (promoted by a reconcile that ended before status said so): %s is the primary",
		current, recorded, recorded)
	return nil
}
