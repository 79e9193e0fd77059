package main

import (
	"github.com/spf13/cobra"

	"github.com/etcdmember/etcdmember/internal/version"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "etcdmember",
		Short: "Manage etcd cluster membership as Kubernetes resources",
		Long: `etcdmember makes each etcd member a cluster-scoped EtcdMember object. Every etcd node runs
"etcdmember agent", which registers its member; a leader-elected controller inside the agents
removes a member from etcd, safely, when its object gets spec.leave: true.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAgentCommand())
	root.AddCommand(newStatusCommand())
	root.AddCommand(newLeaveCommand())
	root.AddCommand(newJoinCommand())
	return root
}
