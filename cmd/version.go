package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/etcdmember/kubectl-etcdmember/internal/version"
)

func newVersionCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(r.streams.Out, "kubectl-etcdmember version %s\n", version.Get())
			return err
		},
	}
}
