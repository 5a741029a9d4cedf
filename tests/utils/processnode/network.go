package processnode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// network is the node's pod network: one bridge the node owns, with the
// node's address on it, and one network namespace per pod joined to the
// bridge by a veth pair. Nothing is routed off the machine: the namespaces
// have a route to the bridge's subnet only.
type network struct {
	bridge string
	prefix netip.Prefix
	nodeIP netip.Addr // the bridge's address: where pods reach the node and the API server

	mu   sync.Mutex
	used map[netip.Addr]string // address -> pod key
}

func newNetwork(bridge string, prefix netip.Prefix) *network {
	prefix = prefix.Masked()
	return &network{bridge: bridge, prefix: prefix, nodeIP: NodeAddress(prefix), used: map[netip.Addr]string{}}
}

// ip runs the ip command.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setUp creates the bridge, first removing one of the same name left by a
// crashed earlier run.
func (n *network) setUp(ctx context.Context) error {
	_ = ip(ctx, "link", "del", n.bridge)
	if err := ip(ctx, "link", "add", n.bridge, "type", "bridge"); err != nil {
		return err
	}
	if err := ip(ctx, "addr", "add", fmt.Sprintf("%s/%d", n.nodeIP, n.prefix.Bits()), "dev", n.bridge); err != nil {
		return err
	}
	return ip(ctx, "link", "set", n.bridge, "up")
}

// tearDown removes the bridge (the veths went with their namespaces).
func (n *network) tearDown(ctx context.Context) error {
	return ip(ctx, "link", "del", n.bridge)
}

// allocate gives a pod an address on the bridge.
func (n *network) allocate(key string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for a, k := range n.used {
		if k == key {
			return a, nil
		}
	}
	for a := n.nodeIP.Next(); n.prefix.Contains(a); a = a.Next() {
		if _, taken := n.used[a]; !taken && a.Next().IsValid() && n.prefix.Contains(a.Next()) { // not the broadcast address
			n.used[a] = key
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", n.prefix)
}

func (n *network) release(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for a, k := range n.used {
		if k == key {
			delete(n.used, a)
		}
	}
}

// nsPath is where the pod's network namespace is pinned (ip netns).
func nsPath(ns string) string { return "/run/netns/" + ns }

// attach creates the pod's network namespace with loopback up and eth0 at
// addr, its peer on the bridge.
func (n *network) attach(ctx context.Context, ns, hostVeth string, addr netip.Addr) error {
	n.detach(ctx, ns, hostVeth) // left by a crashed earlier run
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", hostVeth, "master", n.bridge},
		{"link", "set", hostVeth, "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", addr, n.prefix.Bits()), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			n.detach(ctx, ns, hostVeth)
			return err
		}
	}
	// The address may have been a pod's deleted moments ago: the host
	// would keep sending to that pod's gone veth until its neighbour entry
	// expired (about 40 s), so the new pod would be unreachable from the
	// host (the operator's side) for that long.
	_ = ip(ctx, "neigh", "flush", "to", addr.String(), "dev", n.bridge)
	return nil
}

// detach removes the pod's namespace and veth, whatever exists of them.
func (n *network) detach(ctx context.Context, ns, hostVeth string) {
	// Processes that left their container's group (setsid) are still in
	// the namespace: none survives its pod.
	for range 10 {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if err != nil || len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = ip(ctx, "link", "del", hostVeth)
	if _, err := os.Stat(nsPath(ns)); err == nil {
		_ = ip(ctx, "netns", "del", ns)
	}
}
