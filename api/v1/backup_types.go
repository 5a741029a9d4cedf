package v1

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CronSchedulePattern is what spec.backup.schedule must match: five cron
// fields (minute hour day-of-month month day-of-week, each a value, range,
// list or step within its bounds) or a descriptor such as @daily. The CEL
// rule on BackupPolicy repeats it (markers cannot reference Go); a unit test
// keeps the two equal and checks the pattern against the cron parser the
// operator schedules with.
const CronSchedulePattern = `^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([*]|[1-5]?[0-9](-[1-5]?[0-9])?|[*]/[0-9]+|[1-5]?[0-9](-[1-5]?[0-9])?/[0-9]+)(,([*]|[1-5]?[0-9](-[1-5]?[0-9])?|[*]/[0-9]+|[1-5]?[0-9](-[1-5]?[0-9])?/[0-9]+))* +([*]|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?|[*]/[0-9]+|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?/[0-9]+)(,([*]|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?|[*]/[0-9]+|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?/[0-9]+))* +([*]|[?]|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?|[*]/[0-9]+|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?/[0-9]+)(,([*]|[?]|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?|[*]/[0-9]+|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?/[0-9]+))* +([*]|([1-9]|1[0-2]|[A-Za-z]{3})(-([1-9]|1[0-2]|[A-Za-z]{3}))?|[*]/[0-9]+)(,([*]|([1-9]|1[0-2]|[A-Za-z]{3})(-([1-9]|1[0-2]|[A-Za-z]{3}))?|[*]/[0-9]+))* +([*]|[?]|([0-6]|[A-Za-z]{3})(-([0-6]|[A-Za-z]{3}))?|[*]/[0-9]+)(,([*]|[?]|([0-6]|[A-Za-z]{3})(-([0-6]|[A-Za-z]{3}))?|[*]/[0-9]+))*)$`

// BackupPolicy is a Database's backup configuration: where backups go, when
// they are taken and how many are kept.
// +kubebuilder:validation:XValidation:rule="!has(self.schedule) || self.schedule.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([*]|[1-5]?[0-9](-[1-5]?[0-9])?|[*]/[0-9]+|[1-5]?[0-9](-[1-5]?[0-9])?/[0-9]+)(,([*]|[1-5]?[0-9](-[1-5]?[0-9])?|[*]/[0-9]+|[1-5]?[0-9](-[1-5]?[0-9])?/[0-9]+))* +([*]|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?|[*]/[0-9]+|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?/[0-9]+)(,([*]|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?|[*]/[0-9]+|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?/[0-9]+))* +([*]|[?]|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?|[*]/[0-9]+|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?/[0-9]+)(,([*]|[?]|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?|[*]/[0-9]+|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?/[0-9]+))* +([*]|([1-9]|1[0-2]|[A-Za-z]{3})(-([1-9]|1[0-2]|[A-Za-z]{3}))?|[*]/[0-9]+)(,([*]|([1-9]|1[0-2]|[A-Za-z]{3})(-([1-9]|1[0-2]|[A-Za-z]{3}))?|[*]/[0-9]+))* +([*]|[?]|([0-6]|[A-Za-z]{3})(-([0-6]|[A-Za-z]{3}))?|[*]/[0-9]+)(,([*]|[?]|([0-6]|[A-Za-z]{3})(-([0-6]|[A-Za-z]{3}))?|[*]/[0-9]+))*)$')",messageExpression="'schedule ' + self.schedule + ' is not a valid cron expression: give five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat), for example 0 3 * * * for 03:00 every day, or one of @hourly, @daily, @weekly, @monthly, @yearly'",fieldPath=.schedule
type BackupPolicy struct {
	// Schedule is when backups are taken, in cron syntax (UTC), for example
	// "0 3 * * *". Empty: only on-demand backups (Backup objects).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule,omitempty"`

	// Suspend stops scheduled backups without forgetting the schedule.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Target is where backups are written.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.s3) || !self.s3.endpoint.trim().lowerAscii().startsWith('http://') || (has(self.s3.allowInsecureHTTP) && self.s3.allowInsecureHTTP)",message="endpoint is plain http://: the credentials and every dump would cross the network unencrypted; use https://, or set allowInsecureHTTP: true to accept that",fieldPath=.s3.endpoint
	Target BackupTarget `json:"target,omitempty"`

	// Retention says which completed backups are kept.
	// +optional
	Retention BackupRetention `json:"retention,omitempty"`

	// DeadlineSeconds bounds how long one backup may run before it is
	// stopped and reported failed. Default 3600.
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=604800
	// +optional
	DeadlineSeconds *int64 `json:"deadlineSeconds,omitempty"`

	// Archive turns on continuous archiving to the target, the base of
	// point-in-time recovery: PostgreSQL's primary copies every completed
	// WAL segment there with its checksum (archive_command); MariaDB's
	// primary agent copies every finished binary log file with its
	// checksum, GTIDs and times (MySQL's is not built). A volume target's claim is mounted in every instance's pod:
	// with more than one instance it must be ReadWriteMany (or the pods
	// share a node).
	// +optional
	Archive *ArchivePolicy `json:"archive,omitempty"`

	// Verify schedules restore drills (PostgreSQL): the latest completed
	// physical backup is recovered with the WAL archive to its end into a
	// throwaway copy in a Job, every database opened and each table's rows
	// counted, then the copy deleted. The BackupVerified condition and
	// status.lastVerifiedTime report the outcome.
	// +optional
	Verify *VerifyPolicy `json:"verify,omitempty"`
}

