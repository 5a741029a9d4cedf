package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// restoreOptions override what the new Database takes from the source.
type restoreOptions struct {
	to           string
	version      string
	replicas     int32
	storageSize  string
	storageClass string
	wait         bool
	// A point-in-time recovery (a physical Backup that records its WAL
	// archive): at most one.
	targetTime, targetLSN, targetName string
}

// recoveryTarget is the flags' recovery target, nil without one.
func (ro restoreOptions) recoveryTarget(b *dbv1.Backup) (*dbv1.RecoveryTarget, error) {
	t := &dbv1.RecoveryTarget{Time: ro.targetTime, LSN: ro.targetLSN, Name: ro.targetName}
	set := 0
	for _, v := range []string{t.Time, t.LSN, t.Name} {
		if v != "" {
			set++
		}
	}
	switch {
	case set == 0:
		return nil, nil
	case set > 1:
		return nil, usageError{errors.New("give one of --target-time, --target-lsn and --target-name")}
	}
	if _, err := t.ParsedTime(); err != nil {
		return nil, usageError{err}
	}
	if b.Status.Method != dbv1.BackupPhysical || b.Status.ArchivePath == "" {
		return nil, fmt.Errorf("the Backup %s cannot be recovered to a moment: a recovery target needs a physical Backup of a Database that archives its WAL (this one is %s, archive %q)",
			b.Name, orDash(string(b.Status.Method)), b.Status.ArchivePath)
	}
	return t, nil
}

func newRestoreCommand(o *Options) *cobra.Command {
	var ro restoreOptions
	cmd := &cobra.Command{
		Use:   "restore BACKUP --to NEW_NAME",
		Short: "Create a Database bootstrapped from a completed Backup",
		Long: `Create a new Database whose data is the Backup's. It takes the source
Database's engine, version, replicas and storage unless flags override them
(when the source is gone: the Backup's engine and version, and --storage-size).
The source is never touched.`,
		Example: `  kubectl database restore orders-20261206-101500 --to orders-copy --wait
  kubectl database restore orders-20261206-101500 --to orders-at-noon --target-time 2026-12-06T12:00:00Z`,
		Args: args(1, "the Backup's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ro.to == "" {
				return usageError{errors.New("--to NEW_NAME is required: the name of the Database to create")}
			}
			ctx, cancel := o.context(cmd)
			defer cancel()
			c, err := o.Clients()
			if err != nil {
				return err
			}
			return c.restore(ctx, o.Out, args[0], ro)
		},
	}
	f := cmd.Flags()
	f.StringVar(&ro.to, "to", "", "the new Database's name (required)")
	f.StringVar(&ro.version, "version", "", "the server version (default: the source's)")
	f.Int32Var(&ro.replicas, "replicas", 0, "instances (default: the source's)")
	f.StringVar(&ro.storageSize, "storage-size", "", "each instance's volume size (default: the source's)")
	f.StringVar(&ro.storageClass, "storage-class", "", "the volumes' storage class (default: the source's)")
	f.BoolVar(&ro.wait, "wait", false, "follow the restore until the new Database runs (exit 1 when it fails)")
	f.StringVar(&ro.targetTime, "target-time", "", "recover to this moment (RFC 3339, fractions of a second kept): a physical Backup and its WAL archive")
	f.StringVar(&ro.targetLSN, "target-lsn", "", "recover to this WAL position (PostgreSQL)")
	f.StringVar(&ro.targetName, "target-name", "", "recover to this restore point (pg_create_restore_point)")
	return cmd
}

