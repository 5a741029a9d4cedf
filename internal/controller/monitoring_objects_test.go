package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/go-logr/logr/testr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestMonitoringObjectsOnlyWhereServed: a cluster without the Prometheus
// operator gets no object and no error; one serving some of its kinds
// gets those, named and placed as kustomize places them; one whose fields
// someone else changed is left alone, without an error. (Applied against
// the real CRDs, as the bundle's RBAC allows: tests/rbac.)
func TestMonitoringObjectsOnlyWhereServed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		served []string
		want   []string
		// conflict: the kind whose apply meets a field someone else set.
		conflict string
	}{
		{"no Prometheus operator", nil, nil, ""},
		{"rules only", []string{"PrometheusRule"}, []string{"PrometheusRule/database-operator-alerts"}, ""},
		{"everything", []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"}, []string{
			"ServiceMonitor/database-operator-controller-manager-metrics", "PodMonitor/database-operator-database-instances",
			"PrometheusRule/database-operator-alerts"}, ""},
		{"a user's edit left alone", []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"}, []string{
			"ServiceMonitor/database-operator-controller-manager-metrics", "PrometheusRule/database-operator-alerts"}, "PodMonitor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
			if tc.served != nil {
				list := &metav1.APIResourceList{GroupVersion: monitoringGroupVersion}
				for _, k := range tc.served {
					list.APIResources = append(list.APIResources, metav1.APIResource{Kind: k})
				}
				disc.Resources = []*metav1.APIResourceList{list}
			}
			var applied []string
			c := fake.NewClientBuilder().WithScheme(runtime.NewScheme()).WithInterceptorFuncs(interceptor.Funcs{
				Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
					b, err := json.Marshal(obj)
					if err != nil {
						return err
					}
					u := &unstructured.Unstructured{}
					if err := u.UnmarshalJSON(b); err != nil {
						return err
					}
					if u.GetNamespace() != "operators" {
						t.Errorf("%s applied in %q", u.GetName(), u.GetNamespace())
					}
					if u.GetKind() == tc.conflict {
						return apierrors.NewConflict(schema.GroupResource{Group: "monitoring.coreos.com"}, u.GetName(),
							errors.New(`Apply failed with 1 conflict: conflict with "kubectl-edit"`))
					}
					applied = append(applied, u.GetKind()+"/"+u.GetName())
					return nil
				},
			}).Build()
			m := &MonitoringObjects{Client: c, Discovery: disc, Namespace: "operators", Log: testr.New(t)}
			kinds, err := m.Apply(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(applied, tc.want) {
				t.Errorf("applied %v, want %v", applied, tc.want)
			}
			if len(kinds) != len(tc.want) {
				t.Errorf("reported %v", kinds)
			}
		})
	}
}
