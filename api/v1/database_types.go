package v1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine names the database server a Database runs.
// +kubebuilder:validation:Enum=postgresql;mysql;mariadb
type Engine string

// The engines a Database can run.
const (
	EnginePostgreSQL Engine = "postgresql"
	EngineMySQL      Engine = "mysql"
	EngineMariaDB    Engine = "mariadb"
)

// DeletionPolicy says what happens to a Database's volumes when the Database is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionPolicyRetain keeps every PersistentVolumeClaim (and so the data) after deletion.
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyDelete deletes the PersistentVolumeClaims with the Database.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// NetworkSpec limits who may connect to a Database's servers.
type NetworkSpec struct {
	// Clients may connect to the database port, as NetworkPolicy peers:
	// pods by label, namespaces by label, or address blocks. Empty: every
	// pod in the Database's namespace. The Database's own instances, its
	// backup and restore Jobs and the operator are always let in.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`
}

// DatabaseSpec is the desired state of a Database.
//
// The cross-field rules below live in the CRD (CEL) so that the API server
// itself refuses a bad spec, with or without the operator running.
// +kubebuilder:validation:XValidation:rule="!has(self.version) || (self.engine == 'postgresql' && self.version in ['15', '16', '17']) || (self.engine == 'mysql' && self.version in ['8.4']) || (self.engine == 'mariadb' && self.version in ['10.11', '11.4', '11.8'])",messageExpression="'version ' + self.version + ' is not supported for engine ' + self.engine + '; supported: postgresql 15, 16, 17; mysql 8.4; mariadb 10.11, 11.4, 11.8'",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="has(self.version) || !has(oldSelf.version)",message="version cannot be removed once set",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgresql' || !has(oldSelf.version) || !has(self.version) || self.version == oldSelf.version",message="PostgreSQL major version cannot change in place (the data directory needs pg_upgrade); restore a backup into a new Database instead",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="self.engine != 'mariadb' || !has(oldSelf.version) || !has(self.version) || self.version == oldSelf.version || (oldSelf.version == '10.11' && self.version in ['11.4', '11.8']) || (oldSelf.version == '11.4' && self.version == '11.8')",message="MariaDB version cannot be downgraded: its data files are not backward compatible",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)",message="bootstrap only applies when a Database is created and cannot be added, changed or removed; restore into a new Database instead",fieldPath=.bootstrap
// +kubebuilder:validation:XValidation:rule="!has(self.replication) || !has(self.replication.mode) || self.replication.mode != 'Synchronous' || ((has(self.replicas) ? self.replicas : 1) > (has(self.replication.synchronousReplicas) ? self.replication.synchronousReplicas : 1))",message="synchronous replication waits for replication.synchronousReplicas (default 1) replicas per commit, so replicas must be above it: add replicas, lower synchronousReplicas, or set replication.mode Asynchronous first",fieldPath=.replication
// +kubebuilder:validation:XValidation:rule="self.engine == 'postgresql' || !has(self.backup) || !has(self.backup.verify)",message="restore drills (backup.verify) restore physical PostgreSQL backups only so far: drills of MySQL and MariaDB backups are not available yet",fieldPath=.backup.verify
// +kubebuilder:validation:XValidation:rule="self.engine != 'mysql' || !has(self.backup) || !has(self.backup.archive) || !self.backup.archive.enabled",message="continuous archiving (backup.archive) is built for PostgreSQL and MariaDB: MySQL's binary log archiving is not available (its GTIDs are not MariaDB's)",fieldPath=.backup.archive
// +kubebuilder:validation:XValidation:rule="self.engine != 'mysql' || !has(self.bootstrap) || !has(self.bootstrap.recoveryTarget)",message="a recovery target (bootstrap.recoveryTarget) is built for PostgreSQL and MariaDB: MySQL restores a backup as it was taken",fieldPath=.bootstrap.recoveryTarget
// +kubebuilder:validation:XValidation:rule="self.engine != 'postgresql' || !has(self.bootstrap) || !has(self.bootstrap.recoveryTarget) || !has(self.bootstrap.recoveryTarget.gtid)",message="a GTID recovery target is MariaDB's: a PostgreSQL recovery stops at a time, an lsn or a restore point name",fieldPath=.bootstrap.recoveryTarget.gtid
// +kubebuilder:validation:XValidation:rule="self.engine != 'mariadb' || !has(self.bootstrap) || !has(self.bootstrap.recoveryTarget) || !(has(self.bootstrap.recoveryTarget.lsn) || has(self.bootstrap.recoveryTarget.name))",message="a MariaDB recovery stops at a time or a gtid position: lsn and name are PostgreSQL's",fieldPath=.bootstrap.recoveryTarget
// +kubebuilder:validation:XValidation:rule="self.engine != 'mariadb' || !has(self.replication) || !has(self.replication.synchronousReplicas) || self.replication.synchronousReplicas == 1",message="MariaDB semi-synchronous replication acknowledges after one replica: replication.synchronousReplicas must be 1",fieldPath=.replication.synchronousReplicas
type DatabaseSpec struct {
	// Engine is the database server: postgresql, mysql or mariadb. It cannot
	// change after creation.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine is immutable; create a new Database to change engines"
	Engine Engine `json:"engine"`

	// Version is the server version. When empty the operator uses the
	// engine's default (postgresql 17, mysql 8.4, mariadb 11.4) and records
	// it in status.version. PostgreSQL: 15, 16, 17; MySQL: 8.4;
	// MariaDB: 10.11, 11.4, 11.8. MariaDB may move to a newer version, never
	// an older one; PostgreSQL keeps its major version.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Version string `json:"version,omitempty"`

	// Image overrides the container image the engine and version select.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Replicas is the number of instances: one primary and replicas-1
	// streaming replicas.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Storage is the persistent volume each instance gets.
	Storage StorageSpec `json:"storage"`

	// Resources are the compute requests and limits of the database
	// container. When empty the operator requests 100m CPU and 256Mi memory.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// DeletionPolicy says what happens to the instances' PersistentVolumeClaims
	// when the Database is deleted: Retain (the default) keeps them and the
	// data, Delete deletes them.
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// Network says who may reach the servers, through the NetworkPolicy the
	// operator keeps per Database (unless it runs with --network-policy=false).
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// Failover is the automatic failover policy (with two or more replicas).
	// +optional
	Failover FailoverSpec `json:"failover,omitempty"`

	// Replication says when the primary acknowledges a commit: at once
	// (Asynchronous, the default) or once replicas hold it (Synchronous).
	// +optional
	Replication ReplicationSpec `json:"replication,omitempty"`

	// Parameters are the engine's server settings (postgresql.conf, my.cnf
	// [mysqld]), by name. Those a running server takes are applied at once
	// (PostgreSQL's reload, MySQL/MariaDB's SET GLOBAL); those it reads only
	// at start roll the instances: replicas first, then a switchover, then
	// the old primary, so no write is lost. The operator refuses names the
	// server does not know and the settings it owns (the network, files,
	// replication, fencing and TLS), and values over 1024 characters or with
	// control characters (a line break would add a setting).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z][A-Za-z0-9_.-]{0,63}$'))",message="parameter names are letters, digits, '_', '.' and '-', starting with a letter, at most 64 characters"
	Parameters map[string]string `json:"parameters,omitempty"`

	// Primary names the instance pod (<name>-<ordinal>) that should be the
	// primary. Setting it to another pod than status.currentPrimary asks for
	// a switchover: the current primary is fenced, the target applies
	// everything it wrote, then is promoted; no acknowledged write is lost.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?-[0-9]+$`
	Primary string `json:"primary,omitempty"`

	// Backup configures backups: target, schedule, retention.
	// +optional
	Backup *BackupPolicy `json:"backup,omitempty"`

	// Bootstrap creates the Database from a backup (restore, or a clone of
	// another Database). It only applies at creation and cannot change.
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`
}

// FailoverSpec says when the operator replaces a failed primary.
type FailoverSpec struct {
	// Enabled turns automatic failover on. Default true.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// DelaySeconds is how long the primary must be unready and unreachable
	// before a replica is promoted: short enough to keep writes flowing,
	// long enough to ride out a restart. Default 10.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	DelaySeconds *int32 `json:"delaySeconds,omitempty"`

	// MaxLag bounds how far behind the primary's last position seen by the
	// operator (sampled every few seconds while the primary is healthy) a
	// replica may be and still be promoted: bytes of WAL for PostgreSQL,
	// transactions for MySQL and MariaDB. A replica beyond it is passed
	// over; when every reachable replica is beyond it, no failover happens
	// (the Degraded condition and an Event say why) until the primary
	// returns, a replica catches up, or the bound is raised. Unset: no bound.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxLag *int64 `json:"maxLag,omitempty"`
}

// ReplicationMode says when the primary acknowledges a commit.
// +kubebuilder:validation:Enum=Asynchronous;Synchronous
type ReplicationMode string

const (
	// ReplicationAsynchronous acknowledges a commit once the primary holds
	// it: a failover may lose the last writes (it sets them aside).
	ReplicationAsynchronous ReplicationMode = "Asynchronous"
	// ReplicationSynchronous acknowledges a commit only once
	// synchronousReplicas replicas hold it on disk: a failover loses no
	// acknowledged write, and the primary stops acknowledging writes while
	// fewer replicas than that are connected.
	ReplicationSynchronous ReplicationMode = "Synchronous"
)

// ReplicationSpec is how the primary's writes reach the replicas.
//
// PostgreSQL: synchronous_standby_names = 'ANY k (*)'. MariaDB:
// semi-synchronous replication (AFTER_SYNC), which acknowledges after one
// replica, and whose fallback to asynchronous replication is put off for
// 49 days (its largest timeout). MySQL: semi-synchronous, k replicas.
// +kubebuilder:validation:XValidation:rule="!has(self.synchronousReplicas) || self.mode == 'Synchronous'",message="synchronousReplicas applies only to mode Synchronous",fieldPath=.synchronousReplicas
type ReplicationSpec struct {
	// Mode is Asynchronous (the default) or Synchronous.
	// +kubebuilder:default=Asynchronous
	// +optional
	Mode ReplicationMode `json:"mode,omitempty"`

	// SynchronousReplicas (k, with mode Synchronous) is how many replicas
	// must hold a commit before the primary acknowledges it. Default 1;
	// below spec.replicas. MariaDB waits for one replica only.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +optional
	SynchronousReplicas *int32 `json:"synchronousReplicas,omitempty"`
}

// SynchronousReplicas is k when replication is synchronous, else 0.
func (s *DatabaseSpec) SynchronousReplicas() int32 {
	if s.Replication.Mode != ReplicationSynchronous {
		return 0
	}
	if k := s.Replication.SynchronousReplicas; k != nil {
		return *k
	}
	return 1
}

// FailoverRecord describes one automatic failover.
type FailoverRecord struct {
	// Time the new primary was promoted.
	Time metav1.Time `json:"time"`
	// From is the pod that was primary.
	From string `json:"from"`
	// To is the pod promoted in its place.
	To string `json:"to"`
	// Reason says why, and why this replica was chosen.
	Reason string `json:"reason"`
}

// StorageSpec is the volume of each instance.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.size) || quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",message="storage size may grow but never shrink",fieldPath=.size
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storageClassName is immutable: volumes cannot move to another storage class in place",fieldPath=.storageClassName
type StorageSpec struct {
	// Size of each instance's volume, for example 10Gi. It may grow (when the
	// storage class allows expansion) but never shrink.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="storage size must be greater than zero"
	Size resource.Quantity `json:"size"`

	// StorageClassName of the volumes; empty means the cluster's default
	// storage class. It cannot change after creation.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// Phase summarizes where a Database stands, for humans and printer columns.
// Conditions carry the detail.
type Phase string

// The phases of a Database, from its creation on.
const (
	PhasePending      Phase = "Pending"
	PhaseProvisioning Phase = "Provisioning"
	PhaseRunning      Phase = "Running"
	PhaseUpdating     Phase = "Updating"
	PhaseDegraded     Phase = "Degraded"
	PhaseFailed       Phase = "Failed"
)

// Condition types a Database reports.
const (
	// ConditionReady is True when every instance is ready and the primary serves.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the operator is moving the Database
	// towards its spec (creating, scaling, rolling out a version).
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the Database serves but not as asked
	// (fewer ready instances than replicas), or a reconcile phase failed.
	ConditionDegraded = "Degraded"
	// ConditionLastBackupSucceeded is True when the latest finished backup
	// completed, False when it failed or was skipped; absent before the
	// first backup.
	ConditionLastBackupSucceeded = "LastBackupSucceeded"
	// ConditionRestored, on a Database bootstrapped from a backup, is True
	// once the backup was verified and loaded; until then the Database is
	// not Ready and has no read-write endpoint.
	ConditionRestored = "Restored"
	// ConditionReplicationHealthy is True when every replica streams from
	// the primary within the lag bound, False (naming the instance and why)
	// when one does not replicate or is beyond the bound. Ready is False
	// while it is False: a Database whose replica silently stopped is not
	// healthy, whatever its pods say.
	ConditionReplicationHealthy = "ReplicationHealthy"
	// ConditionInstancesHealthy is False when an instance's pod cannot run:
	// not scheduled, its claim not bound, its container not created or
	// pulled, crash-looping, killed for memory or restarting repeatedly. The
	// message names the pod, the container, the reason, the exit code, the
	// restart count and the probable cause read from its last log lines.
	ConditionInstancesHealthy = "InstancesHealthy"
	// ConditionContinuousArchiving, with spec.backup.archive, is True while
	// the primary archives its WAL, False when its last attempt failed (the
	// primary then keeps every WAL file from the failed one on, and its
	// volume fills), Unknown before the first segment or when the primary
	// cannot be read; absent without archiving.
	ConditionContinuousArchiving = "ContinuousArchiving"

	// ConditionBackupVerified, with spec.backup.verify, is True when the
	// latest restore drill recovered the latest physical backup with the
	// archive to its end, opened every database and read every table;
	// False when it failed (the reason says why) or found nothing to
	// restore.
	ConditionBackupVerified = "BackupVerified"
)

// Reasons of the ContinuousArchiving condition.
const (
	ReasonWALArchived         = "WALArchived"
	ReasonBinlogArchived      = "BinlogArchived"
	ReasonArchiveGap          = "ArchiveGap"
	ReasonArchivingFailing    = "ArchivingFailing"
	ReasonArchivingNotStarted = "ArchivingNotStarted"
	ReasonNothingArchivedYet  = "NothingArchivedYet"
	ReasonArchiverUnreadable  = "ArchiverUnreadable"
)

// Reasons of the Ready, Progressing and Degraded conditions. A failed
// reconcile phase's Degraded reason is the phase's name with "Failed"
// (ApplyFailed, FailoverFailed, ...).
const (
	ReasonAllInstancesReady = "AllInstancesReady"
	ReasonPrimaryNotReady   = "PrimaryNotReady"
	ReasonInstancesNotReady = "InstancesNotReady"
	ReasonCreating          = "Creating"
	ReasonScaling           = "Scaling"
	ReasonRollingUpdate     = "RollingUpdate"
	ReasonResizing          = "Resizing"
	// ReasonRolloutStuck: an instance restarted on a new pod template did
	// not become ready within the bound (--rollout-ready-timeout): the
	// rollout stops there, and gives its turn to other Databases.
	ReasonRolloutStuck = "RolloutStuck"
	ReasonReconciled   = "Reconciled"
	ReasonAsExpected   = "AsExpected"
)

// Reasons of the Restored condition (and of Ready while a restore runs).
const (
	ReasonRestoring        = "Restoring"
	ReasonRestoreSucceeded = "RestoreSucceeded"
	ReasonRestoreFailed    = "RestoreFailed"
	ReasonWaitingForBackup = "WaitingForBackup"
	// ReasonExistingDataKept: the primary already held data (a Database
	// recreated over its retained volumes): the backup was not loaded and
	// the data is served as it is.
	ReasonExistingDataKept = "ExistingDataKept"
)

// Reasons of the ReplicationHealthy condition.
const (
	ReasonReplicasStreaming       = "ReplicasStreaming"
	ReasonNoReplicas              = "NoReplicas"
	ReasonReplicaNotReplicating   = "ReplicaNotReplicating"
	ReasonReplicationLagOverBound = "ReplicationLagOverBound"
	// ReasonReplicationUnknown: no primary serves, so no replica's state
	// can be judged against it.
	ReasonReplicationUnknown = "ReplicationUnknown"
	// ReasonReplicationUnhealthy is Ready's and Degraded's reason while
	// ReplicationHealthy is False.
	ReasonReplicationUnhealthy = "ReplicationUnhealthy"
)

// Reasons of the InstancesHealthy condition: NoInstanceFailing, or the
// first failing instance's reason (Unschedulable, ClaimPending, and the
// kubelet's own: CrashLoopBackOff, OOMKilled, CreateContainerConfigError,
// ImagePullBackOff, ErrImagePull, ...; RestartingRepeatedly).
const (
	ReasonNoInstanceFailing = "NoInstanceFailing"
)

// ReplicationState is what a replica's replication does.
// +kubebuilder:validation:Enum=Streaming;CatchingUp;Stopped;Unknown
type ReplicationState string

const (
	// ReplicationStreaming means it receives from the primary and applies, within the lag bound.
	ReplicationStreaming ReplicationState = "Streaming"
	// ReplicationCatchingUp means it receives and applies, but is beyond the lag bound.
	ReplicationCatchingUp ReplicationState = "CatchingUp"
	// ReplicationStopped means it does not receive or does not apply, or it
	// follows another server than the primary.
	ReplicationStopped ReplicationState = "Stopped"
	// ReplicationUnknown means its server could not be asked (not running, unreachable).
	ReplicationUnknown ReplicationState = "Unknown"
)

// InstanceStatus is one instance as the operator last saw it. It holds
// states, not live figures (positions and lag live in the metrics), so
// the status is written only when something changes.
type InstanceStatus struct {
	// Name is the instance's pod.
	Name string `json:"name"`
	// Role is primary or replica, as its pod is labelled; empty before
	// the operator gave it one.
	// +optional
	Role string `json:"role,omitempty"`
	// Ready: the pod is ready, and in its Service.
	Ready bool `json:"ready"`
	// Replication is, on a replica, what its replication does.
	// +optional
	Replication ReplicationState `json:"replication,omitempty"`
	// LagOverBound: the replica is further behind the primary than the
	// bound (spec.failover.maxLag, or the engine's default).
	// +optional
	LagOverBound bool `json:"lagOverBound,omitempty"`
	// LastError is, on a replica, the last replication error its server
	// reports, or why its replication is not what it should be.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
	// Failure is why the instance's pod does not run, when it does not.
	// +optional
	Failure *InstanceFailure `json:"failure,omitempty"`
}

// InstanceFailure is the diagnosis of an instance whose pod does not run.
type InstanceFailure struct {
	// Reason is Unschedulable, ClaimPending, or the container's: the
	// kubelet's waiting reason (CrashLoopBackOff, CreateContainerConfigError,
	// ImagePullBackOff, ErrImagePull, ...), OOMKilled or RestartingRepeatedly.
	Reason string `json:"reason"`
	// Container is the container that fails, if one does.
	// +optional
	Container string `json:"container,omitempty"`
	// ExitCode is the failed container's last exit code.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// RestartCount is how often the container was restarted.
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`
	// ProbableCause is read from the last lines the failed container
	// logged: DiskFull, AuthenticationFailed, CorruptDataDirectory,
	// VersionDowngrade, ConfigurationError, OutOfMemory or Unknown.
	// +optional
	ProbableCause string `json:"probableCause,omitempty"`
	// Message is what Kubernetes or the server said (the log line the
	// cause was read from).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// Runbook is where the cause's diagnosis and mitigation are described.
	// +optional
	Runbook string `json:"runbook,omitempty"`
}

