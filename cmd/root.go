// Package cmd holds the cobra commands of kubectl-etcdmember, one file each.
package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/members"
	"github.com/etcdmember/kubectl-etcdmember/internal/version"
)

// root is what every command shares: the streams and kubectl's connection flags.
type root struct {
	streams genericiooptions.IOStreams
	config  *genericclioptions.ConfigFlags
}

// NewRootCommand returns `kubectl etcdmember` with its subcommands, writing to streams.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	r := &root{streams: streams, config: genericclioptions.NewConfigFlags(true)}
	// EtcdMember is cluster-scoped: a -n flag would only mislead.
	r.config.Namespace = nil
	cmd := &cobra.Command{
		Use:   "kubectl-etcdmember",
		Short: "Manage etcd cluster membership as Kubernetes resources",
		Long: `kubectl etcdmember shows and changes etcd membership through EtcdMember objects
(etcdmembers.etcdmember.io). Every etcd node runs the node agent, which registers its member; a
leader elected among the agents removes a member from etcd, safely and by its member ID, when its
object gets spec.leave: true.

Exit codes:
  0    done
  1    error: bad flags, unknown name, no permission, the CRD not installed, API or etcd
       failure
  3    the quorum guard refused the leave (it stays pending and completes by itself once the
       cluster is healthy enough; cancel it with "leave NAME --cancel")
  124  --timeout ran out while waiting`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl etcdmember"},
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetVersionTemplate("kubectl-etcdmember version {{.Version}}\n")
	r.config.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(
		newListCommand(r),
		newLeaveCommand(r),
		newPruneStaleCommand(r),
		newJoinCommand(r),
		newServeCommand(r),
		newVersionCommand(r),
	)
	return cmd
}

// say writes a progress or warning line to stderr: a broken stderr must not change what the
// command does or how it exits.
func (r *root) say(format string, args ...any) {
	_, _ = fmt.Fprintf(r.streams.ErrOut, format+"\n", args...)
}

// client connects to the API server the connection flags name, as kubectl would.
func (r *root) client() (client.WithWatch, error) {
	cfg, err := r.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return members.NewClient(cfg)
}

// boundNodes reads the Nodes the objects are bound to. Nodes that cannot be read, forbidden or
// failing, cost one warning and the Node checks, not the command: the objects are worth showing
// without them, and a plan that knows no Node only prunes less.
func (r *root) boundNodes(ctx context.Context, c client.Client, objects []v1alpha1.EtcdMember, timeout time.Duration) members.Nodes {
	nodes, err := members.ReadNodes(ctx, c, objects, timeout)
	if err != nil {
		r.say("warning: cannot read Nodes (%v): not checking whether bound Nodes exist", err)
	}
	return nodes
}
