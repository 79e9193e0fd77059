package cmd

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/etcdmember/kubectl-etcdmember/internal/join"
)

func newJoinCommand(r *root) *cobra.Command {
	opts := join.Options{Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "join --name NAME --peer-urls URLS --etcd-endpoints ENDPOINTS",
		Short: "Add a new etcd member as a learner and print the settings it starts with",
		Long: `join adds a member with the given peer URLs to a running etcd cluster as a non-voting
learner, then prints the settings the new etcd process needs, as environment-file lines for
systemd's EnvironmentFile= or "set -a; . FILE":

  ETCD_NAME                         --name
  ETCD_INITIAL_CLUSTER              every member's peer URLs, the new one's under NAME; members
                                    without a usable name of their own (never started, or sharing
                                    one) appear under their member ID
  ETCD_INITIAL_CLUSTER_STATE        existing
  ETCD_INITIAL_ADVERTISE_PEER_URLS  the new member's peer URLs as etcd recorded them

Running it again with the same peer URLs adds nothing and prints the same settings, also after the
member started or was promoted. It fails when a member that started under another name has these
peer URLs, or when another learner is still waiting for its promotion.

etcd refuses membership changes for a few seconds after a member (re)connects; join retries
those until --timeout. Notes (the member ID added or found) go to stderr.`,
		Example: `  kubectl etcdmember join --name node-4 --peer-urls https://10.0.0.14:2380 \
    --etcd-endpoints https://10.0.0.11:2379 --etcd-cacert ca.crt --etcd-cert client.crt --etcd-key client.key \
    --output /etc/etcd/join.env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return join.Run(cmd.Context(), opts, r.streams.Out, r.streams.ErrOut)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Name, "name", "", "etcd name of the new member, its --name (required).")
	f.StringSliceVar(&opts.PeerURLs, "peer-urls", nil, "Peer URL(s) of the new member, scheme://host:port, comma-separated (required).")
	bindEtcdFlags(f, &opts.Etcd, "Client URL(s) of the running cluster's members (required).")
	f.StringVar(&opts.Output, "output", "", "Write the settings to this file (mode 0600, replaced atomically) instead of stdout; its directory must exist.")
	f.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "How long the whole command, retries included, may take.")
	return cmd
}
