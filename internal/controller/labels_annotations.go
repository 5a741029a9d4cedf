package controller

// Every label, annotation and finalizer the operator sets or reads, in one
// place. Keys under database.example.com/ are the operator's own; the
// app.kubernetes.io/ ones follow Kubernetes' recommended labels.

// Labels of the objects behind a Database. The chart renders the selector
// labels (name, instance); the role label is the Go code's alone (the
// chart's Services only select on it).
const (
	// labelName is the chart's name (chartName) on every object it renders,
	// JobAppName on backup and restore pods.
	labelName = "app.kubernetes.io/name"
	// labelInstance is the Database's name.
	labelInstance = "app.kubernetes.io/instance"
	// labelManagedBy is managedBy on everything the operator makes: the
	// operator's cache holds only Secrets and ConfigMaps carrying it.
	labelManagedBy = "app.kubernetes.io/managed-by"
	// labelComponent tells backup pods from restore pods
	// (componentBackup, componentRestore).
	labelComponent = "app.kubernetes.io/component"
	// labelRole is rolePrimary on the primary's pod and roleReplica on the
	// others: the -rw and -ro Services select on it.
	labelRole = "database.example.com/role"
	// labelBackup names the Backup a Job or pod works for.
	labelBackup = "database.example.com/backup"
	// labelDatabase names the Database a Backup belongs to.
	labelDatabase = "database.example.com/database"
	// labelScheduled marks a Backup the schedule created.
	labelScheduled = "database.example.com/scheduled"

	managedBy   = "database-operator"
	rolePrimary = "primary"
	roleReplica = "replica"
)

// Annotations.
const (
	// appliedHashAnnotation, on every applied object, is a hash of what was
	// last applied, so a render that drops a field (which the live object
	// would still carry) is noticed.
	appliedHashAnnotation = "database.example.com/applied-hash"
	// recoveryClaimAnnotation, on the first instance's claim made for a
	// point-in-time recovery before the StatefulSet, is the Database's
	// UID: that claim is the Database's own, never one kept from an
	// earlier Database of the name.
	recoveryClaimAnnotation = "database.example.com/recovery-for"
	// jobBackupAnnotation, on a recovery or restore drill Job, names the
	// Backup it recovers (the condition reporting the outcome names it).
	jobBackupAnnotation = "database.example.com/backup"
	// appliedPasswordAnnotation, on the application and replication
	// Secrets, is a hash of
	// the password last set on the server: a changed password in the
	// Secret is set on the server (rotation) and the hash updated.
	appliedPasswordAnnotation = "database.example.com/applied-password-sha256"
	// primaryPositionAnnotation, on the topology ConfigMap, is the
	// primary's last sampled replication position (engine.Position as
	// JSON), which spec.failover.maxLag bounds a failover by.
	primaryPositionAnnotation = "database.example.com/primary-position"
	// appliedParametersAnnotation, on each instance's pod, names (a hash)
	// the spec.parameters its running server took without a restart, so
	// they are applied once per change and per pod.
	appliedParametersAnnotation = "database.example.com/applied-parameters"
)

// Finalizer holds a Database until its volumes are handled per deletionPolicy.
const Finalizer = "database.example.com/cleanup"
