package agent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"example.com/database-operator/internal/engine"
)

// The failsafe, after Patroni's failsafe_mode: a control-plane outage alone
// must not make every database read-only. While the API server cannot be
// reached, the primary's agent asks every other member of its Database,
// over the agents' peer channel, whether it still follows it; when all of
// them confirm, the primary stays writable for another Lease period (the
// same rule as a renewal, counted from the start of that round). A member
// confirms only a primary its own view of the Lease names, never while its
// own server takes writes, and the operator does not promote a member
// before its last confirmation has run out (it asks, and the member stops
// confirming from then on: POST /v1/promoting). A member that can read the
// Lease and finds another holder refuses, so once the operator moves the
// Lease the old primary loses the failsafe within a round or two.

// PeerPort is the agents' peer channel, on the pod's address.
const PeerPort = 8011

// PeerToken is what agents and the operator present on the peer channel:
// derived from the replication account's password (which every member and
// the operator have), never that password itself.
func PeerToken(replicationPassword string) string {
	h := hmac.New(sha256.New, []byte(replicationPassword))
	h.Write([]byte("database-operator agent peer channel"))
	return hex.EncodeToString(h.Sum(nil))
}

// Promoting is a member's answer to POST /v1/promoting.
type Promoting struct {
	// ConfirmedFor is the primary this member last confirmed, if any.
	ConfirmedFor string `json:"confirmedFor,omitempty"`
	// RemainingMillis is how long that confirmation still lets it take
	// writes by this member's clock: the member must not be promoted
	// before it has run out.
	RemainingMillis int64 `json:"remainingMillis"`
}

// peerHandler serves the peer channel.
func (a *Agent) peerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/confirm", func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		primary := r.URL.Query().Get("primary")
		if why := a.confirm(primary, r.URL.Query().Get("uid")); why != "" {
			http.Error(w, why, http.StatusConflict)
			return
		}
		fmt.Fprintln(w, "confirmed")
	})
	mux.HandleFunc("GET /v1/status", a.serveStatus)
	mux.HandleFunc("GET /v1/archiver", a.serveArchiver)
	mux.HandleFunc("GET /v1/basebackup", a.serveBaseBackup)
	mux.HandleFunc("POST /v1/promoting", func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		a.mu.Lock()
		a.refuseConfirm = true
		p := Promoting{ConfirmedFor: a.confirmedFor}
		if left := time.Until(a.confirmedUntil); left > 0 {
			p.RemainingMillis = left.Milliseconds()
		}
		a.mu.Unlock()
		a.cfg.Log.Info("the operator is about to promote this server: confirming no other primary from now on", "lastConfirmed", p.ConfirmedFor, "remaining", time.Duration(p.RemainingMillis)*time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	})
	return mux
}

func (a *Agent) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && a.cfg.PeerToken != "" && subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.PeerToken)) == 1
}

// confirm answers a primary that asks whether this member still follows
// it: "" to confirm, else why not. The asker names its incarnation (its
// pod's UID): an earlier incarnation of a pod that was deleted without a
// grace period, still running on a node that lost the API server, is not
// the one the Lease names any more once its replacement took it.
func (a *Agent) confirm(primary, uid string) string {
	if primary == "" || primary == a.cfg.Pod {
		return "no primary named"
	}
	// The Lease as this member last read it (every renew interval): a
	// fresh read would take the asker's whole deadline while the API
	// server is away, which is when it asks. A move of the Lease reaches
	// this view within a renew interval, and the operator stops this
	// member's confirmations before promoting it in any case.
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.refuseConfirm:
		return "this member is being promoted"
	case a.writable:
		return "this member's server takes writes"
	case a.holder != primary:
		return fmt.Sprintf("the primary Lease names %q", a.holder)
	case a.holderUID != "" && uid != "" && a.holderUID != uid:
		return fmt.Sprintf("the primary Lease names another incarnation of %s", primary)
	}
	a.confirmedFor = primary
	a.confirmedUntil = time.Now().Add(a.duration + Margin(a.duration))
	return ""
}

