package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/database-operator/config/prometheus"
)

// monitoringGroupVersion is the Prometheus operator's API.
const monitoringGroupVersion = "monitoring.coreos.com/v1"

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
//
// They are owned by the operator's Deployment, so that uninstalling the
// operator removes them (its alerts would fire forever otherwise). A field
// someone else set to another value is left alone: the apply is not forced,
// and the conflict is logged (to manage them yourself, turn this off:
// --monitoring-objects=false). Its RBAC is a Role in the operator's
// namespace (config/rbac/monitoring_objects_role.yaml).
type MonitoringObjects struct {
	Client client.Client
	// Reader reads the owner Deployment (a direct read: no cache, no watch).
	Reader    client.Reader
	Discovery discovery.ServerResourcesInterfaceWithContext
	// Namespace is the operator's, Owner its Deployment's name (empty: no
	// owner).
	Namespace, Owner string
	Interval         time.Duration
	Log              logr.Logger

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
	owner, err := m.owner(ctx)
	if err != nil {
		return nil, err
	}
	var applied []string
	var errs []error
	for _, o := range objs {
		if !served[o.GetKind()] {
			continue
		}
		if owner != nil {
			o.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
		err := m.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(FieldOwner))
		if apierrors.IsConflict(err) {
			m.Log.Info("not applied: someone else set some of its fields to other values (left as they are)",
				"kind", o.GetKind(), "name", o.GetName(), "conflict", err.Error())
			continue
		}
		if err != nil {
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

// owner is the ownerReference to the operator's Deployment (nil: none
// named).
func (m *MonitoringObjects) owner(ctx context.Context) (*metav1.OwnerReference, error) {
	if m.Owner == "" {
		return nil, nil
	}
	d := &appsv1.Deployment{}
	if err := m.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Owner}, d); err != nil {
		return nil, fmt.Errorf("reading the operator's Deployment %s/%s, the monitoring objects' owner: %w", m.Namespace, m.Owner, err)
	}
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID}, nil
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
