package plugin

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(issue 31): being written.
func newLogsCommand(_ *Options) *cobra.Command {
	return &cobra.Command{Use: "logs", RunE: func(*cobra.Command, []string) error { return errors.New("not yet") }}
}
