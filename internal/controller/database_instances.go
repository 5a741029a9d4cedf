package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/engine"
)

// Resolver maps an instance pod to the address its server listens on. In a
// cluster that is the pod IP; tests map pods to local servers. It is the
// one seam between the operator and where instances run.
type Resolver func(ctx context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error)

// PodIPResolver reaches instances at their pod IP.
func PodIPResolver(_ context.Context, pod *corev1.Pod, port int) (engine.Endpoint, error) {
	if pod.Status.PodIP == "" {
		return engine.Endpoint{}, fmt.Errorf("pod %s has no IP", pod.Name)
	}
	return engine.Endpoint{Host: pod.Status.PodIP, Port: port}, nil
}

// InstanceConnector opens engine connections to a Database's pods with the
// credentials from its Secret.
type InstanceConnector struct {
	Client  client.Reader
	Resolve Resolver
	Timeout time.Duration // per connection attempt
	// Open connects to a server; nil is engine.Open. Unit tests give
	// servers whose answers they script.
	Open func(context.Context, dbv1.Engine, engine.Endpoint, engine.Credentials, engine.Options) (engine.Instance, error)
}

// credentials reads the basic-auth Secret name of db.
func (c *InstanceConnector) credentials(ctx context.Context, db *dbv1.Database, name string) (engine.Credentials, error) {
	s := &corev1.Secret{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); err != nil {
		return engine.Credentials{}, fmt.Errorf("reading credentials from Secret %s: %w", name, err)
	}
	return engine.Credentials{User: string(s.Data[corev1.BasicAuthUsernameKey]), Password: string(s.Data[corev1.BasicAuthPasswordKey])}, nil
}

// endpoint is where pod's server listens and, when the pod mounts its
// Database's certificate, the name that certificate carries.
func (c *InstanceConnector) endpoint(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (engine.Endpoint, error) {
	ep, err := c.Resolve(ctx, pod, int(engine.ProfileOf(db.Spec.Engine).Port))
	if err != nil {
		return ep, err
	}
	ep.ServerName = podServerName(db, pod)
	return ep, nil
}

// podServerName is the DNS name of pod under the headless Service, which
// the server certificate names (a wildcard), or "" when the pod does not
// mount the certificate: it started before its Database had one and
// serves plain text until it is rolled.
func podServerName(db *dbv1.Database, pod *corev1.Pod) string {
	if pod.Spec.Hostname == "" || pod.Spec.Subdomain == "" {
		return ""
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tlsSecretName(db) {
			return pod.Spec.Hostname + "." + pod.Spec.Subdomain + "." + pod.Namespace + ".svc"
		}
	}
	return ""
}

// tlsOptions has a connection to ep verify the server with the CA bundle
// of db's certificate Secret, and replicas verify their primary with the
// bundle mounted beside them; a server without a certificate gets none.
func (c *InstanceConnector) tlsOptions(ctx context.Context, db *dbv1.Database, ep engine.Endpoint, opts *engine.Options) error {
	if ep.ServerName == "" {
		return nil
	}
	s := &corev1.Secret{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: tlsSecretName(db)}, s); err != nil {
		return fmt.Errorf("reading the CA bundle from Secret %s: %w", tlsSecretName(db), err)
	}
	// Named for ep, not left to the engine: the agents' peer channel uses
	// this configuration too, at the pod's address.
	cfg, err := engine.VerifyTLS(s.Data[keyCACert], ep.ServerName)
	if err != nil {
		return fmt.Errorf("Secret %s: %w", tlsSecretName(db), err)
	}
	opts.TLS, opts.PeerCAFile = cfg, peerCAFile
	return nil
}

