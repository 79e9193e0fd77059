package cmd

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
)

func newServeCommand(r *root) *cobra.Command {
	opts := agent.DefaultOptions()
	zapOpts := zap.Options{}
	var metricsSecure bool
	cmd := &cobra.Command{
		Use:    "serve",
		Hidden: true,
		Short:  "Run the node agent: register this node's etcd member and take part in running the membership reconciler",
		Long: `serve runs the node agent, on every etcd node (a static pod, DaemonSet or systemd unit; not on
an operator's laptop). It reaches the API server through kubectl's connection flags (--kubeconfig,
or the in-cluster service account). It learns which member is local from the local etcd
endpoint, keeps that member's EtcdMember object up to date, and campaigns for the leader Lease; the
leader removes members whose object has spec.leave: true, one at a time, never its own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := zap.New(zap.UseFlagOptions(&zapOpts))
			ctrl.SetLogger(logger)
			ctx := ctrl.LoggerInto(cmd.Context(), logger)
			opts.RESTConfig = agentRESTConfig(r.config, cmd.Flags())
			opts.APICertificate = agentCertificate(r.config)
			if cmd.Flags().Changed("metrics-secure") {
				opts.MetricsSecure = &metricsSecure
			}
			return agent.Run(ctx, opts)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&opts.EtcdEndpoints, "etcd-endpoints", nil, "Client URL(s) of the local etcd member (required).")
	f.StringVar(&opts.EtcdCACert, "etcd-cacert", "", "CA bundle to verify etcd's serving certificates.")
	f.StringVar(&opts.EtcdCert, "etcd-cert", "", "Client certificate for etcd.")
	f.StringVar(&opts.EtcdKey, "etcd-key", "", "Client key for etcd.")
	f.StringVar(&opts.Name, "name", "", "Object name of the local member (default: the local member's etcd name).")
	f.BoolVar(&opts.LeaderElect, "leader-elect", opts.LeaderElect, "Elect one agent to run the membership reconciler. Without it this agent always leads, and can never remove its own member.")
	f.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", opts.LeaderElectionNamespace, "Namespace of the leader election Lease.")
	f.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", opts.LeaseDuration, "How long a leader's Lease holds without renewal; bounds failover time.")
	f.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", opts.RenewDeadline, "How long the leader keeps trying to renew before giving up leadership.")
	f.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", opts.RetryPeriod, "How often candidates try to acquire, and the leader to renew, the Lease.")
	f.StringVar(&opts.EventsNamespace, "events-namespace", opts.EventsNamespace, "Namespace the agent writes its Events to.")
	f.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", opts.MetricsBindAddress, `Address of the Prometheus metrics endpoint; "0" turns it off.`)
	f.BoolVar(&metricsSecure, "metrics-secure", false, "Serve the metrics over HTTPS, every scrape authenticated (TokenReview) and authorized (get on the non-resource URL /metrics) by the API server. Default: on for any address but loopback, where it can also be forced on; plain HTTP is refused off loopback.")
	f.StringVar(&opts.MetricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the HTTPS metrics endpoint, re-read when they change. Empty: a self-signed certificate made at start.")
	f.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", opts.HealthProbeBindAddress, `Address of /healthz and /readyz; "0" turns them off.`)
	f.DurationVar(&opts.EtcdWaitTimeout, "etcd-wait-timeout", opts.EtcdWaitTimeout, "How long to wait at start for the local etcd to answer before exiting with an error.")
	f.DurationVar(&opts.SyncInterval, "sync-interval", opts.SyncInterval, "How often the agent re-reads its local member and refreshes its object (writes only on change).")
	f.DurationVar(&opts.MembershipPollInterval, "membership-poll-interval", opts.MembershipPollInterval, "How often the leader reads etcd's member list to notice changes made outside etcdmember.")
	f.DurationVar(&opts.ProbeInterval, "probe-interval", opts.ProbeInterval, "How often the leader probes every member's health (status.health and the Healthy condition).")
	f.DurationVar(&opts.ProbeTimeout, "probe-timeout", opts.ProbeTimeout, "Timeout of one health probe of a member, periodic or right before a removal.")
	f.DurationVar(&opts.HealthRefresh, "health-refresh-interval", opts.HealthRefresh, "How stale status.health's raft index, DB size and last probe time may get while nothing else about a member changes; bounds the API writes of a quiet cluster.")
	f.DurationVar(&opts.LearnerStallTimeout, "learner-stall-timeout", opts.LearnerStallTimeout, "How long a learner may stay one (not started, or not caught up) before the leader removes it so the next join can proceed.")
	f.DurationVar(&opts.RemoveUnreachableAfter, "remove-unreachable-after", 0, "Ask a voter to leave once it has been unreachable this long and etcd's leader has received nothing from it for 2s either (etcd_network_peer_received_bytes_total); the quorum guard still applies. 0 (default): never.")
	f.IntVar(&opts.MinVoters, "min-voters", opts.MinVoters, "--remove-unreachable-after never asks a member to leave when fewer voters than this would remain.")
	f.DurationVar(&opts.RecheckInterval, "recheck-interval", opts.RecheckInterval, "How often a leave refused by the quorum guard is checked again.")
	f.DurationVar(&opts.HandOverRetry, "hand-over-retry", opts.HandOverRetry, "Cap of the back-off (3s, 6s, 12s, ...) with which a leader whose own member must leave retries handing leadership over while no other agent takes it; also how long etcd leadership stays with a leaving etcd leader whose removal was refused once leadership had moved away from it.")
	f.StringSliceVar(&opts.AdvertisePeerURLs, "advertise-peer-urls", nil, "Peer URLs of the local member, comma-separated as for etcd. The agent checks that its etcd answers on each, then publishes them in status.advertisedPeerURLs, and the leader updates etcd's record. Empty: never.")
	f.StringVar(&opts.OnRemovedExec, "on-removed-exec", "", "Shell command (/bin/sh -c) run once after this node's member was removed on request, and only once another etcd member confirms that it is gone, with ETCDMEMBER_NAME and ETCDMEMBER_MEMBER_ID set. Empty: none.")
	f.DurationVar(&opts.OnRemovedTimeout, "on-removed-timeout", opts.OnRemovedTimeout, "How long the --on-removed-exec command may run before it is killed.")
	f.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "Kubernetes Node this agent runs on, published in status.nodeName (default: the NODE_NAME environment variable). Empty: the member is bound to no Node.")
	f.BoolVar(&opts.LeaveOnNodeDelete, "leave-on-node-delete", false, "Ask a member to leave when its bound Node is deleted, whoever deletes it (an operator, Terraform, Cluster API, a cloud node lifecycle controller), holding the Node with the etcdmember.io/etcd-member finalizer until the member has left, for --node-delete-hold at most. The member does not come back with the Node (a running kubelet registers it again only once restarted): the node must re-join. Refused where k3s/RKE2 or k0s already manage etcd membership.")
	f.DurationVar(&opts.NodeDeleteHold, "node-delete-hold", opts.NodeDeleteHold, "Under --leave-on-node-delete, how long a deleted Node is held for its member's leave; after it the Node goes and the leave stays pending until the quorum guard allows it.")
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	f.AddGoFlagSet(goFlags)
	return cmd
}

// agentRESTConfig is where the agent finds the API server, in controller-runtime's order: kubectl's
// connection flags when one is given or KUBECONFIG is set, else the pod's ServiceAccount when it
// runs in a pod, else kubectl's default loading rules. In a pod, $HOME/.kube/config is never read:
// the image's HOME is 65532's 0700 directory, which the DaemonSet's root without capabilities
// cannot enter, and client-go fails on an unreadable kubeconfig where it skips a missing one, so
// the agent crash-looped before it ever tried its in-cluster credentials.
func agentRESTConfig(config *genericclioptions.ConfigFlags, flags *pflag.FlagSet) func() (*rest.Config, error) {
	return func() (*rest.Config, error) {
		if connectionFlagsSet(flags) || os.Getenv("KUBECONFIG") != "" {
			return config.ToRESTConfig()
		}
		cfg, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return config.ToRESTConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("in-cluster credentials: %w", err)
		}
		return cfg, nil
	}
}

// agentCertificate reads the client certificate and key the agent's kubeconfig names, or its
// --client-certificate and --client-key, anew at each call: the agent presents what it returns at
// each new API connection, so that a renewed certificate needs no restart. Only a configuration
// with a client certificate uses it.
func agentCertificate(config *genericclioptions.ConfigFlags) func() ([]byte, []byte, error) {
	return func() ([]byte, []byte, error) {
		if file := ptr.Deref(config.CertFile, ""); file != "" {
			return keyPair(nil, file, nil, ptr.Deref(config.KeyFile, ""))
		}
		// A fresh read of the files: the loader's own client configuration is read once.
		raw, err := config.ToRawKubeConfigLoader().ConfigAccess().GetStartingConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("reading the kubeconfig: %w", err)
		}
		user := ptr.Deref(config.AuthInfoName, "")
		if user == "" {
			name := cmp.Or(ptr.Deref(config.Context, ""), raw.CurrentContext)
			kubeContext, ok := raw.Contexts[name]
			if !ok {
				return nil, nil, fmt.Errorf("the kubeconfig has no context %q", name)
			}
			user = kubeContext.AuthInfo
		}
		auth, ok := raw.AuthInfos[user]
		if !ok {
			return nil, nil, fmt.Errorf("the kubeconfig has no user %q", user)
		}
		return keyPair(auth.ClientCertificateData, auth.ClientCertificate, auth.ClientKeyData, auth.ClientKey)
	}
}

// keyPair reads the certificate and the key, each from its data or else its file, as client-go
// takes them.
func keyPair(certData []byte, certFile string, keyData []byte, keyFile string) ([]byte, []byte, error) {
	certPEM, err := dataOrFile(certData, certFile)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := dataOrFile(keyData, keyFile)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

func dataOrFile(data []byte, file string) ([]byte, error) {
	if len(data) > 0 {
		return data, nil
	}
	return os.ReadFile(file)
}

// connectionFlagsSet tells whether any of kubectl's connection flags was given on the command line.
func connectionFlagsSet(flags *pflag.FlagSet) bool {
	names := pflag.NewFlagSet("connection", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).AddFlags(names)
	set := false
	names.VisitAll(func(f *pflag.Flag) {
		if given := flags.Lookup(f.Name); given != nil && given.Changed {
			set = true
		}
	})
	return set
}
