package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"

	dbv1 "example.com/database-operator/api/v1"
)

// TestRunSteps: steps run in order, each one done with an Event; a step that
// waits or ends the procedure stops the rest and the run reports it did not
// complete (a switchover must then not re-point anything at its target); a
// failure goes through the step's onFail.
func TestRunSteps(t *testing.T) {
	step := func(name string, out stepOutcome, err error, ran *[]string) haStep {
		return haStep{name: name, run: func() (stepOutcome, error) { *ran = append(*ran, name); return out, err }}
	}
	for _, tt := range []struct {
		name      string
		middle    stepOutcome
		err       error
		completed bool
		ran       []string
		events    []string
		requeue   bool
	}{
		{name: "all done", middle: done("b did"), completed: true, ran: []string{"A", "B", "C"},
			events: []string{"Normal TestA", "Normal TestB", "Normal TestC"}},
		{name: "waits", middle: stepOutcome{did: "b waits", wait: time.Second}, ran: []string{"A", "B"},
			events: []string{"Normal TestA"}, requeue: true},
		{name: "stops", middle: stepOutcome{did: "nothing left", stop: true}, ran: []string{"A", "B"},
			events: []string{"Normal TestA", "Normal TestB"}},
		{name: "another outcome", middle: stepOutcome{did: "b could not", reason: "Skipped", warning: true}, completed: true, ran: []string{"A", "B", "C"},
			events: []string{"Normal TestA", "Warning TestSkipped", "Normal TestC"}},
		{name: "fails", err: errors.New("boom"), ran: []string{"A", "B"}, events: []string{"Normal TestA"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &DatabaseReconciler{Recorder: rec}
			obs := &observed{}
			var ran []string
			steps := []haStep{step("A", done("a did"), nil, &ran), step("B", tt.middle, tt.err, &ran), step("C", done("c did"), nil, &ran)}
			var failed error
			steps[1].onFail = func(err error) error { failed = err; return errors.New("handled: " + err.Error()) }
			completed, err := r.runSteps(context.Background(), newDB(dbv1.EnginePostgreSQL), obs, "Test", steps)
			if completed != tt.completed || !slices.Equal(ran, tt.ran) {
				t.Errorf("completed %v, ran %v; want %v, %v", completed, ran, tt.completed, tt.ran)
			}
			if tt.err != nil && (!errors.Is(failed, tt.err) || err == nil || !strings.HasPrefix(err.Error(), "handled: ")) {
				t.Errorf("failure: onFail got %v, run returned %v", failed, err)
			}
			var got []string
			for len(rec.Events) > 0 {
				f := strings.Fields(<-rec.Events)
				got = append(got, f[0]+" "+f[1])
			}
			if !slices.Equal(got, tt.events) {
				t.Errorf("events %v, want %v", got, tt.events)
			}
			if (obs.requeue > 0) != tt.requeue {
				t.Errorf("requeue %s, want one: %v", obs.requeue, tt.requeue)
			}
		})
	}
}