// VerifyPolicy schedules restore drills.
// +kubebuilder:validation:XValidation:rule="self.schedule.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([*]|[1-5]?[0-9](-[1-5]?[0-9])?|[*]/[0-9]+|[1-5]?[0-9](-[1-5]?[0-9])?/[0-9]+)(,([*]|[1-5]?[0-9](-[1-5]?[0-9])?|[*]/[0-9]+|[1-5]?[0-9](-[1-5]?[0-9])?/[0-9]+))* +([*]|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?|[*]/[0-9]+|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?/[0-9]+)(,([*]|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?|[*]/[0-9]+|(1?[0-9]|2[0-3])(-(1?[0-9]|2[0-3]))?/[0-9]+))* +([*]|[?]|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?|[*]/[0-9]+|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?/[0-9]+)(,([*]|[?]|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?|[*]/[0-9]+|([1-9]|[12][0-9]|3[01])(-([1-9]|[12][0-9]|3[01]))?/[0-9]+))* +([*]|([1-9]|1[0-2]|[A-Za-z]{3})(-([1-9]|1[0-2]|[A-Za-z]{3}))?|[*]/[0-9]+)(,([*]|([1-9]|1[0-2]|[A-Za-z]{3})(-([1-9]|1[0-2]|[A-Za-z]{3}))?|[*]/[0-9]+))* +([*]|[?]|([0-6]|[A-Za-z]{3})(-([0-6]|[A-Za-z]{3}))?|[*]/[0-9]+)(,([*]|[?]|([0-6]|[A-Za-z]{3})(-([0-6]|[A-Za-z]{3}))?|[*]/[0-9]+))*)$')",messageExpression="'schedule ' + self.schedule + ' is not a valid cron expression: give five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat), for example 30 4 * * 0 for 04:30 every Sunday, or one of @hourly, @daily, @weekly, @monthly, @yearly'",fieldPath=.schedule
type VerifyPolicy struct {
	// Schedule is when drills run, in cron syntax (UTC), for example
	// "30 4 * * 0". spec.backup.suspend stops them too.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`
}

