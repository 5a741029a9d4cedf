package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	streamspdy "k8s.io/streaming/pkg/httpstream/spdy"

	dbv1 "example.com/database-operator/api/v1"
)

// fakeAPIServer answers a pod's portforward subresource as the API
// server and the kubelet do (SPDY, the portforward.k8s.io protocol), each
// data stream connected to target; what it was asked is in requests and
// ports.
type fakeAPIServer struct {
	target string
	// pod is what a GET of a pod returns.
	pod *corev1.Pod

	mu       sync.Mutex
	requests []string
	ports    []string
}

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	if r.Method == http.MethodGet && s.pod != nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.pod)
		return
	}
	if _, err := streamhttp.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
		return
	}
	streams := make(chan streamhttp.Stream, 8)
	conn := streamspdy.NewResponseUpgrader().UpgradeResponse(w, r, func(st streamhttp.Stream, _ <-chan struct{}) error {
		streams <- st
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	for {
		select {
		case st := <-streams:
			go s.serve(st)
		case <-conn.CloseChan():
			return
		}
	}
}

// serve connects a data stream to the target; an error stream is closed
// at once: no error.
func (s *fakeAPIServer) serve(st streamhttp.Stream) {
	if st.Headers().Get(corev1.StreamType) != corev1.StreamTypeData {
		_ = st.Close()
		return
	}
	s.mu.Lock()
	s.ports = append(s.ports, st.Headers().Get(corev1.PortHeader))
	s.mu.Unlock()
	c, err := net.Dial("tcp", s.target)
	if err != nil {
		_ = st.Reset()
		return
	}
	defer c.Close()
	go func() {
		_, _ = io.Copy(c, st)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(st, c)
	_ = st.Close()
}

// echoServer echoes what each connection sends; it returns its address.
func echoServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

func clientsFor(t *testing.T, host string) *Clients {
	cfg := &rest.Config{Host: host}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Clients{Config: cfg, Namespace: "shop", Kube: kube}
}

func TestForward(t *testing.T) {
	api := &fakeAPIServer{target: echoServer(t)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c := clientsFor(t, srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var errOut bytes.Buffer
	pf, err := c.forward(ctx, "orders-0", 5432, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if pf.Local == 0 || pf.Local == 5432 {
		t.Errorf("local port %d, want a random one", pf.Local)
	}
	for i := range 2 { // two connections through one port-forward, one after the other
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(forwardLocalAddress, strconv.Itoa(int(pf.Local))), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		msg := "SELECT " + strconv.Itoa(i) + ";\n"
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
			t.Fatalf("read %q, %v; want the echo %q", got, err, msg)
		}
		_ = conn.Close()
	}
	if err := pf.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", net.JoinHostPort(forwardLocalAddress, strconv.Itoa(int(pf.Local))), time.Second); err == nil {
		t.Error("the local port still listens after Stop")
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.requests) != 1 || api.requests[0] != "POST /api/v1/namespaces/shop/pods/orders-0/portforward" {
		t.Errorf("requests %q, want one POST to the pod's portforward", api.requests)
	}
	if len(api.ports) != 2 || api.ports[0] != "5432" {
		t.Errorf("remote ports %q, want 5432 for each connection", api.ports)
	}
}

func TestForwardRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"orders-0\" is forbidden","reason":"Forbidden","code":403}`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := clientsFor(t, srv.URL).forward(ctx, "orders-0", 5432, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "port-forward to pod orders-0") || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("error %v, want the refused port-forward", err)
	}
}

// fakePsql is a client that shows its arguments and password, sends a
// line through the server at its -h and -p and shows the answer, then
// exits 7.
const fakePsql = `#!/bin/bash
echo "args: $*"
echo "password: ${PGPASSWORD}"
exec 3<>"/dev/tcp/$2/$4" || exit 99
echo "SELECT 1;" >&3
read -r line <&3
echo "answer: $line"
exit 7
`

func TestConnectClient(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no /bin/bash for the fake client")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "psql"), []byte(fakePsql), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv("PGPASSWORD", "not this one")

	api := &fakeAPIServer{target: echoServer(t), pod: &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "database", Ports: []corev1.ContainerPort{
			{Name: "agent", ContainerPort: 8011}, {Name: "postgresql", ContainerPort: 15432},
		}}}},
	}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	var out, errOut bytes.Buffer
	o := &Options{IOStreams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	db := testDatabase("orders", dbv1.EnginePostgreSQL, "orders-0")
	cr := credentials{User: "app", Password: testPassword, Database: "app"}
	err := o.connectClient(ctx, clientsFor(t, srv.URL), db, engineClientOf(db.Spec.Engine), "orders-1", cr, []string{"-c", "SELECT 1"})

	var exit exitCodeError
	if !errors.As(err, &exit) || exit.code != 7 {
		t.Errorf("error %v, want the client's exit code 7", err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "args: -h 127.0.0.1 -p ") || !strings.HasSuffix(lines[0], " -U app -d app -c SELECT 1") ||
		lines[1] != "password: "+testPassword || lines[2] != "answer: SELECT 1;" {
		t.Errorf("client output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.ports) != 1 || api.ports[0] != "15432" {
		t.Errorf("remote ports %q, want the pod's server port 15432", api.ports)
	}
}
