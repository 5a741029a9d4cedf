package processnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// APIServerPort is where pods reach the API server on the node's address
// (KUBERNETES_SERVICE_HOST and _PORT).
const APIServerPort = 443

// NodeAddress is the address a node with this pod network takes on its
// bridge: where its pods reach the node, its DNS and the API server. A
// cluster's API server certificate must name it for pods to trust it.
func NodeAddress(podCIDR netip.Prefix) netip.Addr { return podCIDR.Masked().Addr().Next() }

// proxyAPIServer forwards connections to the node's address on
// APIServerPort to the API server (which listens on the host's loopback
// only), so pods reach it as they reach the kubernetes Service in a cluster.
// TLS passes through untouched: pods verify the API server's own certificate.
func (n *Node) proxyAPIServer(ctx context.Context, target string) error {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.net.nodeIP, APIServerPort).String())
	if err != nil {
		return fmt.Errorf("API server proxy: %w", err)
	}
	go func() { <-ctx.Done(); ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					n.log.Info("API server proxy stopped", "error", err.Error())
				}
				return
			}
			if !n.api.track(c) {
				c.Close() // blocked: refused, as an API server that is down
				continue
			}
			go func() {
				defer n.api.untrack(c)
				defer c.Close()
				up, err := net.DialTimeout("tcp", target, 10*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return nil
}

// apiGate lets pods reach the API server, or not.
type apiGate struct {
	mu      sync.Mutex
	blocked bool
	conns   map[net.Conn]bool
}

func (g *apiGate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.blocked {
		return false
	}
	if g.conns == nil {
		g.conns = map[net.Conn]bool{}
	}
	g.conns[c] = true
	return true
}

func (g *apiGate) untrack(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
}

// BlockAPI cuts every pod of the node off from the API server (open
// connections closed, new ones refused) while the pods still reach each
// other, the node itself (probes, DNS) and the operator still reach the API
// server: a control-plane outage as the database pods see it. UnblockAPI
// undoes it.
func (n *Node) BlockAPI() {
	n.api.mu.Lock()
	defer n.api.mu.Unlock()
	n.api.blocked = true
	for c := range n.api.conns {
		c.Close()
	}
}

// UnblockAPI undoes BlockAPI.
func (n *Node) UnblockAPI() {
	n.api.mu.Lock()
	defer n.api.mu.Unlock()
	n.api.blocked = false
}
