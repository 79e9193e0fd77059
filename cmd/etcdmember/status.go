package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/etcdmember/etcdmember/internal/cli"
)

func newStatusCommand() *cobra.Command {
	var kubeconfig string
	opts := cli.StatusOptions{Output: cli.OutputTable, Timeout: 10 * time.Second}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every EtcdMember object next to what etcd says of its member",
		Long: `status prints one row per EtcdMember object, joined by member ID with etcd's member list when
--etcd-endpoints is given:

  NAME, MEMBER ID, PEER URLS, LEARNER   the member (etcd's record when etcd was asked)
  LEADER, HEALTHY, RAFT INDEX, DB SIZE  live, from a Status request to each member's client URL;
                                        HEALTHY means it answered within --timeout
  JOINED                                the Joined condition
  LEAVE                                 "-" when no leave was asked for, "Requested" until the
                                        controller answers, then the Left reason (Removed,
                                        QuorumAtRisk, ...)
  NOTE                                  shown when a row is one-sided: "no EtcdMember object" for
                                        an etcd member nobody registered (NAME <none>), "not in
                                        etcd" for an object whose member etcd does not list

"?" means unknown (etcd not asked, or no answer) and "-" does not apply. Rows are sorted by name;
etcd members without an object come last. -o json and -o yaml print the same rows as a list for
scripts, with the fields name, etcdName, memberID, peerURLs, learner, inEtcd, leader, healthy,
raftIndex, dbSize (bytes), joined, leave and note; null means unknown.

When etcd cannot be read the objects are still printed, and the command exits 1.`,
		Example: `  etcdmember status
  etcdmember status --etcd-endpoints https://10.0.0.11:2379 --etcd-cacert ca.crt --etcd-cert client.crt --etcd-key client.key
  etcdmember status --etcd-endpoints http://127.0.0.1:2379 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cli.NewClient(kubeconfig)
			if err != nil {
				return err
			}
			return cli.Status(cmd.Context(), c, cmd.OutOrStdout(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means $KUBECONFIG, ~/.kube/config or in-cluster config.")
	bindEtcdFlags(f, &opts.Etcd, "Client URL(s) of etcd; without them the live columns show \"?\".")
	f.VarP(&opts.Output, "output", "o", "Output format: table, json or yaml.")
	f.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "Timeout of each call: the API list, etcd's member list, and each member's Status (no answer within it: unhealthy).")
	return cmd
}
