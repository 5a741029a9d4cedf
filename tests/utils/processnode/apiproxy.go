package processnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
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
			go func() {
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
