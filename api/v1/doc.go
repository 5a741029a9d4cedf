// Package v1 holds the example.com/v1 API: the Database and Backup kinds.
// Programs use it through the typed client in pkg/client.
// +kubebuilder:object:generate=true
// +groupName=example.com
// +groupGoName=Example
package v1
