package plugin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// logsOptions are logs' flags.
type logsOptions struct {
	follow, previous bool
	tail             int64
	since            time.Duration
	container        string
}

func newLogsCommand(o *Options) *cobra.Command {
	var lo logsOptions
	cmd := &cobra.Command{
		Use:   "logs NAME [-f] [--tail N] [--since DURATION] [--previous] [--container C]",
		Short: "The logs of a Database's instances, merged, each line after its instance's name",
		Long: `The logs of the Database NAME's instances, merged in time order, each line after
its instance's name (NAME-0 | ...). A line that is a JSON object, as
PostgreSQL's JSON log the instance agent relays, is shown on one line as
TIME SEVERITY message (detail: ...); other lines as they are.

The container is database: the server, and the instance agent that runs it
(its lines start with "agent:"); --container agent-binary is the init
container that copies the agent in.

With -f, every instance's log is followed at once, each line shown as it
comes, until interrupted or --timeout. An instance whose log cannot be read
is told on the error stream, and the others are shown.`,
		Example: `  kubectl database logs orders
  kubectl database logs orders --tail 20 --since 1h
  kubectl database logs orders -f
  kubectl database logs orders --previous`,
		Args:              args(1, "the Database's NAME"),
		ValidArgsFunction: o.completeDatabases,
		RunE: func(cmd *cobra.Command, a []string) error {
			if lo.tail < -1 {
				return usageError{fmt.Errorf("--tail %d: want a count of lines, or -1 for all", lo.tail)}
			}
			if lo.since < 0 {
				return usageError{fmt.Errorf("--since %s: want a duration from now back, such as 1h", lo.since)}
			}
			return o.logs(cmd, lo, a[0])
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&lo.follow, "follow", "f", false, "follow the logs until interrupted or --timeout")
	f.Int64Var(&lo.tail, "tail", -1, "the last lines of each instance's log (-1: all)")
	f.DurationVar(&lo.since, "since", 0, "only lines newer than this, such as 5s, 2m or 3h (0: all)")
	f.BoolVarP(&lo.previous, "previous", "p", false, "the log of each instance's previous container, the one that ended last")
	f.StringVarP(&lo.container, "container", "c", serverContainer, "the container: database, or the init container agent-binary")
	return cmd
}

// podLogOptions are lo as the API's log options: always with timestamps,
// which order the lines of several pods.
func (lo logsOptions) podLogOptions() *corev1.PodLogOptions {
	opts := &corev1.PodLogOptions{Container: lo.container, Follow: lo.follow, Previous: lo.previous, Timestamps: true}
	if lo.tail >= 0 {
		opts.TailLines = &lo.tail
	}
	if lo.since > 0 {
		s := int64((lo.since + time.Second - 1) / time.Second)
		opts.SinceSeconds = &s
	}
	return opts
}

// logs is logs' work: the Database's instance pods, then their logs merged
// or followed.
func (o *Options) logs(cmd *cobra.Command, lo logsOptions, name string) error {
	c, err := o.Clients()
	if err != nil {
		return err
	}
	ctx, cancel := o.context(cmd)
	defer cancel()
	db, err := c.database(ctx, name)
	if err != nil {
		return err
	}
	pods, err := c.instancePods(ctx, db)
	if err != nil {
		return err
	}
	p := newLogPrinter(o.Out, o.ErrOut, pods)
	sources, closeAll := c.openLogs(ctx, pods, lo.podLogOptions(), p)
	defer closeAll()
	if len(sources) == 0 {
		return fmt.Errorf("no log of Database %s's instances could be read", name)
	}
	if lo.follow {
		followLogs(ctx, sources, p)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fmt.Fprintf(o.ErrOut, "stopped following after --timeout %s\n", o.Timeout)
		}
		return nil
	}
	// Read to their ends: buffered, not a write for every line.
	buffered := bufio.NewWriter(o.Out)
	p.out = buffered
	failed := mergeLogs(sources, p.line)
	if err := buffered.Flush(); err != nil {
		return err
	}
	for _, s := range sources {
		if err := failed[s.Name]; err != nil {
			p.failed(s.Name, err)
		}
	}
	return nil
}

// instancePods are the names of db's instance pods (NAME-<ordinal>), by
// ordinal.
func (c *Clients) instancePods(ctx context.Context, db *dbv1.Database) ([]string, error) {
	list, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: instanceSelector(db.Name)})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of Database %s: %w", db.Name, err)
	}
	type pod struct {
		name    string
		ordinal int
	}
	var pods []pod
	for _, p := range list.Items {
		ordinal, err := strconv.Atoi(strings.TrimPrefix(p.Name, db.Name+"-"))
		if err == nil && strings.HasPrefix(p.Name, db.Name+"-") && ordinal >= 0 {
			pods = append(pods, pod{p.Name, ordinal})
		}
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("the Database %s has no instance pods (phase %s)", db.Name, phaseOf(db))
	}
	slices.SortFunc(pods, func(a, b pod) int { return a.ordinal - b.ordinal })
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.name
	}
	return names, nil
}

// openLogs opens the log of each pod, and returns them with a function
// that closes them; one that cannot be opened is told through p and left
// out.
func (c *Clients) openLogs(ctx context.Context, pods []string, opts *corev1.PodLogOptions, p *logPrinter) ([]logSource, func()) {
	var sources []logSource
	var streams []io.Closer
	for _, pod := range pods {
		rc, err := c.Kube.CoreV1().Pods(c.Namespace).GetLogs(pod, opts).Stream(ctx)
		if err != nil {
			p.failed(pod, err)
			continue
		}
		sources, streams = append(sources, logSource{Name: pod, R: rc}), append(streams, rc)
	}
	return sources, func() {
		for _, s := range streams {
			_ = s.Close()
		}
	}
}