func (c *InstanceConnector) open(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, creds engine.Credentials, onError func(error)) (engine.Instance, error) {
	ep, err := c.endpoint(ctx, db, pod)
	if err != nil {
		return nil, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	dial := c.Open
	if dial == nil {
		dial = engine.Open
	}
	opts := engine.Options{ConnectTimeout: timeout, OnError: onError}
	if err := c.tlsOptions(ctx, db, ep, &opts); err != nil {
		return nil, err
	}
	return dial(ctx, db.Spec.Engine, ep, creds, opts)
}

// instanceSet is one reconcile's connections to its Database's servers,
// in the manner of mariadb-operator's clientset: the phases share them
// instead of each dialling its own. A server is dialled at its first use
// and every connection is closed when the reconcile ends. A connection
// whose call failed is not handed out again (a call that timed out leaves
// it unusable): the next use dials afresh. A server that could not be
// dialled is not dialled again in the same reconcile: a hung server costs
// one connect timeout per reconcile, not one per phase.
type instanceSet struct {
	connector *InstanceConnector
	db        *dbv1.Database
	creds     *engine.Credentials
	repl      *engine.Credentials
	conns     map[string]engine.Instance
	unreached map[string]error
	all       []engine.Instance // to close, dropped ones included
	fenced    func()            // counts a fence (nil: not counted)
}

func newInstanceSet(c *InstanceConnector, db *dbv1.Database) *instanceSet {
	return &instanceSet{connector: c, db: db, conns: map[string]engine.Instance{}, unreached: map[string]error{}}
}

// credentials are the superuser's, read once per reconcile.
func (s *instanceSet) credentials(ctx context.Context) (engine.Credentials, error) {
	return s.connector.cached(ctx, s.db, credentialsSecretName(s.db), &s.creds)
}

// replication are the replication account's, which replicas follow their
// primary with (never the superuser's), read once per reconcile.
func (s *instanceSet) replication(ctx context.Context) (engine.Credentials, error) {
	return s.connector.cached(ctx, s.db, replicationSecretName(s.db), &s.repl)
}

// cached reads Secret name into *cache the first time.
func (c *InstanceConnector) cached(ctx context.Context, db *dbv1.Database, name string, cache **engine.Credentials) (engine.Credentials, error) {
	if *cache == nil {
		creds, err := c.credentials(ctx, db, name)
		if err != nil {
			return engine.Credentials{}, err
		}
		*cache = &creds
	}
	return **cache, nil
}

func (s *instanceSet) endpoint(ctx context.Context, pod *corev1.Pod) (engine.Endpoint, error) {
	return s.connector.endpoint(ctx, s.db, pod)
}

// get returns the connection to pod's server, dialling it if need be.
// The set owns it: callers do not close it.
func (s *instanceSet) get(ctx context.Context, pod *corev1.Pod) (engine.Instance, error) {
	key := pod.Name + "/" + string(pod.UID) // a pod recreated under the same name is another server
	if inst, ok := s.conns[key]; ok {
		return inst, nil
	}
	if err, ok := s.unreached[key]; ok {
		return nil, err
	}
	creds, err := s.credentials(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := s.connector.open(ctx, s.db, pod, creds, func(error) { delete(s.conns, key) })
	if err != nil {
		s.unreached[key] = err
		return nil, err
	}
	s.all = append(s.all, conn)
	inst := loggedInstance{Instance: conn, log: log.FromContext(ctx).WithValues("pod", pod.Name), fenced: s.fenced}
	s.conns[key] = inst
	return inst, nil
}

// loggedInstance writes a structured log line before and after every call
// that changes a server (fence, unfence, promote, follow, an account):
// Events expire and are merged, the log is the forensic record of what the
// operator did to which server, when, and how it ended. Passwords are
// never logged (only account names).
type loggedInstance struct {
	engine.Instance
	log    logr.Logger
	fenced func()
}

func (l loggedInstance) act(action string, call func() error, kv ...any) error {
	kv = append([]any{"action", action}, kv...)
	l.log.Info("server action started", kv...)
	start := time.Now()
	err := call()
	kv = append(kv, "took", time.Since(start).Round(time.Millisecond).String())
	if err != nil {
		l.log.Error(err, "server action failed", kv...)
		return err
	}
	l.log.Info("server action done", kv...)
	return nil
}

func (l loggedInstance) Fence(ctx context.Context) error {
	err := l.act("fence", func() error { return l.Instance.Fence(ctx) })
	if err == nil && l.fenced != nil {
		l.fenced()
	}
	return err
}

func (l loggedInstance) Unfence(ctx context.Context) error {
	return l.act("unfence", func() error { return l.Instance.Unfence(ctx) })
}

func (l loggedInstance) Promote(ctx context.Context) error {
	return l.act("promote", func() error { return l.Instance.Promote(ctx) })
}

func (l loggedInstance) Follow(ctx context.Context, primary engine.Endpoint, repl engine.Credentials) error {
	return l.act("follow", func() error { return l.Instance.Follow(ctx, primary, repl) }, "primary", primary.String(), "user", repl.User)
}

func (l loggedInstance) EnsureAccount(ctx context.Context, a engine.Account) error {
	return l.act("account", func() error { return l.Instance.EnsureAccount(ctx, a) }, "user", a.User, "replication", a.Replication)
}

func (l loggedInstance) KeepSlots(ctx context.Context, prefix string, names []string) (engine.Slots, error) {
	out, err := l.Instance.KeepSlots(ctx, prefix, names)
	if len(out.Created) > 0 || len(out.Dropped) > 0 {
		l.log.Info("replication slots changed", "action", "slots", "created", out.Created, "dropped", out.Dropped)
	}
	return out, err
}

func (l loggedInstance) DropSlot(ctx context.Context, name string) error {
	return l.act("drop slot", func() error { return l.Instance.DropSlot(ctx, name) }, "slot", name)
}

// close ends every connection the reconcile opened.
func (s *instanceSet) close() {
	for _, inst := range s.all {
		_ = inst.Close()
	}
	s.conns, s.all = map[string]engine.Instance{}, nil
}

// podNamed is the pod of pods called name, or nil.
func podNamed(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

// errPrimaryNotReady: the recorded primary has no ready pod (failover's
// concern).
var errPrimaryNotReady = errors.New("no ready pod for the primary")

// writablePrimary reaches the recorded primary, ready, and checks that it
// takes writes. Nothing is written through, fenced or re-pointed at a
// primary this reconcile has not seen writable: status may name a server
// that lost its role (a promotion whose status write was lost, a stale
// cache after the API server came back). The error says why not.
func writablePrimary(ctx context.Context, db *dbv1.Database, obs *observed, pods []corev1.Pod) (*corev1.Pod, engine.Instance, engine.Status, error) {
	name := primaryName(db, obs)
	pod := podNamed(pods, name)
	if pod == nil || !podReady(pod) {
		return nil, nil, engine.Status{}, fmt.Errorf("%w: %s", errPrimaryNotReady, name)
	}
	inst, err := obs.instances.get(ctx, pod)
	if err != nil {
		return nil, nil, engine.Status{}, err
	}
	st, err := inst.Status(ctx)
	if err != nil {
		return nil, nil, engine.Status{}, err
	}
	if !st.Writable() {
		return nil, nil, st, fmt.Errorf("%s does not serve writes", name)
	}
	return pod, inst, st, nil
}
