package cmd

import (
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcdmember/kubectl-etcdmember/internal/members"
)

// completionTimeout keeps a <TAB> against an unreachable API server short.
const completionTimeout = 5 * time.Second

// completeNames completes EtcdMember names not yet on the command line, for kubectl's plugin
// completion (the kubectl_complete-etcdmember script calls the plugin's __complete).
func completeNames(r *root) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := r.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list, err := members.List(cmd.Context(), c, completionTimeout)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		for _, m := range list.Items {
			if strings.HasPrefix(m.Name, toComplete) && !slices.Contains(args, m.Name) {
				names = append(names, m.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
