package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	dbv1 "example.com/database-operator/api/v1"
)

// BenchmarkDesiredObjects measures one render of the chart into objects:
// the work every reconcile does before deciding whether to apply.
func BenchmarkDesiredObjects(b *testing.B) {
	r := loadChart(b)
	for _, engine := range dbv1.Engines() {
		db := newDB(engine, func(db *dbv1.Database) { db.Spec.Replicas = 3 })
		b.Run(string(engine), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := desiredObjects(r, db, ValueOptions{OperatorImage: testOperatorImage}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkContains measures the steady-state decision for the largest
// object (the StatefulSet): is the live object already as desired?
func BenchmarkContains(b *testing.B) {
	objs, err := desiredObjects(loadChart(b), newDB(dbv1.EnginePostgreSQL), ValueOptions{OperatorImage: testOperatorImage})
	if err != nil {
		b.Fatal(err)
	}
	want := byKindName(objs)["StatefulSet/orders"]
	live := runtime.DeepCopyJSON(want.Object)
	b.ReportAllocs()
	for b.Loop() {
		if !contains(live, want.Object) {
			b.Fatal("not contained")
		}
	}
}

// BenchmarkLoadChart measures loading the embedded chart, done once at start.
func BenchmarkLoadChart(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		loadChart(b)
	}
}
