package processnode

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestInNetnsKeepsItsThread: fn runs in the pod's namespace, and its thread
// lives on, back in the node's. (A thread that ended instead took with it
// the processes started from it with Pdeathsig: the API server, whole
// containers.)
func TestInNetnsKeepsItsThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := fmt.Sprintf("dbop-innetns-%d", os.Getpid())
	if err := ip(ctx, "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ip(context.Background(), "netns", "del", ns) }()
	node, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}

	// Ten times: one run may land on the process's first thread, which Go
	// never ends.
	for range 10 {
		var tid int
		var inside string
		if err := inNetns(nsPath(ns), func() (err error) {
			tid = unix.Gettid()
			inside, err = os.Readlink("/proc/thread-self/ns/net")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if inside == node {
			t.Fatalf("fn ran in the node's namespace %s", node)
		}
		time.Sleep(100 * time.Millisecond) // an ending thread would be gone by now
		after, err := os.Readlink("/proc/self/task/" + strconv.Itoa(tid) + "/ns/net")
		if err != nil {
			t.Fatalf("the thread that ran fn: %v (it ended)", err)
		}
		if after != node {
			t.Fatalf("the thread that ran fn is in %s after it, want the node's %s", after, node)
		}
	}
}
