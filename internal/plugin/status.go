package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	dbv1 "example.com/database-operator/api/v1"
)

// lastBackups is how many of a Database's latest Backups status lists.
const lastBackups = 5

func newStatusCommand(o *Options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "A Database's phase, conditions, primary, instances (role, readiness, position, lag, replication), last failover and backups",
		Example: `  kubectl database status orders
  kubectl database status orders -n shop -o json`,
		Args:              args(1, "the Database's name"),
		ValidArgsFunction: o.completeDatabases,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return usageError{fmt.Errorf("--output %q: want json or yaml (or nothing, for the table)", output)}
			}
			ctx, cancel := o.context(cmd)
			defer cancel()
			c, err := o.Clients()
			if err != nil {
				return err
			}
			v, err := c.statusOf(ctx, args[0])
			if err != nil {
				return err
			}
			return v.write(o.Out, output, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml; the default is a table for people")
	return cmd
}

// statusView is what status shows, and its -o json/yaml form.
type statusView struct {
	Name             string               `json:"name"`
	Namespace        string               `json:"namespace"`
	Engine           dbv1.Engine          `json:"engine"`
	Version          string               `json:"version,omitempty"`
	Phase            dbv1.Phase           `json:"phase,omitempty"`
	Primary          string               `json:"primary,omitempty"`
	Replicas         int32                `json:"replicas"`
	ReadyReplicas    int32                `json:"readyReplicas"`
	Endpoints        dbv1.Endpoints       `json:"endpoints"`
	Conditions       []metav1.Condition   `json:"conditions,omitempty"`
	Instances        []instanceView       `json:"instances"`
	FiguresError     string               `json:"figuresError,omitempty"`
	LastFailover     *dbv1.FailoverRecord `json:"lastFailover,omitempty"`
	BackupSchedule   string               `json:"backupSchedule,omitempty"`
	BackupSuspended  bool                 `json:"backupSuspended,omitempty"`
	LastSuccessful   *metav1.Time         `json:"lastSuccessfulBackup,omitempty"`
	Backups          []backupView         `json:"backups,omitempty"`
	PrimaryUnhealthy *metav1.Time         `json:"primaryUnhealthySince,omitempty"`
	// The window a point-in-time recovery reaches (with WAL archiving).
	FirstRecoverable *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`
	LastRecoverable  *metav1.Time `json:"lastRecoverableTime,omitempty"`
	// Restore drills (spec.backup.verify).
	VerifySchedule string       `json:"verifySchedule,omitempty"`
	LastVerified   *metav1.Time `json:"lastVerifiedTime,omitempty"`
}

type instanceView struct {
	dbv1.InstanceStatus `json:",inline"`
	Figures             *figures `json:"figures,omitempty"`
}

type backupView struct {
	Name        string           `json:"name"`
	Phase       dbv1.BackupPhase `json:"phase,omitempty"`
	Reason      string           `json:"reason,omitempty"`
	Size        int64            `json:"size,omitempty"`
	Created     metav1.Time      `json:"created"`
	CompletedAt *metav1.Time     `json:"completedAt,omitempty"`
}

// statusOf gathers the view: the Database, its Backups and each instance's
// figures (read concurrently would be faster; a Database has at most ten).
func (c *Clients) statusOf(ctx context.Context, name string) (*statusView, error) {
	db, err := c.database(ctx, name)
	if err != nil {
		return nil, err
	}
	v := &statusView{Name: db.Name, Namespace: db.Namespace, Engine: db.Spec.Engine, Version: db.Status.Version,
		Phase: db.Status.Phase, Primary: db.Status.CurrentPrimary, Replicas: db.Spec.Replicas,
		ReadyReplicas: db.Status.ReadyReplicas, Endpoints: db.Status.Endpoints, Conditions: db.Status.Conditions,
		LastFailover: db.Status.LastFailover, LastSuccessful: db.Status.LastSuccessfulBackup,
		PrimaryUnhealthy: db.Status.PrimaryUnhealthySince,
		FirstRecoverable: db.Status.FirstRecoverabilityPoint, LastRecoverable: db.Status.LastRecoverableTime}
	if b := db.Spec.Backup; b != nil {
		v.BackupSchedule, v.BackupSuspended = b.Schedule, b.Suspend
		if b.Verify != nil {
			v.VerifySchedule, v.LastVerified = b.Verify.Schedule, db.Status.LastVerifiedTime
		}
	}
	var figErrs []string
	for _, in := range db.Status.Instances {
		iv := instanceView{InstanceStatus: in}
		if f, err := c.readFigures(ctx, db.Spec.Engine, in.Name); err != nil {
			figErrs = append(figErrs, err.Error())
		} else {
			iv.Figures = f
		}
		v.Instances = append(v.Instances, iv)
	}
	v.FiguresError = strings.Join(figErrs, "; ")
	if v.Backups, err = c.backupsOf(ctx, db.Name); err != nil {
		return nil, err
	}
	return v, nil
}

// backupsOf lists a Database's latest Backups, newest first.
func (c *Clients) backupsOf(ctx context.Context, name string) ([]backupView, error) {
	list, err := c.DB.ExampleV1().Backups(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Backups: %w", err)
	}
	var out []backupView
	for _, b := range list.Items {
		if b.Spec.Database.Name == name {
			out = append(out, backupView{Name: b.Name, Phase: b.Status.Phase, Reason: b.Status.Reason, Size: b.Status.Size,
				Created: b.CreationTimestamp, CompletedAt: b.Status.CompletedAt})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(&out[j].Created) {
			return out[j].Created.Before(&out[i].Created)
		}
		return out[i].Name > out[j].Name
	})
	if len(out) > lastBackups {
		out = out[:lastBackups]
	}
	return out, nil
}

func (v *statusView) write(w io.Writer, output string, now time.Time) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return v.writeText(w, now)
}

// writeText is the view for people: a header, then tables printed by
// kubectl's own table printer.
func (v *statusView) writeText(w io.Writer, now time.Time) error {
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintf(tw, "Database:\t%s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(tw, "Engine:\t%s %s\n", v.Engine, v.Version)
	fmt.Fprintf(tw, "Phase:\t%s\n", orDash(string(v.Phase)))
	fmt.Fprintf(tw, "Primary:\t%s\n", orDash(v.Primary))
	if v.PrimaryUnhealthy != nil {
		fmt.Fprintf(tw, "Primary unhealthy since:\t%s (%s ago)\n", v.PrimaryUnhealthy.UTC().Format(time.RFC3339), age(v.PrimaryUnhealthy.Time, now))
	}
	fmt.Fprintf(tw, "Ready:\t%d/%d\n", v.ReadyReplicas, v.Replicas)
	fmt.Fprintf(tw, "Read-write:\t%s\n", orDash(v.Endpoints.ReadWrite))
	fmt.Fprintf(tw, "Read-only:\t%s\n", orDash(v.Endpoints.ReadOnly))
	if err := tw.Flush(); err != nil {
		return err
	}
	sections := []struct {
		title string
		table *metav1.Table
	}{
		{"Conditions", v.conditionsTable(now)},
		{"Instances", v.instancesTable()},
	}
	for _, s := range sections {
		if err := printSection(w, s.title, s.table); err != nil {
			return err
		}
	}
	if v.FiguresError != "" {
		fmt.Fprintf(w, "Positions and lag unavailable: %s\n", v.FiguresError)
	}
	fmt.Fprintln(w)
	if f := v.LastFailover; f != nil {
		fmt.Fprintf(w, "Last failover: %s ago, %s -> %s: %s\n", age(f.Time.Time, now), f.From, f.To, f.Reason)
	} else {
		fmt.Fprintln(w, "Last failover: none")
	}
	return v.writeBackups(w, now)
}

func (v *statusView) writeBackups(w io.Writer, now time.Time) error {
	switch {
	case v.BackupSchedule == "":
		fmt.Fprintln(w, "Backup schedule: none (on-demand only: kubectl database backup)")
	case v.BackupSuspended:
		fmt.Fprintf(w, "Backup schedule: %s (suspended)\n", v.BackupSchedule)
	default:
		fmt.Fprintf(w, "Backup schedule: %s\n", v.BackupSchedule)
	}
	if v.LastSuccessful != nil {
		fmt.Fprintf(w, "Last successful backup: %s ago\n", age(v.LastSuccessful.Time, now))
	}
	if v.FirstRecoverable != nil && v.LastRecoverable != nil {
		fmt.Fprintf(w, "Recoverable to any moment from %s to %s (restore --target-time)\n",
			v.FirstRecoverable.UTC().Format(time.RFC3339), v.LastRecoverable.UTC().Format(time.RFC3339))
	}
	switch {
	case v.VerifySchedule == "":
	case v.LastVerified == nil:
		fmt.Fprintf(w, "Restore drills: %s, no drill has restored a backup yet (see BackupVerified)\n", v.VerifySchedule)
	default:
		fmt.Fprintf(w, "Restore drills: %s, the last successful one %s ago (see BackupVerified)\n", v.VerifySchedule, age(v.LastVerified.Time, now))
	}
	if len(v.Backups) == 0 {
		fmt.Fprintln(w, "Backups: none")
		return nil
	}
	return printSection(w, "Backups", v.backupsTable(now))
}

// printSection prints a titled table with kubectl's table printer.
func printSection(w io.Writer, title string, t *metav1.Table) error {
	fmt.Fprintf(w, "\n%s:\n", title)
	if len(t.Rows) == 0 {
		_, err := fmt.Fprintln(w, "  none")
		return err
	}
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(t, w)
}

func columns(names ...string) []metav1.TableColumnDefinition {
	defs := make([]metav1.TableColumnDefinition, len(names))
	for i, n := range names {
		defs[i] = metav1.TableColumnDefinition{Name: n, Type: "string"}
	}
	return defs
}

func (v *statusView) conditionsTable(now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: columns("Type", "Status", "Reason", "Age", "Message")}
	conds := slices.Clone(v.Conditions)
	sort.SliceStable(conds, func(i, j int) bool { return conds[i].Type < conds[j].Type })
	for _, c := range conds {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{c.Type, string(c.Status), c.Reason, age(c.LastTransitionTime.Time, now), c.Message}})
	}
	return t
}

func (v *statusView) instancesTable() *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: columns("Name", "Role", "Ready", "Replication", "Position", "Lag", "Problem")}
	for _, in := range v.Instances {
		position, lag := "?", "?"
		if in.Figures != nil {
			position, lag = orDash(in.Figures.Position), orDash(in.Figures.lag())
		}
		if in.Role == "primary" {
			lag = "-"
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{in.Name, orDash(in.Role), yesNo(in.Ready),
			orDash(string(in.Replication)), position, lag, orDash(in.problem())}})
	}
	return t
}

// problem is what is wrong with an instance, in a few words.
func (in instanceView) problem() string {
	var p []string
	if f := in.Failure; f != nil {
		s := f.Reason
		if f.ProbableCause != "" {
			s += " (" + f.ProbableCause + ")"
		}
		p = append(p, s)
	}
	if in.LagOverBound {
		p = append(p, "lag over bound")
	}
	if in.LastError != "" {
		p = append(p, in.LastError)
	}
	return strings.Join(p, "; ")
}

func (v *statusView) backupsTable(now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: columns("Name", "Phase", "Reason", "Size", "Age")}
	for _, b := range v.Backups {
		size := "-"
		if b.Size > 0 {
			size = humanBytes(b.Size)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{b.Name, orDash(string(b.Phase)), orDash(b.Reason), size, age(b.Created.Time, now)}})
	}
	return t
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
