package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// reportOptions are `kubectl database report`'s flags.
type reportOptions struct {
	*Options
	file              string
	operator          bool
	logsSince         time.Duration
	operatorNamespace string
	// now is the report's time (time.Now; fixed in tests).
	now func() time.Time
}

// newReportCommand is `kubectl database report NAME` and `report --operator`:
// a zip for a bug report.
func newReportCommand(o *Options) *cobra.Command {
	r := &reportOptions{Options: o, now: time.Now}
	cmd := &cobra.Command{
		Use:   "report (NAME | --operator)",
		Short: "Collect a Database's objects, pods, Events and logs, and the operator's, into a zip for a bug report",
		Long: `Collect into a zip what a bug report needs: the Database and its Backups,
every object it owns (Secrets redacted), its Jobs and pods, the namespace's
Events, the logs of every container (and the previous container's after a
restart), and the operator's Deployment, pods, logs and OLM objects.
report.yaml at the zip's root says when, with which command, against which
server, and what could not be collected and why.

Every Secret value is replaced by "<redacted, N bytes>", and every file is
scanned for the values of the Secrets the report read before it goes into
the zip.

With --operator, only the operator's part, the CRDs' served versions and the
list of all Databases.`,
		Example: `  kubectl database report orders
  kubectl database report orders -n shop --logs-since 2h -f orders.zip
  kubectl database report --operator`,
		Args:              r.validate,
		ValidArgsFunction: o.completeDatabases,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.context(cmd)
			defer cancel()
			return r.run(ctx, args, reportCommandLine(cmd, args))
		},
	}
	f := cmd.Flags()
	f.StringVarP(&r.file, "file", "f", "", "the zip to write (default report-<name>-<UTC time>.zip, or report-operator-<UTC time>.zip)")
	f.BoolVar(&r.operator, "operator", false, "collect the operator only (its Deployment, pods, logs, OLM objects), the CRDs and the list of Databases: no NAME")
	f.DurationVar(&r.logsSince, "logs-since", 0, "only the logs newer than this (e.g. 2h; default all the kubelet keeps)")
	f.StringVar(&r.operatorNamespace, "operator-namespace", "", "the operator's namespace (default: its Deployment is found by its labels in every namespace)")
	return cmd
}

// validate checks the positional arguments against --operator: exit code 2
// when wrong.
func (r *reportOptions) validate(_ *cobra.Command, args []string) error {
	switch {
	case r.operator && len(args) > 0:
		return usageError{fmt.Errorf("--operator takes no NAME, got %d argument(s)", len(args))}
	case !r.operator && len(args) != 1:
		return usageError{fmt.Errorf("want a Database's NAME (or --operator), got %d argument(s)", len(args))}
	case r.logsSince < 0:
		return usageError{errors.New("--logs-since must not be negative")}
	}
	return nil
}

// run collects the report and writes its zip.
func (r *reportOptions) run(ctx context.Context, args, cmdline []string) error {
	c, err := r.Clients()
	if err != nil {
		return err
	}
	now := r.now().UTC()
	rep := newReport(c, now, cmdline, r.logsSince)
	rep.serverVersion(ctx)
	target := r.file
	if r.operator {
		rep.collectOperatorReport(ctx, r.operatorNamespace)
		if target == "" {
			target = fmt.Sprintf("report-operator-%s.zip", now.Format(reportTimeFormat))
		}
	} else {
		if err := rep.collectDatabase(ctx, args[0]); err != nil {
			return err
		}
		rep.collectOperator(ctx, r.operatorNamespace)
		if dbs := rep.listAllDatabases(ctx); dbs != nil {
			rep.scrubDatabaseNamespaces(ctx, dbs)
		}
		if target == "" {
			target = fmt.Sprintf("report-%s-%s.zip", args[0], now.Format(reportTimeFormat))
		}
	}
	// Past the deadline every request fails: the notes would say only that.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("collecting the report (raise --timeout?): %w", err)
	}
	files, size, err := rep.write(target)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.Out, "%s: %d files, %d bytes, %d not collected (see report.yaml)\n", target, files, size, len(rep.summary.NotCollected))
	return nil
}

// reportTimeFormat is the UTC time in a default report's file name.
const reportTimeFormat = "20060102T150405"

// reportSecretFlags are kubectl's flags whose values are credentials: report.yaml
// records them as set, not their values.
var reportSecretFlags = map[string]bool{"token": true, "password": true}

// reportCommandLine is the command as given: its path, the flags set, the
// arguments. Credentials in flags are redacted.
func reportCommandLine(cmd *cobra.Command, args []string) []string {
	line := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		v := f.Value.String()
		if reportSecretFlags[f.Name] {
			v = reportRedacted
		}
		line = append(line, "--"+f.Name+"="+v)
	})
	return append(line, args...)
}

// serverVersion records the server's version, from discovery.
func (r *report) serverVersion(ctx context.Context) {
	v, err := r.c.Kube.Discovery().ServerVersionWithContext(ctx)
	if err != nil {
		r.note("the server's version", err)
		return
	}
	r.summary.ServerVersion = v.GitVersion
}
