package plugin

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(issue 31): being written.
func newReportCommand(_ *Options) *cobra.Command {
	return &cobra.Command{Use: "report", RunE: func(*cobra.Command, []string) error { return errors.New("not yet") }}
}