// ArchivePolicy is continuous archiving of the write-ahead log.
type ArchivePolicy struct {
	// Enabled archives every completed WAL segment of the primary.
	Enabled bool `json:"enabled"`

	// TimeoutSeconds closes and archives the current WAL segment (or
	// binary log file) at most this long after a write (PostgreSQL's
	// archive_timeout): the most a Database lost with all its volumes can
	// lose with archiving of completed files alone (the primary's agent
	// also streams the segment or file its server writes, every second,
	// so about a second is lost while the stream works). Each closed WAL
	// segment takes its full size (16 MiB) in the target; a binary log
	// file only what it holds. Default 60.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// DefaultArchiveTimeoutSeconds is ArchivePolicy.TimeoutSeconds's default.
const DefaultArchiveTimeoutSeconds = 60

// Archiving says whether the policy archives the write-ahead log.
func (p *BackupPolicy) Archiving() bool {
	return p != nil && p.Archive != nil && p.Archive.Enabled
}

// BackupRetention bounds the completed backups kept at the target. Old
// backups are deleted only after a newer one succeeded, so a run of failures
// never deletes the last good backup. Neither set: every backup is kept.
type BackupRetention struct {
	// KeepLast keeps at most this many completed backups.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	KeepLast *int32 `json:"keepLast,omitempty"`

	// MaxAge deletes completed backups older than this: a number and a unit,
	// h (hours), d (days) or w (weeks), for example "30d".
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,4}[hdw]$')",messageExpression="'maxAge ' + self + ' is not a positive duration: write a number and h, d or w, for example 30d'"
	// +kubebuilder:validation:MaxLength=8
	// +optional
	MaxAge string `json:"maxAge,omitempty"`
}

// BackupTarget is where backups are written: a PersistentVolumeClaim (the
// default when nothing is set) or an S3-compatible bucket.
// +kubebuilder:validation:XValidation:rule="!(has(self.volume) && has(self.s3))",message="choose one backup target: volume or s3, not both"
type BackupTarget struct {
	// Volume writes backups to a PersistentVolumeClaim.
	// +optional
	Volume *VolumeTarget `json:"volume,omitempty"`

	// S3 writes backups to a bucket of an S3-compatible object store.
	// +optional
	S3 *S3Target `json:"s3,omitempty"`
}

