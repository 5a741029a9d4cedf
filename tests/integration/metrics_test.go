package integration

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// reconcileCount reads controller-runtime's reconcile counter for the
// Database controller from the in-process metrics registry.
func reconcileCount(t testing.TB) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "database" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
