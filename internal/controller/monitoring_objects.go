package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/database-operator/config/prometheus"
)

// monitoringGroupVersion is the Prometheus operator's API.
const monitoringGroupVersion = "monitoring.coreos.com/v1"

// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;podmonitors;prometheusrules,verbs=create;patch,namespace=system

// MonitoringObjectsInterval is how often the operator looks for the
// Prometheus operator's API and applies its objects again: the API may be
// installed after the operator, and an object deleted comes back.
const MonitoringObjectsInterval = 10 * time.Minute

// MonitoringObjects applies, in the operator's namespace, the Prometheus
// operator's objects the kustomize install ships in config/prometheus: a
// ServiceMonitor for the operator's metrics, a PodMonitor for every
// Database's pods, and the alerts' PrometheusRule. It is how an OLM install
// gets them (see config/prometheus/embed.go). A cluster that does not
// serve their kinds gets none, and says so once in the log.
type MonitoringObjects struct {
	Client    client.Client
	Discovery discovery.ServerResourcesInterfaceWithContext
	// Namespace is the operator's.
	Namespace string
	Interval  time.Duration
	Log       logr.Logger

	missingLogged bool
}

// NeedLeaderElection is true: one operator replica applies them.
func (m *MonitoringObjects) NeedLeaderElection() bool { return true }

// Start applies the objects now and at every interval until ctx ends.
func (m *MonitoringObjects) Start(ctx context.Context) error {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if applied, err := m.Apply(ctx); err != nil {
			m.Log.Error(err, "applying the Prometheus operator's objects", "applied", applied)
		}
	}, m.Interval)
	return nil
}

// Apply applies each object whose kind the cluster serves, and returns
// the kinds it applied.
func (m *MonitoringObjects) Apply(ctx context.Context) ([]string, error) {
	served, err := m.servedKinds(ctx)
	if err != nil {
		return nil, err
	}
	if len(served) == 0 {
		if !m.missingLogged {
			m.Log.Info("the cluster does not serve " + monitoringGroupVersion + " (no Prometheus operator): no ServiceMonitor, PodMonitor or PrometheusRule applied")
			m.missingLogged = true
		}
		return nil, nil
	}
	m.missingLogged = false
	objs, err := MonitoringObjectsIn(m.Namespace)
	if err != nil {
		return nil, err
	}
	var applied []string
	var errs []error
	for _, o := range objs {
		if !served[o.GetKind()] {
			continue
		}
		if err := m.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o),
			client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			errs = append(errs, fmt.Errorf("applying %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err))
			continue
		}
		applied = append(applied, o.GetKind())
	}
	if len(applied) > 0 {
		m.Log.V(1).Info("applied the Prometheus operator's objects", "namespace", m.Namespace, "kinds", applied)
	}
	return applied, errors.Join(errs...)
}

// servedKinds are the kinds of monitoring.coreos.com/v1 the cluster serves
// (none: no Prometheus operator).
func (m *MonitoringObjects) servedKinds(ctx context.Context) (map[string]bool, error) {
	list, err := m.Discovery.ServerResourcesForGroupVersionWithContext(ctx, monitoringGroupVersion)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", monitoringGroupVersion, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Kind] = true
	}
	return served, nil
}

// MonitoringObjectsIn are the embedded objects as kustomize renders them
// into namespace: names prefixed, namespace set.
func MonitoringObjectsIn(namespace string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, doc := range [][]byte{prometheus.ServiceMonitor, prometheus.PodMonitor, prometheus.PrometheusRule} {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			return nil, fmt.Errorf("reading an embedded monitoring object: %w", err)
		}
		o.SetName(prometheus.NamePrefix + o.GetName())
		o.SetNamespace(namespace)
		objs = append(objs, o)
	}
	return objs, nil
}
