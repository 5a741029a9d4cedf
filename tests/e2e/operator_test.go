package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"example.com/database-operator/internal/controller"
)

// operator is the operator under test, run in this process as its
// Deployment's pod would run it. A test may kill it at a chosen API
// request (killAt) and start a new one, as when the pod dies or another
// replica takes the leadership: the operator's own code has no hook for
// it, the kill is decided here, between the operator and the API server.
type operator struct {
	cfg    *rest.Config
	scheme *runtime.Scheme
	opts   controller.Options
	// namespaces it manages (WATCH_NAMESPACES); none: all.
	namespaces []string

	mu      sync.Mutex
	ctx     context.Context // of the first start; restarts use it too
	stop    context.CancelFunc
	done    chan error
	trigger func(*http.Request) bool
	// after: the matched request reaches the API server before the kill
	// (the write happened; its answer never arrives).
	after  bool
	killed chan struct{}
	// dead: killed at a request; a dead process sends nothing more, so
	// every later request of the old manager is refused too.
	dead bool
}

var op *operator

// newOperator wraps cfg so that every request of the operator passes the
// kill switch.
func newOperator(cfg *rest.Config, scheme *runtime.Scheme, opts controller.Options) *operator {
	o := &operator{scheme: scheme, opts: opts}
	o.cfg = rest.CopyConfig(cfg)
	o.cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return killSwitch{o: o, next: rt} })
	return o
}

// start runs a new manager with the operator's reconcilers.
func (o *operator) start(ctx context.Context) error {
	o.mu.Lock()
	o.dead = false // a new process
	o.mu.Unlock()
	mgr, err := ctrl.NewManager(o.cfg, ctrl.Options{
		Scheme:                 o.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(o.namespaces),
		// A restarted operator registers its controllers again in this
		// process; in a cluster it is a new process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	if err := controller.Setup(mgr, o.opts); err != nil {
		return err
	}
	o.mu.Lock()
	if o.ctx == nil {
		o.ctx = ctx
	}
	ctx, cancel := context.WithCancel(o.ctx)
	done := make(chan error, 1)
	o.stop, o.done = cancel, done
	o.mu.Unlock()
	go func() { done <- mgr.Start(ctx) }()
	return nil
}

// restart starts a new manager if none runs (after a kill).
func (o *operator) restart() error {
	o.mu.Lock()
	running, ctx := o.stop != nil, o.ctx
	o.mu.Unlock()
	if running {
		return nil
	}
	return o.start(ctx)
}

// kill stops the manager and waits until it has stopped.
func (o *operator) kill() {
	o.mu.Lock()
	stop, done := o.stop, o.done
	o.stop = nil
	o.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "operator stopped:", err)
	}
}

// killAt arms the switch: the first request for which match is true is
// refused (it never reaches the API server) and the operator is killed.
// The returned channel closes once it is dead.
func (o *operator) killAt(match func(*http.Request) bool) <-chan struct{} {
	return o.arm(match, false)
}

// killAfter is killAt where the matched request reaches the API server
// first: the operator dies just after that write.
func (o *operator) killAfter(match func(*http.Request) bool) <-chan struct{} {
	return o.arm(match, true)
}

func (o *operator) arm(match func(*http.Request) bool, after bool) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trigger, o.after, o.killed = match, after, make(chan struct{})
	return o.killed
}

// disarm removes an armed switch that has not fired.
func (o *operator) disarm() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trigger = nil
}

var errKilled = errors.New("the operator was killed before this request (test kill switch)")

type killSwitch struct {
	o    *operator
	next http.RoundTripper
}

func (k killSwitch) RoundTrip(r *http.Request) (*http.Response, error) {
	k.o.mu.Lock()
	match, after, killed, dead := k.o.trigger, k.o.after, k.o.killed, k.o.dead
	fire := !dead && match != nil && match(r)
	if fire {
		k.o.trigger, k.o.dead = nil, true
	}
	k.o.mu.Unlock()
	if dead {
		return nil, errKilled
	}
	if fire {
		if after {
			if resp, err := k.next.RoundTrip(r); err == nil {
				_ = resp.Body.Close()
			}
		}
		// Killing waits for the reconcile that made this request: not here.
		go func() {
			k.o.kill()
			close(killed)
		}()
		return nil, errKilled
	}
	return k.next.RoundTrip(r)
}

// restartOperatorWith restarts the operator with its options changed by
// change (as an operator upgraded or started with other flags), and
// restarts it with the options it had when t ends.
func restartOperatorWith(t testing.TB, change func(*controller.Options)) {
	t.Helper()
	op.kill()
	saved := op.opts
	t.Cleanup(func() {
		op.kill()
		op.opts = saved
		if err := op.restart(); err != nil {
			t.Error(err)
		}
	})
	change(&op.opts)
	if err := op.restart(); err != nil {
		t.Fatal(err)
	}
}
