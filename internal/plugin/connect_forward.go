package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forwardLocalAddress is where the port-forward listens: this machine
// only, never its other interfaces.
const forwardLocalAddress = "127.0.0.1"

// portForward is a running port-forward to a pod.
type portForward struct {
	// Local is the port it listens on at forwardLocalAddress.
	Local  uint16
	cancel context.CancelFunc
	done   <-chan error
}

// Stop ends the port-forward and returns how it ended: nil, or the lost
// connection to the pod while it ran.
func (pf *portForward) Stop() error {
	pf.cancel()
	return <-pf.done
}

// forward opens a port-forward from a random local port on
// forwardLocalAddress to port of pod (as kubectl port-forward pod/POD
// :PORT). ctx bounds its opening only: it runs until Stop. Errors of the
// connections it carries go to errOut.
func (c *Clients) forward(ctx context.Context, pod string, port int32, errOut io.Writer) (*portForward, error) {
	transport, upgrader, err := spdy.RoundTripperFor(c.Config)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, err)
	}
	url := c.Kube.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(c.Namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)

	runCtx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesWithContext(runCtx, dialer,
		[]string{forwardLocalAddress}, []string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, errOut)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()

	select {
	case <-ready:
	case err := <-done:
		cancel()
		if err == nil { // cannot be: it ends without error only when stopped
			err = errors.New("it ended before it was ready")
		}
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, err)
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, ctx.Err())
	}
	pf := &portForward{cancel: cancel, done: done}
	ports, err := fw.GetPorts()
	if err == nil && len(ports) != 1 {
		err = fmt.Errorf("%d ports forwarded, want 1", len(ports))
	}
	if err != nil {
		_ = pf.Stop()
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, err)
	}
	pf.Local = ports[0].Local
	return pf, nil
}
