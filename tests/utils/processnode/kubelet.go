package processnode

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// DefaultKubeletPort is where the node serves the kubelet's API.
const DefaultKubeletPort = 10250

// The protocols the API server speaks to a kubelet for exec and
// port-forward (it translates kubectl's WebSockets into these).
const (
	execProtocolV4      = "v4.channel.k8s.io"
	portForwardProtocol = "portforward.k8s.io"
)

// serveKubelet serves the part of the kubelet's API that kubectl reaches
// through the API server: containerLogs (logs, --previous, --follow,
// --tail, --limit-bytes), exec (without a terminal) and portForward. With
// Options.KubeletClientCA only clients with a certificate of that CA (the
// API server's) are served: a pod on the bridge must not exec into another.
func (n *Node) serveKubelet(ctx context.Context) error {
	cert, err := selfSignedCert(n.opts.Name, n.net.nodeIP.AsSlice())
	if err != nil {
		return err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if len(n.opts.KubeletClientCA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(n.opts.KubeletClientCA) {
			return errors.New("kubelet API: KubeletClientCA holds no certificate")
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(n.net.nodeIP.String(), strconv.Itoa(n.opts.KubeletPort)), cfg)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", n.serveLogs)
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", n.serveExec)
	mux.HandleFunc("/portForward/{ns}/{pod}", n.servePortForward)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return nil
}

// serveLogs writes a container's log as the kubelet's containerLogs does.
func (n *Node) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns, pod, ctr := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	previous, follow := boolParam(q.Get("previous")), boolParam(q.Get("follow"))
	path, worker, err := n.logPath(ns, pod, ctr, previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	out := io.Writer(w)
	if v := q.Get("limitBytes"); v != "" {
		if limit, err := strconv.ParseInt(v, 10, 64); err == nil && limit >= 0 {
			out = &limitWriter{w: w, left: limit}
		}
	}
	if v := q.Get("tailLines"); v != "" {
		if lines, err := strconv.Atoi(v); err == nil && lines >= 0 {
			if err := seekLastLines(f, lines); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	if _, err := io.Copy(out, f); err != nil || !follow || previous {
		return
	}
	// Follow the start this file belongs to until it ends (a newer start
	// or no running container) and everything it wrote is out.
	flusher, _ := w.(http.Flusher)
	for {
		if flusher != nil {
			flusher.Flush()
		}
		done := worker.logEnded(ctr, path)
		if _, err := io.Copy(out, f); err != nil || done {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logEnded reports whether the start that writes path is over.
func (w *podWorker) logEnded(container, path string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ctrs[container]
	return !ok || c.pid == 0 || w.logFile(container, c.starts) != path
}

// serveExec runs a command in a container over the SPDY remotecommand
// protocol (v4): stdin, stdout and stderr streams, and the exit status on
// the error stream.
func (n *Node) serveExec(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if boolParam(q.Get("tty")) {
		http.Error(w, "the process node runs exec without a terminal: leave out -t", http.StatusBadRequest)
		return
	}
	cmd, err := n.execCommand(r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container"), q["command"])
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{execProtocolV4}); err != nil {
		return // Handshake wrote the error
	}
	want := 1 // the error stream
	for _, p := range []string{"input", "output", "error"} {
		if boolParam(q.Get(p)) {
			want++
		}
	}
	streams := make(chan httpstream.Stream, want)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replySent <-chan struct{}) error {
		go func() { <-replySent; streams <- s }()
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	byType := map[string]httpstream.Stream{}
	timeout := time.After(30 * time.Second)
	for len(byType) < want {
		select {
		case s := <-streams:
			byType[s.Headers().Get("streamType")] = s
		case <-timeout:
			return
		}
	}
	errStream := byType["error"]
	if errStream == nil {
		return
	}
	defer errStream.Close()
	if s := byType["stdout"]; s != nil {
		cmd.Stdout = s
		defer s.Close()
	}
	if s := byType["stderr"]; s != nil {
		cmd.Stderr = s
		defer s.Close()
	}
	var stdin io.WriteCloser
	if byType["stdin"] != nil {
		if stdin, err = cmd.StdinPipe(); err != nil {
			writeExecStatus(errStream, err)
			return
		}
	}
	if err := cmd.Start(); err != nil {
		writeExecStatus(errStream, err)
		return
	}
	if stdin != nil {
		go func() { _, _ = io.Copy(stdin, byType["stdin"]); _ = stdin.Close() }()
	}
	writeExecStatus(errStream, cmd.Wait())
}

// writeExecStatus writes a command's outcome as the v4 protocol's Status.
func writeExecStatus(w io.Writer, err error) {
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		st = metav1.Status{TypeMeta: st.TypeMeta, Status: metav1.StatusFailure, Reason: "NonZeroExitCode",
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "ExitCode", Message: strconv.Itoa(exit.ExitCode())}}}}
	case err != nil:
		st = metav1.Status{TypeMeta: st.TypeMeta, Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
	}
	b, _ := json.Marshal(st)
	_, _ = w.Write(b)
}

// servePortForward forwards each requested port to the pod's address over
// the SPDY port-forward protocol: a data and an error stream per request.
func (n *Node) servePortForward(w http.ResponseWriter, r *http.Request) {
	worker, err := n.worker(r.PathValue("ns"), r.PathValue("pod"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{portForwardProtocol}); err != nil {
		return
	}
	type pair struct{ data, errs httpstream.Stream }
	var mu sync.Mutex
	pairs := map[string]*pair{}
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replySent <-chan struct{}) error {
		h := s.Headers()
		id := h.Get("requestID")
		mu.Lock()
		p := pairs[id]
		if p == nil {
			p = &pair{}
			pairs[id] = p
		}
		switch h.Get("streamType") {
		case "data":
			p.data = s
		case "error":
			p.errs = s
		}
		ready := p.data != nil && p.errs != nil
		if ready {
			delete(pairs, id)
		}
		mu.Unlock()
		if ready {
			go func() { <-replySent; forwardPort(worker, h.Get("port"), p.data, p.errs) }()
		}
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	<-conn.CloseChan()
}

// forwardPort copies between one port-forward request and the pod's port.
func forwardPort(w *podWorker, port string, data, errs httpstream.Stream) {
	defer errs.Close()
	defer data.Close()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(w.ip.String(), port), 10*time.Second)
	if err != nil {
		_, _ = fmt.Fprintf(errs, "forwarding port %s to pod %s: %v", port, w.key, err)
		return
	}
	defer c.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(c, data); done <- struct{}{} }()
	go func() { _, _ = io.Copy(data, c); done <- struct{}{} }()
	<-done
}

func boolParam(v string) bool { b, _ := strconv.ParseBool(v); return b }

// limitWriter stops writing after a number of bytes (limitBytes).
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

// seekLastLines positions f at the start of its last n lines.
func seekLastLines(f *os.File, n int) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if last := len(lines) - 1; last >= 0 && len(lines[last]) == 0 {
		lines = lines[:last]
	}
	skip := 0
	for i := 0; i < len(lines)-n; i++ {
		skip += len(lines[i])
	}
	_, err = f.Seek(int64(skip), io.SeekStart)
	return err
}

// selfSignedCert is the kubelet's serving certificate (the API server does
// not verify it unless told to: the cluster's own kubelets are no different).
func selfSignedCert(name string, ip []byte) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{name}, IPAddresses: []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