// Endpoints are the in-cluster addresses clients connect to.
type Endpoints struct {
	// ReadWrite is host:port of the Service that always selects the primary.
	// +optional
	ReadWrite string `json:"readWrite,omitempty"`
	// ReadOnly is host:port of the Service that selects the replicas.
	// +optional
	ReadOnly string `json:"readOnly,omitempty"`
}

// DatabaseStatus is the observed state of a Database.
type DatabaseStatus struct {
	// Phase summarizes the Database's state: Pending (nothing created yet),
	// Provisioning (first instances starting), Running (all ready),
	// Updating (scaling or rolling out a change), Degraded (serving, but not
	// all is well) or Failed (not serving and a reconcile phase fails). A
	// Database being deleted keeps its last phase; its deletionTimestamp
	// says it is going.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions are the latest observations: Ready, Progressing, Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes; it
	// moves only when every reconcile phase succeeded for that generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Version is the server version in effect (spec.version or the engine's default).
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Version string `json:"version,omitempty"`

	// Replicas is the number of instances that exist (for the scale subresource).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of instances whose pods are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector is the label selector of the instances' pods, in string form
	// (for the scale subresource and horizontal autoscalers).
	// +optional
	Selector string `json:"selector,omitempty"`

	// CurrentPrimary is the name of the pod that serves writes.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// Endpoints are the read-write and read-only addresses.
	// +optional
	Endpoints Endpoints `json:"endpoints,omitempty"`

	// PrimaryUnhealthySince is when the operator first saw the primary
	// unready and unreachable; cleared when it serves again.
	// +optional
	PrimaryUnhealthySince *metav1.Time `json:"primaryUnhealthySince,omitempty"`

	// Instances lists every instance: its role, readiness, replication
	// state and, when its pod does not run, why.
	// +listType=map
	// +listMapKey=name
	// +optional
	Instances []InstanceStatus `json:"instances,omitempty"`

	// LastFailover is the most recent automatic failover.
	// +optional
	LastFailover *FailoverRecord `json:"lastFailover,omitempty"`

	// LastSuccessfulBackup is when the latest completed backup finished.
	// +optional
	LastSuccessfulBackup *metav1.Time `json:"lastSuccessfulBackup,omitempty"`

	// LastScheduledBackup is the schedule time of the latest backup the
	// schedule started (or skipped).
	// +optional
	LastScheduledBackup *metav1.Time `json:"lastScheduledBackup,omitempty"`

	// FirstRecoverabilityPoint, with spec.backup.archive, is the earliest
	// moment a point-in-time recovery (bootstrap.recoveryTarget) reaches:
	// when the oldest completed physical Backup that records the archive
	// completed.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`

	// LastRecoverableTime, with spec.backup.archive, is when the primary
	// last archived a WAL segment: a recovery reaches the transactions the
	// archive holds, committed before it.
	// +optional
	LastRecoverableTime *metav1.Time `json:"lastRecoverableTime,omitempty"`

	// LastScheduledVerification is the schedule time of the latest restore
	// drill spec.backup.verify started.
	// +optional
	LastScheduledVerification *metav1.Time `json:"lastScheduledVerification,omitempty"`

	// LastVerifiedTime is when the latest successful restore drill ended.
	// +optional
	LastVerifiedTime *metav1.Time `json:"lastVerifiedTime,omitempty"`
}

// Database is a PostgreSQL, MySQL or MariaDB database the operator runs: one
// primary and replicas-1 replicas, with storage, Services and day-2 policy.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.primary) || (self.spec.primary.startsWith(self.metadata.name + '-') && self.spec.primary.substring(size(self.metadata.name) + 1).matches('^[0-9]+$') && int(self.spec.primary.substring(size(self.metadata.name) + 1)) < self.spec.replicas)",message="spec.primary must name one of this Database's instances: <name>-<ordinal> with ordinal below spec.replicas",fieldPath=.spec.primary
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",optionalOldSelf=true,message="metadata.name must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (it names the Database's Services and pods)"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the instances are <name>-<ordinal> pods of a StatefulSet, whose revision label allows no more"
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=db,categories=all
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.currentPrimary`
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
