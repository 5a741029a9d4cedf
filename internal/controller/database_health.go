package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// Default lag bounds of the replication health, used when
// spec.failover.maxLag is unset: far enough that a burst of writes does not
// flip the status, near enough that a replica stuck for hours does.
const (
	defaultPostgresLagBound = 256 << 20 // bytes of WAL
	defaultMySQLLagBound    = 10000     // transactions
)

// healthLagBound is how far behind the primary a replica may be and
// still count as streaming.
func healthLagBound(db *dbv1.Database) int64 {
	if db.Spec.Failover.MaxLag != nil {
		return *db.Spec.Failover.MaxLag
	}
	if db.Spec.Engine == dbv1.EnginePostgreSQL {
		return defaultPostgresLagBound
	}
	return defaultMySQLLagBound
}

// replicationHealth is the ReplicationHealthy condition as one reconcile
// judged it.
type replicationHealth struct {
	status          metav1.ConditionStatus
	reason, message string
}

// observeInstances builds status.instances: every instance's role,
// readiness and, on a replica, what its replication does, judged against
// the primary this reconcile saw writable; and, for a pod that does not
// run, why (diagnose). It changes nothing: an instance that cannot be
// asked is Unknown, never a failure of the reconcile.
func (r *DatabaseReconciler) observeInstances(ctx context.Context, db *dbv1.Database, obs *observed) error {
	pods, err := r.instancePods(ctx, db, obs)
	if err != nil {
		return err
	}
	desired := max(db.Spec.Replicas, 1)
	var list []dbv1.InstanceStatus
	for i := range desired {
		name := fmt.Sprintf("%s-%d", db.Name, i)
		in := dbv1.InstanceStatus{Name: name}
		if pod := podNamed(pods, name); pod != nil {
			in.Role = pod.Labels[labelRole]
			in.Ready = podReady(pod) && pod.DeletionTimestamp.IsZero()
			in.Failure = r.diagnose(ctx, db, pod)
		}
		list = append(list, in)
	}
	obs.instanceStates, obs.instancesObserved = list, true
	obs.replication = r.judgeReplication(ctx, db, obs, pods)
	return nil
}

// judgeReplication fills in each replica's replication state and says
// whether replication as a whole is healthy.
func (r *DatabaseReconciler) judgeReplication(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod) replicationHealth {
	primary := primaryName(db, obs)
	var replicas []*dbv1.InstanceStatus
	for i := range obs.instanceStates {
		if obs.instanceStates[i].Name != primary {
			replicas = append(replicas, &obs.instanceStates[i])
		}
	}
	if len(replicas) == 0 {
		return replicationHealth{metav1.ConditionTrue, dbv1.ReasonNoReplicas, "a single instance: nothing replicates"}
	}
	unknown := func(why string) replicationHealth {
		for _, in := range replicas {
			in.Replication = dbv1.ReplicationUnknown
		}
		return replicationHealth{metav1.ConditionUnknown, dbv1.ReasonReplicationUnknown, why}
	}
	if r.Instances == nil || obs.instances == nil {
		return unknown("the operator does not reach the servers")
	}
	primaryPod, prim, pst, err := writablePrimary(ctx, db, obs, pods)
	if err != nil {
		return unknown(fmt.Sprintf("no primary to judge the replicas against: %v", err))
	}
	target, err := obs.instances.endpoint(ctx, primaryPod)
	if err != nil {
		return unknown(fmt.Sprintf("primary %s has no address: %v", primary, err))
	}
	bound := healthLagBound(db)
	j := replicaJudge{obs: obs, prim: prim, primaryStatus: pst, target: target, primary: primaryPod.Name, bound: bound}
	var stopped, behind []string
	for _, in := range replicas {
		j.judge(ctx, in, podNamed(pods, in.Name))
		switch in.Replication {
		case dbv1.ReplicationStreaming:
		case dbv1.ReplicationCatchingUp:
			behind = append(behind, in.Name)
		default:
			stopped = append(stopped, replicaProblem(in))
		}
	}
	switch {
	case len(stopped) > 0:
		return replicationHealth{metav1.ConditionFalse, dbv1.ReasonReplicaNotReplicating, "not replicating from " + primary + ": " + strings.Join(stopped, "; ")}
	case len(behind) > 0:
		return replicationHealth{metav1.ConditionFalse, dbv1.ReasonReplicationLagOverBound,
			fmt.Sprintf("%s further behind %s than the bound (%d %s)", strings.Join(behind, ", "), primary, bound, lagUnit(db))}
	}
	return replicationHealth{metav1.ConditionTrue, dbv1.ReasonReplicasStreaming,
		fmt.Sprintf("%d replicas stream from %s within the lag bound", len(replicas), primary)}
}

// replicaJudge judges replicas against the primary one reconcile saw
// writable.
type replicaJudge struct {
	obs           *observed
	prim          engine.Instance
	primaryStatus engine.Status
	target        engine.Endpoint
	primary       string
	bound         int64
}

