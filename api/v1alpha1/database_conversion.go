package v1alpha1

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	dbv1 "example.com/database-operator/api/v1"
)

// V1FieldsAnnotation carries, on a v1alpha1 object, what v1 says that the
// v1alpha1 shape cannot hold (JSON of v1Fields). Converting back to v1
// restores it and drops the annotation, so a v1alpha1 client that reads,
// edits and writes an object loses nothing a v1 client set. The key is
// reserved: a v1 object's own annotation of that name is not kept.
const V1FieldsAnnotation = "conversion.example.com/v1"

// UnknownSizeAnnotation carries, on a v1 object, a v1alpha1 size that is no
// preset. Only a request the v1alpha1 schema is about to refuse has one
// (the API server converts a request to v1 for the admission webhooks and
// back before validating it); keeping the value lets the schema say what is
// wrong with it instead of the conversion silently dropping it.
const UnknownSizeAnnotation = "conversion.example.com/v1alpha1-size"

// v1Fields is what only v1 can express: every field of the v1 spec and
// status that the v1alpha1 shape does not represent, as v1 encodes it.
// Carrying "the rest" rather than a list of fields means a field added to
// v1 later (say spec.backup) survives a v1alpha1 round trip with no change
// here; the random round-trip test proves it for whatever v1 holds.
type v1Fields struct {
	Spec   map[string]json.RawMessage `json:"spec,omitempty"`
	Status map[string]json.RawMessage `json:"status,omitempty"`
}

// Fields of v1 that v1alpha1 represents (spec.resources only when a size
// preset matches them).
var (
	representedSpec   = []string{"engine", "version", "image", "replicas", "storage", "deletionPolicy"}
	representedStatus = []string{"phase", "conditions", "observedGeneration", "version", "replicas", "readyReplicas", "selector", "currentPrimary", "endpoints"}
)

// Struct-valued (not pointer) fields of the v1 spec, which encode as {}
// when zero: not worth carrying. A pointer to an empty struct also encodes
// as {} and is carried, or it would come back nil.
var zeroStructSpec = []string{"resources", "failover", "replication"}

