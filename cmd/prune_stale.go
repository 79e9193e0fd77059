package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/members"
	"github.com/etcdmember/kubectl-etcdmember/internal/printers"
)

type pruneOptions struct {
	etcd           etcd.Config
	dryRun         bool
	yes            bool
	unreachableFor time.Duration
	timeout        time.Duration
	listTimeout    time.Duration
}

func newPruneStaleCommand(r *root) *cobra.Command {
	o := pruneOptions{unreachableFor: members.DefaultUnreachableFor, timeout: 5 * time.Minute, listTimeout: 5 * time.Second}
	cmd := &cobra.Command{
		Use:   "prune-stale",
		Short: "Remove members etcd still lists but no node stands behind",
		Long: `prune-stale removes stale members: members etcd lists but no node stands behind, left over
after a node's IP or hostname changed or the node was rebuilt. A member is stale when

  - it is superseded: another healthy member has the same etcd name or the same peer host (the
    old member of a node that came back), or
  - nobody registered it: a discovered object (no agent registered it), or a learner that never
    started, or
  - the Node it is bound to (spec.nodeName, else the agent's status.nodeName) does not exist,
    unless it is the only voter,

and in every case it has been unhealthy for at least --unreachable-for. A registered member that
is merely down is not stale (it may be under maintenance): the plan shows it, and leaves it alone;
use leave for it. Healthy members are never touched. Bound Nodes are read by name (get on nodes);
when that is forbidden or fails, one warning on stderr says so and no member is stale for its Node.

It prints the plan (NAME, MEMBER ID, PEER URLS, WHY STALE, ACTION), asks for confirmation on a
terminal (--yes when stdin is not one), then asks each stale member to leave, one at a time,
through the controller (the quorum guard applies; a refusal stops the run with exit status 3),
waits until it left, and deletes the objects of discovered members it removed: no node will come
back under them. Objects of registered nodes stay as history. Discovered objects whose member is
already gone from etcd are deleted too.

With etcd access (--etcd-endpoints or ETCDCTL_*) the plan uses etcd's live member list and each
member's answer; without it, what the leading agent recorded in the objects.`,
		Example: `  kubectl etcdmember prune-stale --dry-run
  kubectl etcdmember prune-stale --unreachable-for 30m
  kubectl etcdmember prune-stale --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), r)
		},
	}
	f := cmd.Flags()
	bindEtcdFlags(f, &o.etcd, "Client URL(s) of etcd, for the live view.")
	f.BoolVar(&o.dryRun, "dry-run", false, "Print the plan and change nothing.")
	f.BoolVarP(&o.yes, "yes", "y", false, "Prune without asking; needed when stdin is not a terminal.")
	f.DurationVar(&o.unreachableFor, "unreachable-for", o.unreachableFor, "How long a superseded or unregistered member, or one whose bound Node is gone, must have been unhealthy to be pruned.")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "How long the leave of each member, the wait included, may take.")
	f.DurationVar(&o.listTimeout, "etcd-timeout", o.listTimeout, "Bound of the etcd query (and of the API list and of the bound Nodes' reads) that make the plan: a member that does not answer within it is unhealthy.")
	return cmd
}

func (o *pruneOptions) run(ctx context.Context, r *root) error {
	for name, d := range map[string]time.Duration{"--timeout": o.timeout, "--etcd-timeout": o.listTimeout, "--unreachable-for": o.unreachableFor} {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, not %s", name, d)
		}
	}
	if len(o.etcd.Endpoints) > 0 {
		if err := o.etcd.CheckTLSFiles(); err != nil {
			return err
		}
	}
	c, err := r.client()
	if err != nil {
		return err
	}
	list, err := members.List(ctx, c, o.listTimeout)
	if err != nil {
		return members.Explain(err, "list", "", "get, list, watch, patch and delete")
	}
	var live *members.Live
	if len(o.etcd.Endpoints) > 0 {
		// A plan made on a partial view could prune the wrong member: without etcd, stop.
		if live, err = members.QueryEtcd(ctx, o.etcd, o.listTimeout); err != nil {
			return fmt.Errorf("reading etcd's membership for the plan: %w", err)
		}
	}
	nodes := r.boundNodes(ctx, c, list.Items, o.listTimeout)
	plan := members.Plan(list.Items, live, nodes, time.Now(), o.unreachableFor)
	if len(plan) == 0 {
		r.say("No stale members.")
		return nil
	}
	if err := printers.PlanTable(plan).Write(r.streams.Out, false); err != nil {
		return err
	}
	act := 0
	for _, p := range plan {
		if p.Action != members.ActionNone {
			act++
		}
	}
	switch {
	case act == 0:
		r.say("Nothing to prune.")
		return nil
	case o.dryRun:
		r.say("dry run: nothing changed")
		return nil
	case !o.yes:
		if err := o.confirm(r, act); err != nil {
			return err
		}
	}
	done, err := members.Prune(ctx, c, r.streams.ErrOut, plan, o.timeout)
	for _, line := range done {
		if _, werr := fmt.Fprintln(r.streams.Out, line); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// confirm asks on the terminal; without one it refuses, since nobody could have read the plan.
func (o *pruneOptions) confirm(r *root, n int) error {
	in, ok := r.streams.In.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return errors.New("stdin is not a terminal, so nobody confirmed the plan: pass --yes to prune without asking")
	}
	_, _ = fmt.Fprintf(r.streams.ErrOut, "Prune %d member(s) as planned? [y/N]: ", n)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("aborted: nothing changed")
	}
	return nil
}
