package controller

import (
	"cmp"
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
)

// haStep is one named step of a failover or a switchover. run does it and
// says what it did, or that the procedure waits or has nothing left to
// do. onFail says what a failure leaves: nil returns the error as it is; a
// switchover abandons itself (the old primary unfenced) or rolls forward.
type haStep struct {
	name   string
	run    func() (stepOutcome, error)
	onFail func(error) error
}

// stepOutcome is what a step did, for its log line and its Event. wait > 0:
// the step cannot go on yet, and the procedure is looked at again within
// wait. stop: the procedure has nothing left to do. reason names an outcome
// other than the step's own (its Event's reason then, a Warning when
// warning): a fence that found the old primary unreachable did not fence.
type stepOutcome struct {
	did     string
	wait    time.Duration
	stop    bool
	reason  string
	warning bool
}

// done is the outcome of a step that did what it says.
func done(did string) stepOutcome { return stepOutcome{did: did} }

// runSteps runs steps in order. Each step done or ending the procedure
// writes a log line and emits an Event (<procedure><step>): Events expire
// and are merged, the log is the forensic record. A step that waits ends
// the run with a log line and a requeue. It reports whether every step
// ran: a caller must not act on a procedure that stopped early as if it
// had completed.
func (r *DatabaseReconciler) runSteps(ctx context.Context, db *dbv1.Database, obs *observed, procedure string, steps []haStep) (bool, error) {
	logger := log.FromContext(ctx).WithValues("procedure", procedure)
	for _, step := range steps {
		out, err := step.run()
		switch {
		case err != nil:
			logger.Error(err, "step failed", "step", step.name)
			if step.onFail != nil {
				return false, step.onFail(err)
			}
			return false, err
		case out.wait > 0:
			logger.Info("step waits", "step", step.name, "why", out.did, "within", out.wait)
			obs.requeueWithin(out.wait)
			return false, nil
		}
		reason, typ := cmp.Or(out.reason, step.name), corev1.EventTypeNormal
		if out.warning {
			typ = corev1.EventTypeWarning
		}
		logger.Info("step done", "step", step.name, "outcome", reason, "result", out.did)
		r.event(db, typ, procedure+reason, procedure, "%s", out.did)
		if out.stop {
			return false, nil
		}
	}
	return true, nil
}
