// Package localcluster_test checks that the local control plane starts,
// works, and leaves no process behind when stopped.
package localcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"example.com/database-operator/tests/utils/localcluster"
)

func TestStartAndStopLeavesNoProcesses(t *testing.T) {
	bin := os.Getenv("LOCAL_CLUSTER_BIN")
	if bin == "" {
		t.Fatal("LOCAL_CLUSTER_BIN is not set: run with `make test-integration`")
	}
	dir := t.TempDir()
	c, err := localcluster.Start(context.Background(), localcluster.Options{BinDir: bin, Dir: dir, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("nodes: %v (err %v)", len(nodes.Items), err)
	}
	sc, err := cs.StorageV1().StorageClasses().Get(context.Background(), localcluster.StorageClass, metav1.GetOptions{})
	if err != nil || sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Fatalf("default storage class: %v", err)
	}

	pids := childPIDs(t)
	if len(pids) < 5 {
		t.Fatalf("found %d component processes, want at least 5 (etcd, apiserver, controller manager, scheduler, kwok)", len(pids))
	}
	c.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still running after Stop", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "kube-apiserver.log")); err != nil {
		t.Errorf("no component logs: %v", err)
	}
}

// childPIDs lists the processes whose parent is this test process.
func childPIDs(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name (which is in parentheses): state, ppid, ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == self {
			pids = append(pids, pid)
		}
	}
	return pids
}
