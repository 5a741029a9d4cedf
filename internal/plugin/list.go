package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/tools/cache"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/pkg/client/informers/externalversions"
)

func newListCommand(o *Options) *cobra.Command {
	var all, watch bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "The Databases with their phase, primary and instances; --watch prints each change as it happens",
		Example: `  kubectl database list -A
  kubectl database list --watch`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.Clients()
			if err != nil {
				return err
			}
			ns := c.Namespace
			if all {
				ns = metav1.NamespaceAll
			}
			if watch {
				// A watch runs until interrupted, or an explicit --timeout.
				ctx, cancel := context.WithCancel(cmd.Context())
				if cmd.Flags().Changed("timeout") {
					ctx, cancel = o.context(cmd)
				}
				defer cancel()
				return c.watchDatabases(ctx, o.Out, ns)
			}
			ctx, cancel := o.context(cmd)
			defer cancel()
			return c.listDatabases(ctx, o.Out, ns)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print a line each time a Database's phase, primary or instances change")
	return cmd
}

func (c *Clients) listDatabases(ctx context.Context, out io.Writer, ns string) error {
	list, err := c.DB.ExampleV1().Databases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Databases: %w", err)
	}
	t := &metav1.Table{ColumnDefinitions: columns("Namespace", "Name", "Engine", "Phase", "Ready", "Primary", "Instances")}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Namespace+"/"+list.Items[i].Name < list.Items[j].Namespace+"/"+list.Items[j].Name
	})
	for i := range list.Items {
		db := &list.Items[i]
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{db.Namespace, db.Name, engineVersion(db), orDash(string(db.Status.Phase)),
			fmt.Sprintf("%d/%d", db.Status.ReadyReplicas, db.Spec.Replicas), orDash(db.Status.CurrentPrimary), instancesLine(db)}})
	}
	if len(t.Rows) == 0 {
		_, err := fmt.Fprintln(out, "No Databases.")
		return err
	}
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(t, out)
}

// watchDatabases prints a line whenever a Database's summary changes,
// from the shared informer factory's events.
func (c *Clients) watchDatabases(ctx context.Context, out io.Writer, ns string) error {
	factory := externalversions.NewSharedInformerFactoryWithOptions(c.DB, 0, externalversions.WithNamespace(ns))
	informer := factory.Example().V1().Databases().Informer()
	var mu sync.Mutex
	last := map[string]string{}
	show := func(obj any, gone bool) {
		db, ok := obj.(*dbv1.Database)
		if !ok {
			return
		}
		key := db.Namespace + "/" + db.Name
		line := fmt.Sprintf("%s  %s %s  %s  primary %s  %s", key, engineVersion(db), orDash(string(db.Status.Phase)),
			fmt.Sprintf("%d/%d ready", db.Status.ReadyReplicas, db.Spec.Replicas), orDash(db.Status.CurrentPrimary), instancesLine(db))
		if gone {
			line = key + "  deleted"
		}
		mu.Lock()
		defer mu.Unlock()
		if last[key] == line {
			return
		}
		last[key] = line
		fmt.Fprintf(out, "%s  %s\n", time.Now().Format(time.TimeOnly), line)
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { show(obj, false) },
		UpdateFunc: func(_, obj any) { show(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			show(obj, true)
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

func engineVersion(db *dbv1.Database) string {
	v := db.Status.Version
	if v == "" {
		v = db.Spec.Version
	}
	return strings.TrimSpace(string(db.Spec.Engine) + " " + v)
}

// instancesLine is each instance in a few characters: orders-0 primary,
// orders-1 replica streaming, orders-2 not ready (CrashLoopBackOff).
func instancesLine(db *dbv1.Database) string {
	var parts []string
	for _, in := range db.Status.Instances {
		s := in.Name + " " + orDash(in.Role)
		// A ready replica that does not stream matters; a starting one
		// says "not ready" already.
		if in.Ready && in.Replication != "" && in.Replication != dbv1.ReplicationStreaming {
			s += " " + strings.ToLower(string(in.Replication))
		}
		if !in.Ready {
			s += " not ready"
			if in.Failure != nil {
				s += " (" + in.Failure.Reason + ")"
			}
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
