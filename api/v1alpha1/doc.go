// Package v1alpha1 holds the older example.com/v1alpha1 shape of the
// Database kind. It stays served so that clients written against it keep
// working; v1 is the hub and the storage version, and the API server
// converts between the two through the operator's conversion webhook
// (database_conversion.go).
// +kubebuilder:object:generate=true
// +groupName=example.com
// +groupGoName=Example
package v1alpha1
