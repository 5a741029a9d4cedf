package plugin

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

func newBackupCommand(o *Options) *cobra.Command {
	var wait bool
	var name string
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Back a Database up now: create a Backup and, with --wait, follow it to its end",
		Example: `  kubectl database backup orders --wait
  kubectl database backup orders --backup-name before-upgrade`,
		Args:              args(1, "the Database's name"),
		ValidArgsFunction: o.completeDatabases,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.context(cmd)
			defer cancel()
			c, err := o.Clients()
			if err != nil {
				return err
			}
			return c.backup(ctx, o.Out, args[0], name, wait)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the Backup until it completes or fails (exit 1 when it fails)")
	cmd.Flags().StringVar(&name, "backup-name", "", "the Backup's name (default: NAME-<UTC time>)")
	return cmd
}

func (c *Clients) backup(ctx context.Context, out io.Writer, database, name string, wait bool) error {
	db, err := c.database(ctx, database)
	if err != nil {
		return err
	}
	if name == "" {
		name = fmt.Sprintf("%s-%s", db.Name, time.Now().UTC().Format("20060102-150405"))
	}
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
		Spec: dbv1.BackupSpec{Database: dbv1.LocalObjectReference{Name: db.Name}}}
	if b, err = c.DB.ExampleV1().Backups(c.Namespace).Create(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Backup %s: %w", name, err)
	}
	fmt.Fprintf(out, "Backup %s of %s created\n", b.Name, db.Name)
	if !wait {
		return nil
	}
	b, err = c.followBackup(ctx, out, b.Name)
	if err != nil {
		return err
	}
	if b.Status.Phase != dbv1.BackupCompleted {
		return fmt.Errorf("the Backup %s %s (%s): %s", b.Name, b.Status.Phase, b.Status.Reason, b.Status.Message)
	}
	fmt.Fprintf(out, "Backup %s completed: %s at %s, from %s, consistent with %s\n", b.Name, humanBytes(b.Status.Size),
		b.Status.Location, b.Status.Instance, orDash(b.Status.Position))
	return nil
}

// followBackup polls a Backup until its phase is final, printing each
// phase it reaches.
func (c *Clients) followBackup(ctx context.Context, out io.Writer, name string) (*dbv1.Backup, error) {
	var last dbv1.BackupPhase
	for {
		b, err := c.DB.ExampleV1().Backups(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading Backup %s: %w", name, err)
		}
		if b.Status.Phase != last {
			last = b.Status.Phase
			fmt.Fprintf(out, "%s  %s: %s\n", time.Now().Format(time.TimeOnly), orDash(string(last)), b.Status.Message)
		}
		if last.Finished() {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up on Backup %s after --timeout (phase %s): %w", name, orDash(string(last)), ctx.Err())
		case <-time.After(followPeriod):
		}
	}
}
