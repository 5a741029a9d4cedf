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

// environment computes a container's environment: the image's, then the
// service links the kubelet always sets (the API server's address), then
// envFrom and env in order, Secrets and ConfigMaps resolved.
func (w *podWorker) environment(ctx context.Context, ctr *corev1.Container, img Image) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if len(img.Path) > 0 {
		path = strings.Join(img.Path, ":") + ":" + path
	}
	set("PATH", path)
	set("HOSTNAME", w.pod.Name)
	for k, v := range img.Env {
		set(k, v)
	}
	if w.node.opts.APIServer != "" {
		set("KUBERNETES_SERVICE_HOST", w.node.net.nodeIP.String())
		set("KUBERNETES_SERVICE_PORT", fmt.Sprint(APIServerPort))
	}
	ns := w.pod.Namespace
	for _, from := range ctr.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := w.node.client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
			}
			for k, v := range cm.Data {
				set(from.Prefix+k, v)
			}
		case from.SecretRef != nil:
			s, err := w.node.client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
			}
			for k, v := range s.Data {
				set(from.Prefix+k, string(v))
			}
		}
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		ref := e.ValueFrom
		switch {
		case ref.FieldRef != nil:
			v, err := w.fieldRef(ref.FieldRef.FieldPath)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		case ref.SecretKeyRef != nil:
			s, err := w.node.client.CoreV1().Secrets(ns).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
			optional := ref.SecretKeyRef.Optional != nil && *ref.SecretKeyRef.Optional
			if err != nil {
				if apierrors.IsNotFound(err) && optional {
					continue
				}
				return nil, nil, fmt.Errorf("env %s: secret %s: %w", e.Name, ref.SecretKeyRef.Name, err)
			}
			v, ok := s.Data[ref.SecretKeyRef.Key]
			if !ok && !optional {
				return nil, nil, fmt.Errorf("env %s: secret %s has no key %s", e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
			}
			if ok {
				set(e.Name, string(v))
			}
		case ref.ConfigMapKeyRef != nil:
			cm, err := w.node.client.CoreV1().ConfigMaps(ns).Get(ctx, ref.ConfigMapKeyRef.Name, metav1.GetOptions{})
			optional := ref.ConfigMapKeyRef.Optional != nil && *ref.ConfigMapKeyRef.Optional
			if err != nil {
				if apierrors.IsNotFound(err) && optional {
					continue
				}
				return nil, nil, fmt.Errorf("env %s: configmap %s: %w", e.Name, ref.ConfigMapKeyRef.Name, err)
			}
			v, ok := cm.Data[ref.ConfigMapKeyRef.Key]
			if !ok && !optional {
				return nil, nil, fmt.Errorf("env %s: configmap %s has no key %s", e.Name, ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key)
			}
			if ok {
				set(e.Name, v)
			}
		case ref.ResourceFieldRef != nil:
			v, err := resourceField(ctr, ref.ResourceFieldRef)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
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
