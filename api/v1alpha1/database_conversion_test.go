package v1alpha1

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	diffpkg "k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/randfill"

	dbv1 "example.com/database-operator/api/v1"
)

// filler fills objects at random within what the API server can hold: enum
// fields take their allowed values (the schema refuses others), times have
// whole seconds (their JSON form), quantities are well formed. Everything
// else, metadata and status included, is random.
func filler(seed int64) *randfill.Filler {
	pick := func(c randfill.Continue, from ...string) string { return from[c.Intn(len(from))] }
	return randfill.New().NilChance(0.25).NumElements(0, 3).RandSource(rand.NewSource(seed)).Funcs(
		func(e *dbv1.Engine, c randfill.Continue) { *e = dbv1.Engines()[c.Intn(3)] },
		func(e *Engine, c randfill.Continue) { *e = Engine(dbv1.Engines()[c.Intn(3)]) },
		func(p *dbv1.DeletionPolicy, c randfill.Continue) {
			*p = dbv1.DeletionPolicy(pick(c, "", string(dbv1.DeletionPolicyRetain), string(dbv1.DeletionPolicyDelete)))
		},
		// "huge" stands for a value the schema is about to refuse: the
		// conversion must keep it for the refusal to name it.
		func(s *Size, c randfill.Continue) { *s = Size(pick(c, "", "small", "medium", "large", "huge")) },
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.NewTime(time.Unix(c.Int63n(4e9), 0).UTC())
		},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(1e9), resource.DecimalSI)
			if c.Bool() {
				*q = *resource.NewQuantity(c.Int63n(1<<40), resource.BinarySI)
			}
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.SetRawBytes(fmt.Appendf(nil, `{"f:spec":{"f:replicas":{}},"f:n":%d}`, c.Intn(100)))
		},
		// Resources: often empty or exactly a size preset, the paths the
		// conversion treats specially; otherwise random.
		func(r *corev1.ResourceRequirements, c randfill.Continue) {
			switch c.Intn(4) {
			case 0:
				*r = corev1.ResourceRequirements{}
			case 1:
				*r = Sizes()[c.Intn(3)].Resources()
			default:
				c.FillNoCustom(r)
				for _, l := range []corev1.ResourceList{r.Limits, r.Requests} {
					for k := range l {
						var q resource.Quantity
						c.Fill(&q)
						l[k] = q
					}
				}
			}
		},
	)
}

// hubObject is a random v1 Database; the reserved annotation is not a v1
// client's to set.
func hubObject(seed int64) *dbv1.Database {
	db := &dbv1.Database{}
	filler(seed).Fill(db)
	db.TypeMeta = metav1.TypeMeta{}
	delete(db.Annotations, V1FieldsAnnotation)
	delete(db.Annotations, UnknownSizeAnnotation)
	return db
}

// spokeObject is a random v1alpha1 Database as a v1alpha1 client writes it
// (without the annotation, which only conversion writes).
func spokeObject(seed int64) *Database {
	db := &Database{}
	filler(seed).Fill(db)
	db.TypeMeta = metav1.TypeMeta{}
	delete(db.Annotations, V1FieldsAnnotation)
	delete(db.Annotations, UnknownSizeAnnotation)
	return db
}