// failsafe asks every other member to confirm this primary; true when all
// did. Members are <name>-0 .. <name>-(n-1), reached by their stable
// names.
func (a *Agent) failsafe(ctx context.Context) bool {
	a.mu.Lock()
	n := a.members
	a.mu.Unlock()
	i := strings.LastIndex(a.cfg.Pod, "-")
	if n < 2 || i < 0 || (a.cfg.PeerDomain == "" && a.peerAddr == nil) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		refuse []string
	)
	for k := 0; k < n; k++ {
		peer := a.cfg.Pod[:i] + "-" + strconv.Itoa(k)
		if peer == a.cfg.Pod {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.askPeer(ctx, peer); err != nil {
				mu.Lock()
				refuse = append(refuse, fmt.Sprintf("%s: %v", peer, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(refuse) > 0 {
		a.cfg.Log.Info("failsafe: not every member confirms this primary", "refused", refuse)
		return false
	}
	return true
}

func (a *Agent) askPeer(ctx context.Context, peer string) error {
	addr, cfg, err := a.peerTarget(peer)
	if err != nil {
		return err
	}
	return call(ctx, http.MethodPost, "/v1/confirm?primary="+a.cfg.Pod+"&uid="+url.QueryEscape(a.cfg.PodUID), addr, a.cfg.PeerToken, cfg, nil)
}

// peerTarget is where a member's peer channel is, and the TLS
// configuration that verifies it (nil: plain HTTP, no certificate).
func (a *Agent) peerTarget(peer string) (string, *tls.Config, error) {
	host := peer + "." + a.cfg.PeerDomain
	addr := net.JoinHostPort(host, strconv.Itoa(PeerPort))
	if a.peerAddr != nil {
		addr = a.peerAddr(peer)
	}
	if a.cfg.TLSDir == "" {
		return addr, nil, nil
	}
	// The peer's certificate names it under the headless Service.
	ca, err := os.ReadFile(filepath.Join(a.cfg.TLSDir, "ca.crt"))
	if err != nil {
		return "", nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	cfg, err := engine.VerifyTLS(ca, host)
	return addr, cfg, err
}

// AskPromoting tells the member at addr (host:port of its peer channel)
// that the operator is about to promote it, and returns how long its last
// confirmation of another primary still runs. With cfg the channel is TLS
// and the member verified with it; nil: plain HTTP (a member started
// before its Database had a certificate).
func AskPromoting(ctx context.Context, addr, token string, cfg *tls.Config) (Promoting, error) {
	var p Promoting
	err := call(ctx, http.MethodPost, "/v1/promoting", addr, token, cfg, &p)
	return p, err
}

// call makes one request to an agent (its probes or peer channel) at
// addr, over TLS verified with cfg when set, with token as a bearer token
// when set; a status other than 200 is an error that carries the agent's
// own words, and out, when set, gets the JSON body.
func call(ctx context.Context, method, path, addr, token string, cfg *tls.Config, out any) error {
	scheme, client := "http", http.DefaultClient
	if cfg != nil {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+addr+path, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b [512]byte
		n, _ := resp.Body.Read(b[:])
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b[:n])))
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// certFiles serves the pod's certificate from its mounted Secret, read
// again when the files change (the operator renews it in place).
type certFiles struct {
	dir string

	mu     sync.Mutex
	stamp  string
	loaded *tls.Certificate
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certFile, keyFile := filepath.Join(c.dir, "tls.crt"), filepath.Join(c.dir, "tls.key")
	stamp := filesStamp(certFile, keyFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil && stamp == c.stamp {
		return c.loaded, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		if c.loaded != nil {
			return c.loaded, nil // mid-swap: the last good pair
		}
		return nil, fmt.Errorf("the pod's certificate: %w", err)
	}
	c.loaded, c.stamp = &cert, stamp
	return c.loaded, nil
}