func (c *Clients) restore(ctx context.Context, out io.Writer, backup string, ro restoreOptions) error {
	b, err := c.DB.ExampleV1().Backups(c.Namespace).Get(ctx, backup, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no Backup %q in namespace %q", backup, c.Namespace)
	}
	if err != nil {
		return fmt.Errorf("reading Backup %s: %w", backup, err)
	}
	if b.Status.Phase != dbv1.BackupCompleted {
		return fmt.Errorf("the Backup %s is %s (%s): only a Completed backup can be restored", b.Name, orDash(string(b.Status.Phase)), orDash(b.Status.Reason))
	}
	db, err := c.restoredDatabase(ctx, b, ro)
	if err != nil {
		return err
	}
	if db, err = c.DB.ExampleV1().Databases(c.Namespace).Create(ctx, db, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("the Database %s exists already: restore into a new name", ro.to)
		}
		return fmt.Errorf("creating Database %s: %w", ro.to, err)
	}
	fmt.Fprintf(out, "Database %s created from Backup %s (%s %s, %d replicas)\n", db.Name, b.Name, db.Spec.Engine, db.Spec.Version, db.Spec.Replicas)
	if !ro.wait {
		return nil
	}
	err = c.follow(ctx, out, db, func(db *dbv1.Database) (bool, error) {
		restored := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionRestored)
		if restored != nil && restored.Reason == dbv1.ReasonRestoreFailed {
			return false, fmt.Errorf("the restore failed: %s: %s", restored.Reason, restored.Message)
		}
		return db.Status.Phase == dbv1.PhaseRunning && restored != nil && restored.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		return fmt.Errorf("restoring %s: %w", ro.to, err)
	}
	fmt.Fprintf(out, "Database %s runs with Backup %s's data\n", ro.to, b.Name)
	return nil
}

// releaseOf is the release spec.version names (PostgreSQL's major, MySQL's
// and MariaDB's major.minor) of a server's version string as a Backup
// records it ("15.18 (Debian 15.18-0+deb12u1)", "10.11.6-MariaDB-0+deb12u1").
func releaseOf(engine dbv1.Engine, version string) string {
	parts := strings.FieldsFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	switch {
	case len(parts) == 0:
		return ""
	case engine == dbv1.EnginePostgreSQL || len(parts) == 1:
		return parts[0]
	}
	return parts[0] + "." + parts[1]
}

// restoredDatabase is the new Database: the source's engine, version,
// replicas and storage (or the Backup's, when the source is gone), with
// the flags' overrides, bootstrapped from the Backup.
func (c *Clients) restoredDatabase(ctx context.Context, b *dbv1.Backup, ro restoreOptions) (*dbv1.Database, error) {
	spec := dbv1.DatabaseSpec{Engine: b.Status.Engine, Version: releaseOf(b.Status.Engine, b.Status.Version), Replicas: 1}
	src, err := c.DB.ExampleV1().Databases(c.Namespace).Get(ctx, b.Spec.Database.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		spec.Engine, spec.Replicas, spec.Storage = src.Spec.Engine, src.Spec.Replicas, src.Spec.Storage
		spec.Resources = src.Spec.Resources
		if v := src.Status.Version; v != "" {
			spec.Version = v
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the source Database %s: %w", b.Spec.Database.Name, err)
	case ro.storageSize == "":
		return nil, fmt.Errorf("the source Database %s is gone: give --storage-size", b.Spec.Database.Name)
	}
	if spec.Engine == "" {
		return nil, fmt.Errorf("the Backup %s does not say its engine (status.engine)", b.Name)
	}
	if ro.version != "" {
		spec.Version = ro.version
	}
	if ro.replicas > 0 {
		spec.Replicas = ro.replicas
	}
	if ro.storageSize != "" {
		q, err := resource.ParseQuantity(ro.storageSize)
		if err != nil {
			return nil, usageError{fmt.Errorf("--storage-size %q: %w", ro.storageSize, err)}
		}
		spec.Storage.Size = q
	}
	if ro.storageClass != "" {
		spec.Storage.StorageClassName = &ro.storageClass
	}
	target, err := ro.recoveryTarget(b)
	if err != nil {
		return nil, err
	}
	spec.Bootstrap = &dbv1.BootstrapSpec{Backup: &dbv1.LocalObjectReference{Name: b.Name}, RecoveryTarget: target}
	return &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: ro.to, Namespace: c.Namespace}, Spec: spec}, nil
}
