// Package plugin is `kubectl database` (cmd/kubectl-database): one file per
// command, each built on the typed client (pkg/client) and kubectl's
// libraries (cli-runtime's flags and printers, cobra).
package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes: 0 done; 1 the command failed (an error from the cluster, a
// Backup that failed, a wait that timed out); 2 the command line is wrong
// (unknown command or flag, missing argument); connect ends with its
// client's own exit code.
const (
	ExitFailed = 1
	ExitUsage  = 2
)

// usageError is a wrong command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCodeError ends the plugin with code: the exit code of a program it
// ran on the user's behalf (connect's client), passed on as its own.
type exitCodeError struct {
	err  error
	code int
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

// StdStreams are the process's standard streams.
func StdStreams() genericiooptions.IOStreams {
	return genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// Main runs the plugin with args and returns its exit code.
func Main(args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(streams.ErrOut, "error:", err)
	return exitCode(err)
}

// exitCode is the plugin's exit code for a command's error.
func exitCode(err error) int {
	var usage usageError
	// cobra's own "unknown command" is a wrong command line too.
	if errors.As(err, &usage) || strings.HasPrefix(err.Error(), "unknown command") {
		return ExitUsage
	}
	var exit exitCodeError
	if errors.As(err, &exit) {
		return exit.code
	}
	return ExitFailed
}

// Options are what every command shares: kubectl's connection flags (-n,
// --context, --kubeconfig, ...), the streams, and the clients built from
// them on first use.
type Options struct {
	ConfigFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	// Timeout bounds a command's requests and, with --wait, its wait.
	Timeout time.Duration

	clients *Clients
}

// NewCommand is `kubectl database` with its subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{ConfigFlags: genericclioptions.NewConfigFlags(true), IOStreams: streams}
	root := &cobra.Command{
		Use:           "kubectl-database",
		Short:         "Day-2 work on the operator's Databases: status, switchover, backup, restore, report, connect, logs",
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs the plugin as `kubectl database`.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl database"},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	o.ConfigFlags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "how long a command, its --wait included, may take")
	for _, sub := range []func(*Options) *cobra.Command{
		newStatusCommand, newSwitchoverCommand, newBackupCommand, newRestoreCommand,
		newReportCommand, newConnectCommand, newLogsCommand, newListCommand,
	} {
		root.AddCommand(sub(o))
	}
	return root
}

// context is the command's context, bounded by --timeout.
func (o *Options) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), o.Timeout)
}

// args checks a command's positional arguments: exit code 2 when wrong.
func args(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("want %s, got %d argument(s)", what, len(args))}
		}
		return nil
	}
}

// argsBetween is args for a range of counts.
func argsBetween(least, most int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < least || len(args) > most {
			return usageError{fmt.Errorf("want %s, got %d argument(s)", what, len(args))}
		}
		return nil
	}
}
