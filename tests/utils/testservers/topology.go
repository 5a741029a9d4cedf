package testservers

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	helmcharts "example.com/database-operator/helm-charts"
)

// Topology stands in for what an instance's start script sees in a
// cluster: the operator's topology ConfigMap (a directory with one file per
// key, as a ConfigMap volume has) and the other instances' addresses (all
// on 127.0.0.1 here, so the script gets the primary's port).
type Topology struct {
	Dir string

	mu    sync.Mutex
	ports map[string]int // pod name -> port
}

// NewTopology makes an empty topology: until a primary is set, the scripts
// take instance 0 as the primary, as in a new Database.
func NewTopology(t testing.TB) *Topology {
	t.Helper()
	dir := scratchDir(t, nil)
	if err := os.Chmod(dir, 0o755); err != nil { // readable by the postgres user
		t.Fatal(err)
	}
	return &Topology{Dir: dir, ports: map[string]int{}}
}

// Write replaces the topology with data, as the kubelet updates a
// ConfigMap volume.
func (tp *Topology) Write(t testing.TB, data map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(tp.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, keep := data[e.Name()]; !keep {
			_ = os.Remove(filepath.Join(tp.Dir, e.Name()))
		}
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(tp.Dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// SetPrimary names the primary, keeping the other keys.
func (tp *Topology) SetPrimary(t testing.TB, pod string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tp.Dir, "primary"), []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (tp *Topology) register(pod string, port int) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.ports[pod] = port
}

// Ports returns each registered pod's port.
func (tp *Topology) Ports() map[string]int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return maps.Clone(tp.ports)
}

// env is what the start script of pod needs to find the primary.
func (tp *Topology) env(pod string) []string {
	primary := podName(databaseName(pod), 0)
	if b, err := os.ReadFile(filepath.Join(tp.Dir, "primary")); err == nil && len(b) > 0 {
		primary = strings.TrimSpace(string(b))
	}
	env := []string{"POD_NAME=" + pod, "TOPOLOGY_DIR=" + tp.Dir, "PRIMARY_HOST=127.0.0.1"}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if port, ok := tp.ports[primary]; ok {
		env = append(env, "PRIMARY_PORT="+strconv.Itoa(port))
	}
	return env
}

// StartScript writes the chart's start script name, and the topology.sh
// it sources, into dir and returns the script's path.
func StartScript(t testing.TB, dir, name string) string {
	t.Helper()
	for _, f := range []string{"topology.sh", name} {
		b, err := helmcharts.Database.ReadFile("database/files/" + f)
		if err != nil {
			t.Fatalf("the chart has no %s: %v", f, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, name)
}

// databaseName is the Database an instance pod belongs to.
func databaseName(pod string) string { return pod[:strings.LastIndex(pod, "-")] }

// podName is the name of instance i of a Database.
func podName(name string, i int) string { return fmt.Sprintf("%s-%d", name, i) }
