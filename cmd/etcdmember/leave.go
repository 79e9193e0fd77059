package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/etcdmember/etcdmember/internal/cli"
)

func newLeaveCommand() *cobra.Command {
	var kubeconfig string
	opts := cli.LeaveOptions{Timeout: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:   "leave NAME",
		Short: "Ask for an etcd member's removal, and optionally wait for the outcome",
		Long: `leave sets spec.leave=true on the EtcdMember NAME (a JSON merge patch); the leader-elected
controller then removes the member from etcd if that keeps quorum.

With --wait it follows the object and prints a line whenever the Left condition changes, until:
  - the member left (Joined=False, Left=True): exit status 0;
  - the controller refused (QuorumAtRisk, LastVoter, NoOtherAgent, NoMemberID): exit status 1.
    The request stays in place and the controller keeps re-checking it; cancel it with
    kubectl patch etcdmember NAME --type merge -p '{"spec":{"leave":false}}';
  - --timeout passed: exit status 1, with the last state seen.
EtcdError is not an outcome: the controller retries it, and the wait goes on.

With --dry-run nothing changes: it prints the leader's pre-flight verdict (the Removable
condition) and whether the member is joined, and exits 0 only if it is removable now.

Any other failure (unknown NAME, missing RBAC rights, API errors) also exits 1; the message says
which. The command needs get, list and patch on etcdmembers.etcdmember.io, and watch for --wait.`,
		Example: `  etcdmember leave node-2 --dry-run
  etcdmember leave node-2 --wait --timeout 2m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cli.NewClient(kubeconfig)
			if err != nil {
				return err
			}
			opts.Name = args[0]
			return cli.Leave(cmd.Context(), c, cmd.OutOrStdout(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means $KUBECONFIG, ~/.kube/config or in-cluster config.")
	f.BoolVar(&opts.Wait, "wait", false, "Wait until the member left or the leave was refused, printing each state change.")
	f.BoolVar(&opts.DryRun, "dry-run", false, "Change nothing; print whether the member could be removed now.")
	f.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "How long the whole command, the wait included, may take.")
	cmd.MarkFlagsMutuallyExclusive("wait", "dry-run")
	return cmd
}
