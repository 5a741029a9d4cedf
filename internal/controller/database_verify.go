package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// verifyTimeout bounds the check of the primary's server: a status read
// must not hold up the reconcile for long.
const verifyTimeout = 5 * time.Second

// primaryCheck is what the operator learned from the primary's server
// itself in this reconcile: a ready pod only says its probe passed.
type primaryCheck struct {
	verified bool   // the server answered as a writable primary
	detail   string // why it is not verified
}

// verifyPrimary asks the ready primary's server whether it takes writes, so
// the Ready condition says "serves writes" only when the server said so and
// "not verified" otherwise.
func (r *DatabaseReconciler) verifyPrimary(ctx context.Context, db *dbv1.Database, obs *observed) {
	primary := primaryName(db, obs)
	var pod *corev1.Pod
	for i := range obs.pods {
		if p := &obs.pods[i]; p.Name == primary && p.DeletionTimestamp.IsZero() && podReady(p) {
			pod = p
		}
	}
	if pod == nil {
		return
	}
	check := func() primaryCheck {
		if r.Instances == nil {
			return primaryCheck{detail: "the operator does not connect to the servers"}
		}
		ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
		defer cancel()
		inst, err := obs.instances.get(ctx, pod)
		if err != nil {
			return primaryCheck{detail: err.Error()}
		}
		st, err := inst.Status(ctx)
		switch {
		case err != nil:
			return primaryCheck{detail: err.Error()}
		case st.Role != engine.RolePrimary:
			return primaryCheck{detail: fmt.Sprintf("its server answers as a %s", st.Role)}
		case st.ReadOnly:
			return primaryCheck{detail: "its server is read-only"}
		}
		return primaryCheck{verified: true}
	}
	obs.primaryCheck = check()
	if !obs.primaryCheck.verified {
		log.FromContext(ctx).V(1).Info("primary not verified", "pod", pod.Name, "detail", obs.primaryCheck.detail)
	}
}

// readyMessage is the Ready condition's message when every instance is ready.
func readyMessage(obs *observed, ready, desired int32, primary string) string {
	if obs.primaryCheck.verified {
		return fmt.Sprintf("%d/%d instances ready; primary %s serves writes", ready, desired, primary)
	}
	why := obs.primaryCheck.detail
	if why == "" {
		why = "not checked"
	}
	return fmt.Sprintf("%d/%d instances ready; primary %s: serving writes not verified (%s)", ready, desired, primary, why)
}