// VolumeTarget is a PersistentVolumeClaim that holds backups.
type VolumeTarget struct {
	// ClaimName names an existing claim in the Database's namespace. Empty:
	// the operator creates "<database>-backups" with the size and class
	// below (and, like the data volumes, never deletes it on its own).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`

	// Size of the claim the operator creates. Default: the Database's storage size.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the claim the operator creates (default: the
	// cluster's default class).
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// S3Target is a bucket of an S3-compatible object store.
type S3Target struct {
	// Endpoint is host[:port] or an http(s) URL of the object store; HTTPS
	// unless the URL says http://.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint"`

	// Bucket must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Prefix is prepended to every object name.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket. Default us-east-1.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// ForcePathStyle addresses the bucket as endpoint/bucket rather than
	// bucket.endpoint (most self-hosted object stores need it).
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty"`

	// CredentialsSecret names a Secret in the Database's namespace with the
	// access key ID and secret access key.
	CredentialsSecret S3Credentials `json:"credentialsSecret"`

	// CASecret names a Secret with the PEM CA bundle that signs the
	// endpoint's certificate, when it is not publicly trusted.
	// +optional
	CASecret *SecretKeyRef `json:"caSecret,omitempty"`

	// AllowInsecureHTTP accepts a plain http:// endpoint, over which the
	// credentials and the dumps travel unencrypted. Refused without it (a
	// rule on the spec fields that hold targets, not on this type: a
	// Backup's status copies a target admitted before the rule existed).
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`
}

// S3Credentials locate the keys in a Secret.
type S3Credentials struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// AccessKeyIDKey is the Secret key holding the access key ID. Default "accessKeyId".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AccessKeyIDKey string `json:"accessKeyIdKey,omitempty"`
	// SecretAccessKeyKey is the Secret key holding the secret access key. Default "secretAccessKey".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
}

// SecretKeyRef is one key of a Secret in the same namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret. Default "ca.crt".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// BootstrapSpec creates a Database from a backup instead of empty: the
// first instance is initialized, the backup is verified (checksums) and
// loaded, and only then is the Database reported Ready and given a
// read-write endpoint. Restoring into a new Database is also how a database
// is cloned.
// +kubebuilder:validation:XValidation:rule="has(self.backup) != has(self.source)",message="bootstrap needs exactly one of backup (a Backup's name) or source (a backup's location)"
// +kubebuilder:validation:XValidation:rule="!has(self.recoveryTarget) || has(self.backup)",message="a recovery target needs bootstrap.backup: the Backup records the WAL archive to replay",fieldPath=.recoveryTarget
type BootstrapSpec struct {
	// Backup names a completed Backup in this namespace.
	// +optional
	Backup *LocalObjectReference `json:"backup,omitempty"`

	// Source locates a backup directly, for one taken by another Database
	// (or in another cluster) whose Backup object is not here.
	// +optional
	Source *BackupSource `json:"source,omitempty"`

	// RecoveryTarget restores to a moment rather than to the backup's end.
	// PostgreSQL (a physical Backup of a Database that archives its WAL):
	// the base backup is unpacked and the archive replayed up to the
	// target, in a Job, before the new Database's pods start. MariaDB (a
	// logical Backup of a Database that archives its binary log): the dump
	// is loaded and the archived binary log replayed after it, from the
	// dump's GTID position to the target; the binary log dates
	// transactions in whole seconds, so a time target restores its whole
	// second (a gtid target is exact). Without it, a Backup with an
	// archive replays all of it (the latest moment the archive holds).
	// +optional
	RecoveryTarget *RecoveryTarget `json:"recoveryTarget,omitempty"`
}

// RecoveryTarget is where a point-in-time recovery stops: at most one of a
// time, a WAL position or a named restore point (PostgreSQL), or a GTID
// position (MariaDB).
// +kubebuilder:validation:XValidation:rule="(has(self.time) ? 1 : 0) + (has(self.lsn) ? 1 : 0) + (has(self.name) ? 1 : 0) + (has(self.gtid) ? 1 : 0) <= 1",message="a recovery target is one of time, lsn, name or gtid"
type RecoveryTarget struct {
	// Time: every transaction committed before it is restored, none after.
	// RFC 3339, with fractions of a second where they matter
	// (2026-12-07T00:01:26.412Z): a metav1.Time would keep whole seconds
	// only, and lose what was committed in the last one.
	// +optional
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:MaxLength=64
	Time string `json:"time,omitempty"`
	// LSN: replay up to this WAL position (as pg_current_wal_lsn() prints it).
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`
	LSN string `json:"lsn,omitempty"`
	// Name: replay up to a restore point made with pg_create_restore_point().
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!self.contains(\"'\")",message="a restore point name must not contain a quote"
	Name string `json:"name,omitempty"`
	// GTID: replay up to and with this GTID position (MariaDB), as
	// @@gtid_binlog_pos prints it: domain-server-sequence, one per domain,
	// comma-separated.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[0-9]{1,10}-[0-9]{1,10}-[0-9]{1,20}(,[0-9]{1,10}-[0-9]{1,10}-[0-9]{1,20})*$`
	GTID string `json:"gtid,omitempty"`
}

// BackupSource is a backup's location: a target and the path in it.
type BackupSource struct {
	// Target holds the backup.
	// +kubebuilder:validation:XValidation:rule="!has(self.s3) || !self.s3.endpoint.trim().lowerAscii().startsWith('http://') || (has(self.s3.allowInsecureHTTP) && self.s3.allowInsecureHTTP)",message="endpoint is plain http://: the credentials and every dump would cross the network unencrypted; use https://, or set allowInsecureHTTP: true to accept that",fieldPath=.s3.endpoint
	Target BackupTarget `json:"target"`
	// Path is the backup's path in the target (a Backup's status.path).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.startsWith('/')",message="path must be relative to the target and must not contain '..'"
	Path string `json:"path"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// BackupSpec is one backup of a Database, asked for now.
type BackupSpec struct {
	// Database names the Database (same namespace) to back up.
	Database LocalObjectReference `json:"database"`

	// Target overrides the Database's spec.backup.target for this backup.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.s3) || !self.s3.endpoint.trim().lowerAscii().startsWith('http://') || (has(self.s3.allowInsecureHTTP) && self.s3.allowInsecureHTTP)",message="endpoint is plain http://: the credentials and every dump would cross the network unencrypted; use https://, or set allowInsecureHTTP: true to accept that",fieldPath=.s3.endpoint
	Target *BackupTarget `json:"target,omitempty"`

	// Method is how the backup is taken: Logical (dumps, loaded into a
	// running server) or Physical (a copy of the data files, recovered
	// before the new Database's pods start: pg_basebackup for PostgreSQL,
	// mariadb-backup run by the instance's agent for MariaDB; not MySQL;
	// with the archive it restores to any moment since). Default:
	// Physical for a PostgreSQL or MariaDB Database that archives
	// (spec.backup.archive), else Logical.
	// +optional
	Method BackupMethod `json:"method,omitempty"`

	// DeadlineSeconds bounds how long the backup may run (default: the
	// Database's spec.backup.deadlineSeconds, else 3600).
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=604800
	// +optional
	DeadlineSeconds *int64 `json:"deadlineSeconds,omitempty"`
}

// ParsedTime is Time as a time; zero when it is unset.
func (t *RecoveryTarget) ParsedTime() (time.Time, error) {
	if t == nil || t.Time == "" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, t.Time)
	if err != nil {
		return time.Time{}, fmt.Errorf("recoveryTarget.time %q is not an RFC 3339 time (2026-12-07T00:01:26.412Z): %w", t.Time, err)
	}
	return at, nil
}

// BackupMethod is how a backup is taken.
// +kubebuilder:validation:Enum=Logical;Physical
type BackupMethod string

const (
	// BackupLogical dumps the databases (pg_dump, mariadb-dump).
	BackupLogical BackupMethod = "Logical"
	// BackupPhysical copies the data files (pg_basebackup, mariadb-backup).
	BackupPhysical BackupMethod = "Physical"
)

// BackupPhase is where a Backup is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed;Skipped
type BackupPhase string

const (
	// BackupPending is waiting to start (another backup of the Database runs,
	// or no instance is ready).
	BackupPending BackupPhase = "Pending"
	// BackupRunning means the backup Job runs.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted means the backup and its manifest are at the target.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed means the backup did not complete; reason and message say why.
	BackupFailed BackupPhase = "Failed"
	// BackupSkipped is a scheduled backup that did not run because the
	// previous one was still running.
	BackupSkipped BackupPhase = "Skipped"
)

// Reasons a Backup reports (status.reason) besides those of the backup
// program itself.
const (
	ReasonBackupCompleted    = "Completed"
	ReasonDatabaseNotFound   = "DatabaseNotFound"
	ReasonTargetInvalid      = "TargetInvalid"
	ReasonDeadlineExceeded   = "DeadlineExceeded"
	ReasonJobFailed          = "JobFailed"
	ReasonNoResult           = "NoResult"
	ReasonPreviousRunning    = "PreviousBackupRunning"
	ReasonNoInstanceReady    = "NoInstanceReady"
	ReasonWaitingForPrevious = "WaitingForPreviousBackup"
	ReasonDatabaseRestoring  = "DatabaseRestoring"
	ReasonJobCreateFailed    = "JobCreateFailed"
	ReasonMethodUnsupported  = "MethodUnsupported"
	// ReasonArchivePruned is the Event of a retention run that deleted
	// archived WAL files no kept base backup needs.
	ReasonArchivePruned = "ArchivePruned"
)

// Finished reports whether the phase is final.
func (p BackupPhase) Finished() bool {
	return p == BackupCompleted || p == BackupFailed || p == BackupSkipped
}

// BackupStatus is what happened to a Backup.
type BackupStatus struct {
	// Phase is Pending, Running, Completed, Failed or Skipped.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// Reason is a CamelCase word for the phase (for Failed: why).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened, for humans.
	// +optional
	Message string `json:"message,omitempty"`
	// StartedAt is when the backup Job started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// CompletedAt is when the backup finished (either way).
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// Engine and Version of the server backed up.
	// +optional
	Engine Engine `json:"engine,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// Instance is the pod the backup was taken from (a replica when one was healthy).
	// +optional
	Instance string `json:"instance,omitempty"`
	// Job is the Job that runs the backup.
	// +optional
	Job string `json:"job,omitempty"`
	// Location is where the backup is, for humans (file:// or s3:// URL).
	// +optional
	Location string `json:"location,omitempty"`
	// Path is the backup's path in its target; spec.bootstrap.source.path takes it.
	// +optional
	Path string `json:"path,omitempty"`
	// Target is the target the backup went to (it names Secrets, never
	// holds them): a restore finds it even after the Database's own target
	// changed or the Database was deleted.
	// +optional
	Target *BackupTarget `json:"target,omitempty"`
	// Size is the backup's size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// Checksum is the SHA-256 of the backup's files (see its manifest).
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// Position is the engine's position the backup is consistent with: a
	// PostgreSQL WAL location or a MySQL/MariaDB GTID set.
	// +optional
	Position string `json:"position,omitempty"`
	// Method is how the backup was taken (spec.method, default applied).
	// +optional
	Method BackupMethod `json:"method,omitempty"`
	// ArchivePath is the Database's archive in the same target, for a
	// backup of a Database that archives: PostgreSQL's WAL archive (a
	// physical backup), MariaDB's binary log archive (a logical backup,
	// whose dump records its GTID position). A recovery replays it from the
	// backup to its target.
	// +optional
	ArchivePath string `json:"archivePath,omitempty"`
}

// Backup is one backup of a Database. Create one to back up now; the
// operator creates them on the Database's schedule. Deleting a Backup object
// keeps its data at the target; retention deletes both.
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it names the backup's Job"
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="a Backup's spec cannot change; create another Backup"
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=all
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Position",type=string,JSONPath=`.status.position`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what to back up and where.
	Spec BackupSpec `json:"spec"`
	// Status is what happened.
	// +optional
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backups.
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Backup `json:"items"`
}

func init() {
	register(&Backup{}, &BackupList{})
}

// Keys are the Secret keys of the access key ID and the secret access key,
// defaults applied.
func (c S3Credentials) Keys() (id, secret string) {
	id, secret = c.AccessKeyIDKey, c.SecretAccessKeyKey
	if id == "" {
		id = "accessKeyId"
	}
	if secret == "" {
		secret = "secretAccessKey"
	}
	return id, secret
}

// KeyOrDefault is the Secret key of the CA bundle, default "ca.crt".
func (r SecretKeyRef) KeyOrDefault() string {
	if r.Key == "" {
		return "ca.crt"
	}
	return r.Key
}

// TargetSecret is a Secret a backup target reads and the keys it must hold.
// +kubebuilder:object:generate=false
type TargetSecret struct {
	Name string
	Keys []string
}

// Secrets lists the Secrets a target reads, sorted by name, each with the
// keys it must hold.
func (t BackupTarget) Secrets() []TargetSecret {
	var out []TargetSecret
	add := func(name string, keys ...string) {
		for i := range out {
			if out[i].Name == name {
				out[i].Keys = append(out[i].Keys, keys...)
				return
			}
		}
		out = append(out, TargetSecret{Name: name, Keys: keys})
	}
	if s3 := t.S3; s3 != nil {
		id, secret := s3.CredentialsSecret.Keys()
		add(s3.CredentialsSecret.Name, id, secret)
		if s3.CASecret != nil {
			add(s3.CASecret.Name, s3.CASecret.KeyOrDefault())
		}
	}
	slices.SortFunc(out, func(a, b TargetSecret) int { return strings.Compare(a.Name, b.Name) })
	return out
}