// rest encodes v and returns its fields but those named in drop, those
// that encode as null, and those named in dropEmpty that encode as {}.
func rest(v any, drop, dropEmpty []string) (map[string]json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if slices.Contains(drop, k) || string(v) == "null" || (string(v) == "{}" && slices.Contains(dropEmpty, k)) {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// restore decodes carried fields into v (a pointer).
func restore(m map[string]json.RawMessage, v any) error {
	if len(m) == 0 {
		return nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// Sizes lists the presets, smallest first.
func Sizes() []Size { return []Size{SizeSmall, SizeMedium, SizeLarge} }

// Resources returns the v1 resources a size preset stands for (requests
// only: limits were never part of a preset).
func (s Size) Resources() corev1.ResourceRequirements {
	cpu, mem := "", ""
	switch s {
	case SizeSmall:
		cpu, mem = "100m", "256Mi"
	case SizeMedium:
		cpu, mem = "500m", "1Gi"
	case SizeLarge:
		cpu, mem = "2", "4Gi"
	default:
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}

// sizeOf returns the preset whose resources are exactly r, or "".
func sizeOf(r corev1.ResourceRequirements) Size {
	for _, s := range Sizes() {
		if equality.Semantic.DeepEqual(r, s.Resources()) {
			return s
		}
	}
	return ""
}

var _ conversion.Convertible = &Database{}

// ConvertTo converts this v1alpha1 Database to the hub (v1).
func (src *Database) ConvertTo(hub conversion.Hub) error {
	dst, ok := hub.(*dbv1.Database)
	if !ok {
		return fmt.Errorf("converting v1alpha1 Database to %T: want *v1.Database", hub)
	}
	var extra v1Fields
	if raw, ok := src.Annotations[V1FieldsAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &extra); err != nil {
			return fmt.Errorf("annotation %s of %s/%s: %w", V1FieldsAnnotation, src.Namespace, src.Name, err)
		}
	}
	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	delete(dst.Annotations, V1FieldsAnnotation)
	if s := src.Spec.Size; s != "" && !slices.Contains(Sizes(), s) {
		if dst.Annotations == nil {
			dst.Annotations = map[string]string{}
		}
		dst.Annotations[UnknownSizeAnnotation] = string(s)
	}
	if len(dst.Annotations) == 0 {
		dst.Annotations = nil
	}

	// What only v1 says first, then what v1alpha1 says on top.
	dst.Spec, dst.Status = dbv1.DatabaseSpec{}, dbv1.DatabaseStatus{}
	if err := restore(extra.Spec, &dst.Spec); err != nil {
		return fmt.Errorf("annotation %s of %s/%s: spec: %w", V1FieldsAnnotation, src.Namespace, src.Name, err)
	}
	if err := restore(extra.Status, &dst.Status); err != nil {
		return fmt.Errorf("annotation %s of %s/%s: status: %w", V1FieldsAnnotation, src.Namespace, src.Name, err)
	}
	s := src.Spec
	dst.Spec.Engine = dbv1.Engine(s.Engine)
	dst.Spec.Version = s.Version
	dst.Spec.Image = s.Image
	dst.Spec.Replicas = s.Instances
	dst.Spec.Storage = dbv1.StorageSpec{Size: s.StorageSize.DeepCopy(), StorageClassName: copyString(s.StorageClassName)}
	dst.Spec.DeletionPolicy = deletionPolicy(s.KeepVolumes)
	// A size the v1alpha1 client set wins over resources carried from v1:
	// the annotation holds resources only when the size was empty.
	if slices.Contains(Sizes(), s.Size) {
		dst.Spec.Resources = s.Size.Resources()
	}

	st := src.Status
	dst.Status.Phase = dbv1.Phase(st.Phase)
	dst.Status.Conditions = copyConditions(st.Conditions)
	dst.Status.ObservedGeneration = st.ObservedGeneration
	dst.Status.Version = st.Version
	dst.Status.Replicas = st.Instances
	dst.Status.ReadyReplicas = st.ReadyInstances
	dst.Status.Selector = st.Selector
	dst.Status.CurrentPrimary = st.Primary
	dst.Status.Endpoints = dbv1.Endpoints{ReadWrite: st.ReadWriteEndpoint, ReadOnly: st.ReadOnlyEndpoint}
	return nil
}

// ConvertFrom converts the hub (v1) to this v1alpha1 Database.
func (dst *Database) ConvertFrom(hub conversion.Hub) error {
	src, ok := hub.(*dbv1.Database)
	if !ok {
		return fmt.Errorf("converting %T to a v1alpha1 Database: want *v1.Database", hub)
	}
	s := src.Spec
	keep, err := keepVolumes(s.DeletionPolicy)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", src.Namespace, src.Name, err)
	}
	dst.Spec = DatabaseSpec{
		Engine:           Engine(s.Engine),
		Version:          s.Version,
		Image:            s.Image,
		Instances:        s.Replicas,
		StorageSize:      s.Storage.Size.DeepCopy(),
		StorageClassName: copyString(s.Storage.StorageClassName),
		KeepVolumes:      keep,
	}
	dropSpec := representedSpec
	if dst.Spec.Size = sizeOf(s.Resources); dst.Spec.Size != "" {
		dropSpec = append(slices.Clone(dropSpec), "resources")
	}
	var extra v1Fields
	if extra.Spec, err = rest(s, dropSpec, zeroStructSpec); err != nil {
		return fmt.Errorf("%s/%s: encoding the v1 spec: %w", src.Namespace, src.Name, err)
	}

	st := src.Status
	dst.Status = DatabaseStatus{
		Phase:              string(st.Phase),
		Conditions:         copyConditions(st.Conditions),
		ObservedGeneration: st.ObservedGeneration,
		Version:            st.Version,
		Instances:          st.Replicas,
		ReadyInstances:     st.ReadyReplicas,
		Selector:           st.Selector,
		Primary:            st.CurrentPrimary,
		ReadWriteEndpoint:  st.Endpoints.ReadWrite,
		ReadOnlyEndpoint:   st.Endpoints.ReadOnly,
	}
	if extra.Status, err = rest(st, representedStatus, nil); err != nil {
		return fmt.Errorf("%s/%s: encoding the v1 status: %w", src.Namespace, src.Name, err)
	}

	dst.ObjectMeta = *src.ObjectMeta.DeepCopy()
	delete(dst.Annotations, V1FieldsAnnotation)
	if size, ok := dst.Annotations[UnknownSizeAnnotation]; ok {
		dst.Spec.Size = Size(size)
		delete(dst.Annotations, UnknownSizeAnnotation)
	}
	if len(extra.Spec) > 0 || len(extra.Status) > 0 {
		raw, err := json.Marshal(extra)
		if err != nil {
			return fmt.Errorf("%s/%s: encoding the v1 fields: %w", src.Namespace, src.Name, err)
		}
		if dst.Annotations == nil {
			dst.Annotations = map[string]string{}
		}
		dst.Annotations[V1FieldsAnnotation] = string(raw)
	}
	return nil
}

// deletionPolicy maps keepVolumes to v1's deletionPolicy; unset stays
// unset (the v1 schema defaults it to Retain).
func deletionPolicy(keep *bool) dbv1.DeletionPolicy {
	switch {
	case keep == nil:
		return ""
	case *keep:
		return dbv1.DeletionPolicyRetain
	default:
		return dbv1.DeletionPolicyDelete
	}
}

func keepVolumes(p dbv1.DeletionPolicy) (*bool, error) {
	switch p {
	case "":
		return nil, nil
	case dbv1.DeletionPolicyRetain:
		t := true
		return &t, nil
	case dbv1.DeletionPolicyDelete:
		f := false
		return &f, nil
	}
	// The schema admits only Retain and Delete: anything else is a bug.
	return nil, fmt.Errorf("deletionPolicy %q has no v1alpha1 equivalent", p)
}

func copyConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func copyString(p *string) *string {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