// judge sets one replica's replication state and last error.
func (j replicaJudge) judge(ctx context.Context, in *dbv1.InstanceStatus, pod *corev1.Pod) {
	primary := j.primary
	set := func(state dbv1.ReplicationState, why string) { in.Replication, in.LastError = state, bounded(why) }
	switch {
	case pod == nil:
		set(dbv1.ReplicationUnknown, "its pod does not exist")
		return
	case in.Failure != nil:
		set(dbv1.ReplicationStopped, "its pod does not run: "+in.Failure.Reason)
		return
	case !pod.DeletionTimestamp.IsZero() || !podStarted(pod):
		set(dbv1.ReplicationUnknown, "its server is not running")
		return
	}
	inst, err := j.obs.instances.get(ctx, pod)
	if err != nil {
		set(dbv1.ReplicationUnknown, "its server cannot be reached: "+err.Error())
		return
	}
	st, err := inst.Status(ctx)
	if err != nil {
		set(dbv1.ReplicationUnknown, "its server does not answer: "+err.Error())
		return
	}
	switch {
	case st.Role == engine.RolePrimary:
		set(dbv1.ReplicationStopped, fmt.Sprintf("it runs as a primary, not as a replica of %s", primary))
	case st.Source != "" && !j.target.Is(st.Source):
		set(dbv1.ReplicationStopped, fmt.Sprintf("it replicates from %s, not from %s", st.Source, primary))
	case st.SourceLost != "":
		set(dbv1.ReplicationStopped, "its source no longer holds what it needs next: "+st.SourceLost)
	case !st.Streaming:
		set(dbv1.ReplicationStopped, orDefault(st.ReplicationError, "it is not connected to "+primary))
	case !st.Applying:
		set(dbv1.ReplicationStopped, orDefault(st.ReplicationError, "it does not apply what it receives"))
	default:
		lag, err := j.prim.Lag(st.Applied, j.primaryStatus.Applied)
		if err != nil {
			set(dbv1.ReplicationUnknown, "its lag cannot be measured: "+err.Error())
			return
		}
		in.LagOverBound = lag > j.bound
		if in.LagOverBound {
			set(dbv1.ReplicationCatchingUp, st.ReplicationError)
			return
		}
		set(dbv1.ReplicationStreaming, st.ReplicationError)
	}
	if in.Replication == dbv1.ReplicationStopped {
		log.FromContext(ctx).Info("replica not replicating", "pod", pod.Name, "reason", in.LastError)
	}
}

func replicaProblem(in *dbv1.InstanceStatus) string {
	if in.LastError == "" {
		return fmt.Sprintf("%s is %s", in.Name, in.Replication)
	}
	return fmt.Sprintf("%s is %s (%s)", in.Name, in.Replication, in.LastError)
}

func lagUnit(db *dbv1.Database) string {
	if db.Spec.Engine == dbv1.EnginePostgreSQL {
		return "bytes of WAL"
	}
	return "transactions"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// bounded keeps a message within the status field's bound.
func bounded(s string) string {
	const maxLen = 1024
	if len(s) > maxLen {
		return s[:maxLen-3] + "..."
	}
	return s
}

// setReplicationCondition sets ReplicationHealthy from what the Instances
// phase judged; when the phase did not run, the condition stays as it was.
func setReplicationCondition(st *dbv1.DatabaseStatus, in statusInput) {
	rh := in.obs.replication
	if rh.reason == "" {
		return
	}
	setCondition(st, in.db, dbv1.ConditionReplicationHealthy, rh.status, rh.reason, rh.message)
}

// failingInstances are the instances whose pods do not run, by name.
func failingInstances(list []dbv1.InstanceStatus) []dbv1.InstanceStatus {
	var out []dbv1.InstanceStatus
	for _, in := range list {
		if in.Failure != nil {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// reportReplication emits an Event when ReplicationHealthy changes: a
// Warning naming the replica when it turns False, a Normal one when it is
// back.
func (r *DatabaseReconciler) reportReplication(db *dbv1.Database, st *dbv1.DatabaseStatus) {
	now := meta.FindStatusCondition(st.Conditions, dbv1.ConditionReplicationHealthy)
	if now == nil || now.Status == metav1.ConditionUnknown {
		return
	}
	before := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionReplicationHealthy)
	if before != nil && before.Status == now.Status && before.Reason == now.Reason {
		return
	}
	switch {
	case now.Status == metav1.ConditionFalse:
		r.event(db, corev1.EventTypeWarning, now.Reason, "Observe", "%s", now.Message)
	case before != nil && before.Status == metav1.ConditionFalse:
		r.event(db, corev1.EventTypeNormal, "ReplicationHealthy", "Observe", "%s", now.Message)
	}
}
