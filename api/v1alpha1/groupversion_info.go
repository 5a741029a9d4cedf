// Package v1alpha1 holds the older example.com/v1alpha1 shape of the
// Database kind. It stays served so that clients written against it keep
// working; v1 is the hub and the storage version, and the API server
// converts between the two through the operator's conversion webhook
// (database_conversion.go).
// +kubebuilder:object:generate=true
// +groupName=example.com
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objects...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds this API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// objects are this API's kinds, added by each type's file (register).
var objects []runtime.Object

func register(o ...runtime.Object) { objects = append(objects, o...) }
