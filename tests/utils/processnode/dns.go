package processnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ClusterDomain is the cluster's DNS domain, as a kubelet's --cluster-domain.
const ClusterDomain = "cluster.local"

// dnsServer answers the cluster's names for the node's pods, as CoreDNS's
// kubernetes plugin does, from the EndpointSlices:
//
//	<service>.<namespace>.svc.cluster.local         the Service's ready endpoints
//	<hostname>.<service>.<namespace>.svc.cluster.local
//	                                                the endpoint with that hostname
//	                                                (a StatefulSet pod under its headless Service)
//
// There is no kube-proxy here, so a Service with a cluster IP resolves to its
// ready endpoints' addresses, as a headless one does: a client still reaches
// what the Service selects. Names outside the cluster domain get NXDOMAIN at
// once (nothing here reaches the internet).
type dnsServer struct {
	slices cache.Indexer
	conn   *net.UDPConn
	log    logr.Logger
}

const byService = "service"

// startDNS serves on addr:53 (UDP) until ctx ends.
func startDNS(ctx context.Context, client kubernetes.Interface, addr netip.Addr, log logr.Logger) (*dnsServer, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 53)))
	if err != nil {
		return nil, fmt.Errorf("DNS on %s:53: %w", addr, err)
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	inf := factory.Discovery().V1().EndpointSlices().Informer()
	if err := inf.AddIndexers(cache.Indexers{byService: func(obj any) ([]string, error) {
		s := obj.(*discoveryv1.EndpointSlice)
		return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
	}}); err != nil {
		conn.Close()
		return nil, err
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		conn.Close()
		return nil, errors.New("DNS: EndpointSlices did not sync")
	}
	d := &dnsServer{slices: inf.GetIndexer(), conn: conn, log: log}
	go func() { <-ctx.Done(); conn.Close() }()
	go d.serve()
	return d, nil
}

func (d *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// One bad read (an ICMP error reported on the socket) must
			// not leave every pod without DNS for the rest of the run.
			d.log.Info("DNS read failed", "error", err.Error())
			continue
		}
		if reply := d.answer(buf[:n]); reply != nil {
			_, _ = d.conn.WriteToUDPAddrPort(reply, from)
		}
	}
}

// answer builds the reply to one query; nil drops a message that cannot be parsed.
func (d *dnsServer) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	addrs, known := d.lookup(q.Name.String())
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil
	}
	// A known name without an address of the asked type is an empty answer
	// (NODATA): the resolver then takes the A records, not the next search domain.
	if q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		for _, a := range addrs {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5}
			if b.AResource(rr, dnsmessage.AResource{A: a.As4()}) != nil {
				return nil
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// lookup resolves a fully qualified name in the cluster domain. known is
// false for a name that does not exist (NXDOMAIN).
func (d *dnsServer) lookup(fqdn string) (addrs []netip.Addr, known bool) {
	name := strings.ToLower(strings.TrimSuffix(fqdn, "."))
	rest, ok := strings.CutSuffix(name, ".svc."+ClusterDomain)
	if !ok {
		return nil, false
	}
	labels := strings.Split(rest, ".")
	var host, svc, ns string
	switch len(labels) {
	case 2:
		svc, ns = labels[0], labels[1]
	case 3:
		host, svc, ns = labels[0], labels[1], labels[2]
	default:
		return nil, false
	}
	objs, _ := d.slices.ByIndex(byService, ns+"/"+svc)
	if len(objs) == 0 {
		return nil, false
	}
	for _, o := range objs {
		s := o.(*discoveryv1.EndpointSlice)
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if host != "" && (ep.Hostname == nil || *ep.Hostname != host) {
				continue
			}
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && !containsAddr(addrs, ip) {
					addrs = append(addrs, ip)
				}
			}
		}
	}
	// A pod name under a Service that has no such endpoint does not exist;
	// a Service with no ready endpoint does, with no address.
	if host != "" && len(addrs) == 0 {
		return nil, false
	}
	return addrs, true
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// resolvConf is a pod's /etc/resolv.conf under dnsPolicy ClusterFirst: the
// node's server, and the search path a kubelet writes, so "<service>" and
// "<pod>.<service>.<namespace>.svc" resolve as in a cluster.
func resolvConf(nameserver netip.Addr, namespace string) string {
	return fmt.Sprintf("nameserver %s\nsearch %s.svc.%s svc.%s %s\noptions ndots:5\n",
		nameserver, namespace, ClusterDomain, ClusterDomain, ClusterDomain)
}

// usesClusterDNS reports whether the pod's resolv.conf is the cluster's
// (ClusterFirst, the default) rather than the host's.
func usesClusterDNS(pod *corev1.Pod) bool {
	return pod.Spec.DNSPolicy != corev1.DNSDefault && pod.Spec.DNSPolicy != corev1.DNSNone
}

// podHostnames are a pod's host name and, under a subdomain (a StatefulSet
// pod's headless Service), its fully qualified name, as the kubelet puts
// them in /etc/hosts.
func podHostnames(pod *corev1.Pod) (hostname, fqdn string) {
	hostname = pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	if pod.Spec.Subdomain != "" {
		fqdn = fmt.Sprintf("%s.%s.%s.svc.%s", hostname, pod.Spec.Subdomain, pod.Namespace, ClusterDomain)
	}
	return hostname, fqdn
}
