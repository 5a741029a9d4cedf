package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "example.com/database-operator/api/v1"
)

func newSwitchoverCommand(o *Options) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "switchover NAME [INSTANCE]",
		Short: "Move the primary role to INSTANCE (default: the most up-to-date ready replica) by setting spec.primary",
		Long: `Move the primary role to another instance. The operator fences the current
primary, waits until the new one has applied everything it wrote, promotes
it and points the others at it: no acknowledged write is lost.

INSTANCE is a pod name (orders-1) or an ordinal (1). Without it, the ready,
streaming replica with the least lag is chosen (PostgreSQL: the furthest
replayed WAL; MySQL, MariaDB: the fewest transactions behind).`,
		Example: `  kubectl database switchover orders --wait
  kubectl database switchover orders orders-2`,
		Args:              argsBetween(1, 2, "the Database's name and, optionally, the instance"),
		ValidArgsFunction: o.completeDatabases,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.context(cmd)
			defer cancel()
			c, err := o.Clients()
			if err != nil {
				return err
			}
			instance := ""
			if len(args) == 2 {
				instance = args[1]
			}
			return c.switchover(ctx, o.Out, args[0], instance, wait)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the switchover until the new primary serves (bounded by --timeout)")
	return cmd
}

func (c *Clients) switchover(ctx context.Context, out io.Writer, name, instance string, wait bool) error {
	db, err := c.database(ctx, name)
	if err != nil {
		return err
	}
	if err := switchoverAllowed(db); err != nil {
		return err
	}
	var target string
	if instance == "" {
		if target, err = c.mostAdvancedReplica(ctx, db, out); err != nil {
			return err
		}
	} else if target, err = switchoverTarget(db, instance); err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"primary": target}})
	if err != nil {
		return err
	}
	if _, err := c.DB.ExampleV1().Databases(c.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting spec.primary to %s: %w", target, err)
	}
	fmt.Fprintf(out, "switchover of %s from %s to %s requested (spec.primary)\n", name, db.Status.CurrentPrimary, target)
	if !wait {
		return nil
	}
	start := time.Now()
	err = c.follow(ctx, out, db, func(db *dbv1.Database) (bool, error) {
		return db.Status.CurrentPrimary == target && primaryServes(db), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to become the primary: %w", target, err)
	}
	fmt.Fprintf(out, "%s is the primary of %s (%.1fs)\n", target, name, time.Since(start).Seconds())
	return nil
}

// primaryServes: the Database runs and is Ready, which says its primary
// serves writes (the operator asked its server).
func primaryServes(db *dbv1.Database) bool {
	ready := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionReady)
	return db.Status.Phase == dbv1.PhaseRunning && ready != nil && ready.Status == metav1.ConditionTrue &&
		ready.ObservedGeneration >= db.Generation
}

// switchoverAllowed refuses a switchover the operator would not start or
// that would race another change of primary.
func switchoverAllowed(db *dbv1.Database) error {
	st := db.Status
	switch {
	case db.DeletionTimestamp != nil:
		return fmt.Errorf("the Database %s is being deleted", db.Name)
	case st.CurrentPrimary == "":
		return fmt.Errorf("the Database %s has no primary yet (phase %s)", db.Name, orDash(string(st.Phase)))
	case st.PrimaryUnhealthySince != nil:
		return fmt.Errorf("a failover of %s is under way: its primary %s has been unhealthy since %s; wait for it to end (kubectl database status %s)",
			db.Name, st.CurrentPrimary, st.PrimaryUnhealthySince.UTC().Format(time.RFC3339), db.Name)
	case db.Spec.Primary != "" && db.Spec.Primary != st.CurrentPrimary:
		return fmt.Errorf("a switchover of %s to %s is under way already (spec.primary); wait for it to end", db.Name, db.Spec.Primary)
	case db.Spec.Replicas < 2:
		return fmt.Errorf("the Database %s has one instance: there is no replica to switch over to (scale it up first)", db.Name)
	}
	return nil
}

// switchoverTarget checks a named target: an instance of the Database
// (a pod name or its ordinal), ready, and not the primary already.
func switchoverTarget(db *dbv1.Database, instance string) (string, error) {
	if _, err := strconv.Atoi(instance); err == nil {
		instance = db.Name + "-" + instance
	}
	var names []string
	for _, in := range db.Status.Instances {
		names = append(names, in.Name)
		if in.Name != instance {
			continue
		}
		switch {
		case instance == db.Status.CurrentPrimary:
			return "", fmt.Errorf("%s is the primary already", instance)
		case !in.Ready:
			return "", fmt.Errorf("%s is not ready: the operator only promotes a ready replica", instance)
		}
		return instance, nil
	}
	return "", fmt.Errorf("%s is not an instance of Database %s (its instances: %s)", instance, db.Name, strings.Join(names, ", "))
}

// mostAdvancedReplica picks the ready, streaming replica with the least
// lag, by the agents' figures; without them, the first ready streaming one.
func (c *Clients) mostAdvancedReplica(ctx context.Context, db *dbv1.Database, out io.Writer) (string, error) {
	var best string
	var bestFig *figures
	for _, in := range db.Status.Instances {
		if in.Name == db.Status.CurrentPrimary || !in.Ready || in.Replication != dbv1.ReplicationStreaming {
			continue
		}
		f, err := c.readFigures(ctx, db.Spec.Engine, in.Name)
		if err != nil {
			fmt.Fprintf(out, "(%v: comparing the others)\n", err)
		}
		if best == "" || (bestFig == nil && f != nil) || (f != nil && ahead(f, bestFig)) {
			best, bestFig = in.Name, f
		}
	}
	if best == "" {
		return "", fmt.Errorf("the Database %s has no ready, streaming replica to switch over to (see kubectl database status %s)", db.Name, db.Name)
	}
	return best, nil
}

// ahead: a has applied more than b (PostgreSQL: a later WAL position;
// MySQL, MariaDB: fewer transactions behind, then fewer seconds).
func ahead(a, b *figures) bool {
	if a.walBytes != nil && b.walBytes != nil && *a.walBytes != *b.walBytes {
		return *a.walBytes > *b.walBytes
	}
	if a.LagTransactions != nil && b.LagTransactions != nil && *a.LagTransactions != *b.LagTransactions {
		return *a.LagTransactions < *b.LagTransactions
	}
	return a.LagSeconds != nil && b.LagSeconds != nil && *a.LagSeconds < *b.LagSeconds
}