// overTheWire encodes and decodes obj as JSON, as the API server and the
// conversion webhook exchange it.
func overTheWire[T any](t testing.TB, obj *T) *T {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func hubRoundTrip(t testing.TB, seed int64) {
	t.Helper()
	in := hubObject(seed)
	orig := in.DeepCopy()
	spoke := &Database{}
	if err := spoke.ConvertFrom(in); err != nil {
		t.Fatalf("seed %d: v1 -> v1alpha1: %v", seed, err)
	}
	if !equality.Semantic.DeepEqual(in, orig) {
		t.Fatalf("seed %d: ConvertFrom changed its input", seed)
	}
	spoke = overTheWire(t, spoke)
	out := &dbv1.Database{}
	if err := spoke.ConvertTo(out); err != nil {
		t.Fatalf("seed %d: v1alpha1 -> v1: %v", seed, err)
	}
	if !equality.Semantic.DeepEqual(orig, out) {
		t.Fatalf("seed %d: v1 -> v1alpha1 -> v1 lost something:\n%s", seed, diff(orig, out))
	}
}

func spokeRoundTrip(t testing.TB, seed int64) {
	t.Helper()
	in := spokeObject(seed)
	orig := in.DeepCopy()
	hub := &dbv1.Database{}
	if err := in.ConvertTo(hub); err != nil {
		t.Fatalf("seed %d: v1alpha1 -> v1: %v", seed, err)
	}
	if !equality.Semantic.DeepEqual(in, orig) {
		t.Fatalf("seed %d: ConvertTo changed its input", seed)
	}
	hub = overTheWire(t, hub)
	out := &Database{}
	if err := out.ConvertFrom(hub); err != nil {
		t.Fatalf("seed %d: v1 -> v1alpha1: %v", seed, err)
	}
	if !equality.Semantic.DeepEqual(orig, out) {
		t.Fatalf("seed %d: v1alpha1 -> v1 -> v1alpha1 lost something:\n%s", seed, diff(orig, out))
	}
}

func diff(a, b any) string { return diffpkg.Diff(a, b) }

// TestRoundTripRandom converts thousands of random objects both ways; a
// new seed set every run, printed on failure for replay.
func TestRoundTripRandom(t *testing.T) {
	base := time.Now().UnixNano()
	for i := range int64(2000) {
		hubRoundTrip(t, base+i)
		spokeRoundTrip(t, base+i)
	}
}

// FuzzHubRoundTrip and FuzzSpokeRoundTrip run their seed corpus in `go
// test`; `go test -fuzz FuzzHubRoundTrip ./api/v1alpha1` explores further.
func FuzzHubRoundTrip(f *testing.F) {
	for _, s := range []int64{0, 1, 2, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed int64) { hubRoundTrip(t, seed) })
}

func FuzzSpokeRoundTrip(f *testing.F) {
	for _, s := range []int64{0, 1, 2, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed int64) { spokeRoundTrip(t, seed) })
}

// TestConversionShape pins the mapping a v1alpha1 client relies on.
func TestConversionShape(t *testing.T) {
	keep := false
	alpha := &Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "apps"},
		Spec: DatabaseSpec{Engine: "mariadb", Version: "11.4", Instances: 3, StorageSize: resource.MustParse("5Gi"),
			Size: SizeMedium, KeepVolumes: &keep},
	}
	hub := &dbv1.Database{}
	if err := alpha.ConvertTo(hub); err != nil {
		t.Fatal(err)
	}
	want := dbv1.DatabaseSpec{Engine: dbv1.EngineMariaDB, Version: "11.4", Replicas: 3,
		Storage: dbv1.StorageSpec{Size: resource.MustParse("5Gi")}, DeletionPolicy: dbv1.DeletionPolicyDelete,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}
	if !equality.Semantic.DeepEqual(hub.Spec, want) {
		t.Errorf("v1alpha1 -> v1:\n%s", diff(want, hub.Spec))
	}

	// What v1alpha1 cannot say travels in the annotation; a size the
	// v1alpha1 client then sets wins over carried resources.
	hub.Spec.Primary = "orders-2"
	hub.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
	back := &Database{}
	if err := back.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	if back.Spec.Size != "" || back.Annotations[V1FieldsAnnotation] == "" {
		t.Fatalf("custom resources: size %q, annotation %q", back.Spec.Size, back.Annotations[V1FieldsAnnotation])
	}
	back.Spec.Size = SizeLarge
	again := &dbv1.Database{}
	if err := back.ConvertTo(again); err != nil {
		t.Fatal(err)
	}
	if again.Spec.Primary != "orders-2" || !equality.Semantic.DeepEqual(again.Spec.Resources, SizeLarge.Resources()) {
		t.Errorf("primary %q, resources %v", again.Spec.Primary, again.Spec.Resources)
	}
	if _, ok := again.Annotations[V1FieldsAnnotation]; ok {
		t.Error("the annotation leaked into v1")
	}
}
