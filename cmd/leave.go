package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcdmember/kubectl-etcdmember/internal/members"
	"github.com/etcdmember/kubectl-etcdmember/internal/printers"
)

type leaveOptions struct {
	wait         bool
	cancel       bool
	dryRun       string
	output       string
	timeout      time.Duration
	refusalGrace time.Duration
}

func newLeaveCommand(r *root) *cobra.Command {
	o := leaveOptions{wait: true, dryRun: string(members.DryRunNone), timeout: 5 * time.Minute, refusalGrace: members.DefaultRefusalGrace}
	cmd := &cobra.Command{
		Use:   "leave NAME [NAME...]",
		Short: "Remove etcd members, safely, and wait until they are gone",
		Long: `leave sets spec.leave: true on each EtcdMember NAME; the leader among the node agents then
removes the member the object records (by member ID) from etcd, if the healthy voters left keep a
quorum. It waits until the object says Joined=False, printing each step on stderr. Several names
are handled one after the other, each waited for, stopping at the first failure.

When the quorum guard refuses (QuorumAtRisk), or no other agent can take the leave over
(NoOtherAgent), leave keeps waiting for --refusal-grace (default 10s: two of the leader's probe
rounds at the agents' default --probe-interval), since a member that has just restarted is healthy
again within that; a refusal that lasts longer ends the wait with exit status 3 and the guard's
numbers, and --refusal-grace 0 ends it at once. LastVoter, NoMemberID and MemberMismatch, which
no re-check lifts, end it at once. The request stays pending and completes by itself once the
cluster is healthy enough; cancel it with "leave NAME --cancel".

--dry-run=client prints the leader's pre-flight verdict (the Removable condition) and changes
nothing (exit status 3 when the guard would refuse); --dry-run=server sends the request with
dryRun=All, proving the caller's RBAC and admission, and changes nothing.

It needs get, list, patch and watch on ` + members.Resource + `.`,
		Example: `  kubectl etcdmember leave node-2
  kubectl etcdmember leave node-2 node-3 --timeout 10m
  kubectl etcdmember leave node-2 --dry-run=client
  kubectl etcdmember leave node-2 --cancel`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeNames(r),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, r, args)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.wait, "wait", o.wait, "Wait until each member left (Joined=False) or the leave was refused.")
	f.BoolVar(&o.cancel, "cancel", false, "Cancel a pending leave instead: set spec.leave back to false.")
	f.StringVar(&o.dryRun, "dry-run", o.dryRun, `"none", "client" (print the pre-flight verdict) or "server" (send with dryRun=All); nothing changes unless "none".`)
	f.Lookup("dry-run").NoOptDefVal = string(members.DryRunClient)
	f.StringVarP(&o.output, "output", "o", "", `"name" prints etcdmember.etcdmember.io/NAME for each member done.`)
	f.DurationVar(&o.timeout, "timeout", o.timeout, "How long the leave of each member, the wait included, may take.")
	f.DurationVar(&o.refusalGrace, "refusal-grace", o.refusalGrace, "How long a refusal that can pass by itself (QuorumAtRisk, NoOtherAgent) must last before the wait ends on it with exit status 3; 0 ends it at once.")
	return cmd
}

func (o *leaveOptions) run(cmd *cobra.Command, r *root, names []string) error {
	dryRun := members.DryRun(o.dryRun)
	switch dryRun {
	case members.DryRunNone, members.DryRunClient, members.DryRunServer:
	default:
		return fmt.Errorf(`--dry-run must be "none", "client" or "server", not %q`, o.dryRun)
	}
	if o.output != "" && o.output != "name" {
		return fmt.Errorf(`--output must be "name", not %q`, o.output)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %s", o.timeout)
	}
	if o.refusalGrace < 0 {
		return fmt.Errorf("--refusal-grace must not be negative, not %s", o.refusalGrace)
	}
	c, err := r.client()
	if err != nil {
		return err
	}
	for _, name := range names {
		var summary string
		if o.cancel {
			summary, err = members.CancelLeave(cmd.Context(), c, name, dryRun, o.timeout)
		} else {
			opts := members.LeaveOptions{Wait: o.wait, DryRun: dryRun, Timeout: o.timeout, RefusalGrace: o.refusalGrace}
			summary, err = members.Leave(cmd.Context(), c, r.streams.ErrOut, name, opts)
		}
		if err != nil {
			return err
		}
		if o.output == "name" {
			summary = printers.ObjectName(name)
		}
		if _, err := fmt.Fprintln(r.streams.Out, summary); err != nil {
			return err
		}
	}
	return nil
}
