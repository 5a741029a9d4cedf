package processnode

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type syscallStat struct{ uid, gid int }

func statOwner(p string, st *syscallStat) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	s, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", p)
	}
	st.uid, st.gid = int(s.Uid), int(s.Gid)
	return nil
}

var labelRef = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']+)'\]$`)

// fieldRef resolves a downward API field of the pod.
func (w *podWorker) fieldRef(path string) (string, error) {
	p := w.pod
	if m := labelRef.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return p.Labels[m[2]], nil
		}
		return p.Annotations[m[2]], nil
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return w.ip.String(), nil
	case "status.hostIP", "status.hostIPs":
		return w.node.net.nodeIP.String(), nil
	}
	return "", fmt.Errorf("field %s is not supported by the process node", path)
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$`)

// expand replaces $(VAR) with the variable's value as the kubelet does
// ($$ escapes; an unknown reference stays as written).
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// envVars is an environment being built: the values by name, and the names
// in the order they were first set (setting a name again changes its value
// in place, as the kubelet's list does).
type envVars struct {
	vars  map[string]string
	order []string
}

func (e *envVars) set(k, v string) {
	if _, ok := e.vars[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vars[k] = v
}

// list is the environment as NAME=value entries, in order.
func (e *envVars) list() []string {
	env := make([]string, 0, len(e.order))
	for _, k := range e.order {
		env = append(env, k+"="+e.vars[k])
	}
	return env
}

// optional reads a reference's optional flag (unset: required).
func optional(p *bool) bool { return p != nil && *p }

// environment computes a container's environment: the image's, then the
// service links the kubelet always sets (the API server's address), then
// envFrom and env in order, Secrets and ConfigMaps resolved.
func (w *podWorker) environment(ctx context.Context, ctr *corev1.Container, img Image) ([]string, map[string]string, error) {
	env := &envVars{vars: map[string]string{}}
	w.baseEnvironment(env, img)
	for _, from := range ctr.EnvFrom {
		if err := w.addEnvFrom(ctx, env, from); err != nil {
			return nil, nil, err
		}
	}
	for _, e := range ctr.Env {
		v, ok, err := w.envValue(ctx, ctr, e, env.vars)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env.set(e.Name, v)
		}
	}
	return env.list(), env.vars, nil
}

// baseEnvironment sets what every container gets before its own variables:
// PATH (the image's directories first), HOSTNAME, the image's variables and,
// when pods reach an API server, its service link.
func (w *podWorker) baseEnvironment(env *envVars, img Image) {
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if len(img.Path) > 0 {
		path = strings.Join(img.Path, ":") + ":" + path
	}
	env.set("PATH", path)
	env.set("HOSTNAME", w.pod.Name)
	for k, v := range img.Env {
		env.set(k, v)
	}
	if w.node.opts.APIServer != "" {
		env.set("KUBERNETES_SERVICE_HOST", w.node.net.nodeIP.String())
		env.set("KUBERNETES_SERVICE_PORT", fmt.Sprint(APIServerPort))
	}
}

// addEnvFrom sets every key of an envFrom ConfigMap or Secret, prefixed; a
// missing optional source sets nothing.
func (w *podWorker) addEnvFrom(ctx context.Context, env *envVars, from corev1.EnvFromSource) error {
	var data map[string][]byte
	var ok bool
	var err error
	switch {
	case from.ConfigMapRef != nil:
		data, ok, err = w.sourceData(ctx, false, from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
	case from.SecretRef != nil:
		data, ok, err = w.sourceData(ctx, true, from.SecretRef.Name, from.SecretRef.Optional)
	}
	if err != nil {
		return fmt.Errorf("envFrom %w", err)
	}
	if !ok {
		return nil
	}
	for k, v := range data {
		env.set(from.Prefix+k, string(v))
	}
	return nil
}

// envValue resolves one env entry: its value with $(VAR) references to the
// variables so far expanded, or its valueFrom. ok is false when the entry
// sets nothing (an optional source or key that is missing).
func (w *podWorker) envValue(ctx context.Context, ctr *corev1.Container, e corev1.EnvVar, vars map[string]string) (v string, ok bool, err error) {
	if e.ValueFrom == nil {
		return expand(e.Value, vars), true, nil
	}
	ref := e.ValueFrom
	switch {
	case ref.FieldRef != nil:
		v, err = w.fieldRef(ref.FieldRef.FieldPath)
		return v, err == nil, err
	case ref.SecretKeyRef != nil:
		return w.secretKey(ctx, ref.SecretKeyRef)
	case ref.ConfigMapKeyRef != nil:
		return w.configMapKey(ctx, ref.ConfigMapKeyRef)
	case ref.ResourceFieldRef != nil:
		v, err = resourceField(ctr, ref.ResourceFieldRef)
		return v, err == nil, err
	}
	return "", false, nil
}

// secretKey reads an env entry's secretKeyRef; ok is false when an
// optional Secret or key is missing.
func (w *podWorker) secretKey(ctx context.Context, ref *corev1.SecretKeySelector) (v string, ok bool, err error) {
	s, err := w.node.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secret %s: %w", ref.Name, err)
	}
	b, ok := s.Data[ref.Key]
	if !ok && !optional(ref.Optional) {
		return "", false, fmt.Errorf("secret %s has no key %s", ref.Name, ref.Key)
	}
	return string(b), ok, nil
}

// configMapKey reads an env entry's configMapKeyRef; ok is false when an
// optional ConfigMap or key is missing.
func (w *podWorker) configMapKey(ctx context.Context, ref *corev1.ConfigMapKeySelector) (v string, ok bool, err error) {
	cm, err := w.node.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %s: %w", ref.Name, err)
	}
	v, ok = cm.Data[ref.Key]
	if !ok && !optional(ref.Optional) {
		return "", false, fmt.Errorf("configmap %s has no key %s", ref.Name, ref.Key)
	}
	return v, ok, nil
}

// resourceField resolves a resourceFieldRef (limits and requests of cpu
// and memory, divided by the divisor; cpu rounds up as the kubelet does).
func resourceField(ctr *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resource %s is not supported", ref.Resource)
	}
	list := ctr.Resources.Limits
	if kind == "requests" {
		list = ctr.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "0", nil
	}
	div := ref.Divisor
	if div.IsZero() {
		if name == "cpu" {
			return fmt.Sprint((q.MilliValue() + 999) / 1000), nil
		}
		return fmt.Sprint(q.Value()), nil
	}
	if name == "cpu" {
		return fmt.Sprint((q.MilliValue() + div.MilliValue() - 1) / div.MilliValue()), nil
	}
	return fmt.Sprint((q.Value() + div.Value() - 1) / div.Value()), nil
}
