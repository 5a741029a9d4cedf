package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine names the database server a Database runs.
// +kubebuilder:validation:Enum=postgresql;mysql;mariadb
type Engine string

// Size is a compute preset: v1 replaced it with explicit resources.
// +kubebuilder:validation:Enum=small;medium;large
type Size string

const (
	// SizeSmall requests 100m CPU and 256Mi memory (v1's default requests).
	SizeSmall Size = "small"
	// SizeMedium requests 500m CPU and 1Gi memory.
	SizeMedium Size = "medium"
	// SizeLarge requests 2 CPUs and 4Gi memory.
	SizeLarge Size = "large"
)

// DatabaseSpec is the v1alpha1 shape: flat fields, instances instead of
// replicas, a size preset instead of resources, keepVolumes instead of a
// deletion policy. What v1 can say and this shape cannot (failover policy,
// switchover target, resources that match no preset) travels in the
// annotation conversion.example.com/v1 so that nothing is lost.
//
// The rules that keep data safe are repeated here: the API server validates
// a request against the schema of the version it was sent in.
// +kubebuilder:validation:XValidation:rule="!has(self.version) || (self.engine == 'postgresql' && self.version in ['15', '16', '17']) || (self.engine == 'mysql' && self.version in ['8.4']) || (self.engine == 'mariadb' && self.version in ['10.11', '11.4', '11.8'])",messageExpression="'version ' + self.version + ' is not supported for engine ' + self.engine + '; supported: postgresql 15, 16, 17; mysql 8.4; mariadb 10.11, 11.4, 11.8'",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="has(self.version) || !has(oldSelf.version)",message="version cannot be removed once set",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgresql' || !has(oldSelf.version) || !has(self.version) || self.version == oldSelf.version",message="PostgreSQL major version cannot change in place (the data directory needs pg_upgrade); restore a backup into a new Database instead",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="self.engine != 'mariadb' || !has(oldSelf.version) || !has(self.version) || self.version == oldSelf.version || (oldSelf.version == '10.11' && self.version in ['11.4', '11.8']) || (oldSelf.version == '11.4' && self.version == '11.8')",message="MariaDB version cannot be downgraded: its data files are not backward compatible",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="quantity(string(self.storageSize)).compareTo(quantity(string(oldSelf.storageSize))) >= 0",message="storage size may grow but never shrink",fieldPath=.storageSize
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storageClassName is immutable: volumes cannot move to another storage class in place",fieldPath=.storageClassName
type DatabaseSpec struct {
	// Engine is the database server: postgresql, mysql or mariadb. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine is immutable; create a new Database to change engines"
	Engine Engine `json:"engine"`

	// Version is the server version; empty means the engine's default.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Version string `json:"version,omitempty"`

	// Image overrides the container image the engine and version select.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Instances is the number of servers: one primary, the rest replicas.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	Instances int32 `json:"instances,omitempty"`

	// StorageSize is each instance's volume size; it may grow, never shrink.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="storage size must be greater than zero"
	StorageSize resource.Quantity `json:"storageSize"`

	// StorageClassName of the volumes; empty means the cluster's default. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Size is a compute preset: small, medium or large. Empty leaves the
	// operator's defaults (or v1 resources carried in the annotation).
	// +optional
	Size Size `json:"size,omitempty"`

	// KeepVolumes keeps the volumes when the Database is deleted (v1:
	// deletionPolicy Retain); false deletes them (Delete). Unset: Retain.
	// +optional
	KeepVolumes *bool `json:"keepVolumes,omitempty"`
}

// DatabaseStatus is the v1alpha1 status: flat, without failover history
// (which travels in the annotation).
type DatabaseStatus struct {
	// Phase summarizes the Database's state.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Conditions are the latest observations: Ready, Progressing, Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Version is the server version in effect.
	// +optional
	Version string `json:"version,omitempty"`
	// Instances is the number of instances that exist.
	// +optional
	Instances int32 `json:"instances,omitempty"`
	// ReadyInstances is the number of instances whose pods are ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`
	// Selector of the instances' pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// Primary is the pod that serves writes.
	// +optional
	Primary string `json:"primary,omitempty"`
	// ReadWriteEndpoint is host:port of the primary's Service.
	// +optional
	ReadWriteEndpoint string `json:"readWriteEndpoint,omitempty"`
	// ReadOnlyEndpoint is host:port of the replicas' Service.
	// +optional
	ReadOnlyEndpoint string `json:"readOnlyEndpoint,omitempty"`
}

// Database is the older shape of a PostgreSQL, MySQL or MariaDB database.
// Prefer example.com/v1.
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the instances are <name>-<ordinal> pods of a StatefulSet, whose revision label allows no more"
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.instances,statuspath=.status.instances,selectorpath=.status.selector
// +kubebuilder:resource:shortName=db,categories=all
// +kubebuilder:deprecatedversion:warning="example.com/v1alpha1 Database is deprecated; use example.com/v1"
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec DatabaseSpec `json:"spec"`
	// Status is the observed state, written by the operator.
	// +optional
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}

func init() {
	register(&Database{}, &DatabaseList{})
}
