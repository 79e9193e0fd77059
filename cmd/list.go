package cmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/members"
	"github.com/etcdmember/kubectl-etcdmember/internal/printers"
)

type listOptions struct {
	print          *genericclioptions.PrintFlags
	etcd           etcd.Config
	selector       string
	watch          bool
	noHeaders      bool
	timeout        time.Duration
	unreachableFor time.Duration
	// stream prints the tables of -w, so that every row lines up with the header above it.
	stream *printers.Stream
}

func newListCommand(r *root) *cobra.Command {
	o := listOptions{
		print:          genericclioptions.NewPrintFlags(""),
		timeout:        5 * time.Second,
		unreachableFor: members.DefaultUnreachableFor,
	}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List EtcdMember objects next to etcd's live membership",
		Long: `list prints every EtcdMember object. Without etcd access it shows what the leading node agent
recorded in the objects, which works from any machine with a kubeconfig. With etcd access
(--etcd-endpoints, or etcdctl's ETCDCTL_* environment) it asks etcd for its member list and every
member for its status, all at once and within one --timeout, shows the live view, and notes where
the objects and etcd disagree; members etcd lists without an object get a row of their own.

  ROLE     leader, voter or learner; "-" when the member is not in etcd
  JOINED   the Joined condition: True while etcd lists the member
  HEALTHY  live: the member answered; otherwise the leader's latest probe (Healthy condition)
  LEAVE    "-" when no leave was asked for, "Requested" until the controller answers, then the
           Left condition's reason (Removed, QuorumAtRisk, ...)
  NOTE     discovered (no agent registered it), node gone (the member's bound Node does not
           exist), stale (see prune-stale), or one-sided rows

-o wide adds client URLs, raft term and index, DB size, etcd version, the last probe's age and
NODE, the Node the member is bound to (spec.nodeName, else the agent's status.nodeName).
The tables read each bound Node by name (get on nodes); when that is forbidden or fails, one
warning on stderr says so and no row is noted node gone. -w checks the Nodes once, for the list
it starts with; the rows that follow show what the objects record.
-o json, yaml, name, jsonpath=..., go-template=... and custom-columns=... print the EtcdMember
list as kubectl get does.`,
		Example: `  kubectl etcdmember list
  kubectl etcdmember list -o wide --etcd-endpoints https://10.0.0.11:2379 --etcd-cacert ca.crt --etcd-cert client.crt --etcd-key client.key
  kubectl etcdmember list -o jsonpath='{.items[*].status.memberID}'
  kubectl etcdmember list -l etcdmember.io/discovered=true
  kubectl etcdmember list -w`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), r)
		},
	}
	f := cmd.Flags()
	o.print.AddFlags(cmd)
	f.Lookup("output").Usage = "Output format: " + strings.Join(printers.Formats(o.print), "|") + "."
	bindEtcdFlags(f, &o.etcd, "Client URL(s) of etcd, for the live view.")
	f.StringVarP(&o.selector, "selector", "l", "", "Label selector, e.g. etcdmember.io/discovered=true; etcd members without an object are then left out.")
	f.BoolVarP(&o.watch, "watch", "w", false, "After the list, print each change of an object as it happens (what the objects record), until interrupted.")
	f.BoolVar(&o.noHeaders, "no-headers", false, "Print tables without their header line.")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "Bound of the API list, of the bound Nodes' reads, and of the whole etcd query: a member that does not answer within it is unhealthy.")
	f.DurationVar(&o.unreachableFor, "unreachable-for", o.unreachableFor, "How long a superseded or discovered member, or one whose bound Node is gone, must have been unhealthy to be noted as stale.")
	return cmd
}

func (o *listOptions) run(ctx context.Context, r *root) error {
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %s", o.timeout)
	}
	format := o.format()
	var columns *printers.CustomColumns
	switch {
	case format == printers.FormatTable || format == printers.FormatWide:
	case printers.IsTable(format):
		cc, err := printers.ParseCustomColumns(format)
		if err != nil {
			return err
		}
		columns = cc
	default:
		// Fail on a bad -o before anything is contacted.
		if _, err := o.print.ToPrinter(); err != nil {
			return err
		}
	}
	selector, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("--selector: %w", err)
	}
	if len(o.etcd.Endpoints) > 0 {
		// Like a bad -o: a CA file without a certificate would cost a wait for the deadline.
		if err := o.etcd.CheckTLSFiles(); err != nil {
			return err
		}
	}
	if o.watch {
		o.stream = printers.NewStream(r.streams.Out, o.noHeaders)
	}
	c, err := r.client()
	if err != nil {
		return err
	}
	list, err := members.List(ctx, c, o.timeout, client.MatchingLabelsSelector{Selector: selector})
	if err != nil {
		return members.Explain(err, "list", "", "list (and watch, for -w)")
	}
	var live *members.Live
	var etcdErr error
	if len(o.etcd.Endpoints) > 0 {
		if live, etcdErr = members.QueryEtcd(ctx, o.etcd, o.timeout); etcdErr != nil {
			r.say("warning: no live view from etcd (%v); showing what the objects record", etcdErr)
		}
	}
	if !selector.Empty() && live != nil {
		// Members without an object carry no labels, so no selector matches them.
		live = selected(live, list.Items)
	}
	var nodes members.Nodes
	if columns == nil && printers.IsTable(format) {
		nodes = r.boundNodes(ctx, c, list.Items, o.timeout)
	}
	if err := o.printList(r, list, live, nodes, format, columns); err != nil {
		return err
	}
	if len(list.Items) == 0 && printers.IsTable(format) && (live == nil || len(live.Members) == 0) {
		r.say("No EtcdMember objects found.")
	}
	if o.watch {
		if err := o.follow(ctx, r, c, selector, list.ResourceVersion, columns); err != nil {
			return err
		}
	}
	if etcdErr != nil {
		return fmt.Errorf("live view unknown: %w", etcdErr)
	}
	return nil
}

// printList prints the objects (and etcd's live view and the bound Nodes, for our tables) in the
// -o format.
func (o *listOptions) printList(r *root, list *v1alpha1.EtcdMemberList, live *members.Live, nodes members.Nodes, format string, columns *printers.CustomColumns) error {
	switch {
	case columns != nil:
		t, err := columns.Table(list.Items)
		if err != nil {
			return err
		}
		return o.writeTable(r, t)
	case printers.IsTable(format):
		rows := members.BuildRows(list.Items, live, nodes, time.Now(), o.unreachableFor)
		if len(rows) == 0 {
			return nil
		}
		return o.writeTable(r, printers.MemberTable(rows, format == printers.FormatWide, time.Now()))
	}
	return printers.PrintObjects(o.print, list, r.streams.Out)
}

// format is the -o value; --template alone means go-template, as in kubectl.
func (o *listOptions) format() string {
	format := *o.print.OutputFormat
	if t := o.print.TemplatePrinterFlags.TemplateArgument; format == "" && t != nil && *t != "" {
		format = "go-template"
		*o.print.OutputFormat = format
	}
	return format
}

// selected keeps the live view of the members the selected objects record.
func selected(live *members.Live, objects []v1alpha1.EtcdMember) *members.Live {
	ids := map[string]bool{}
	for _, o := range objects {
		ids[o.Status.MemberID] = true
	}
	out := &members.Live{Status: live.Status}
	for _, m := range live.Members {
		if ids[etcd.IDString(m.ID)] {
			out.Members = append(out.Members, m)
		}
	}
	return out
}

// follow prints each change after the list, from its resource version, until ctx ends. A watch
// the server closes is opened again where it left off; a resource version too old to resume
// from ends the command, as kubectl get -w does.
func (o *listOptions) follow(ctx context.Context, r *root, c client.WithWatch, selector labels.Selector, rv string, columns *printers.CustomColumns) error {
	for {
		w, err := c.Watch(ctx, &v1alpha1.EtcdMemberList{}, &client.ListOptions{
			LabelSelector: selector,
			Raw:           &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return members.Explain(err, "watch", "", "list and watch")
		}
		rv, err = o.printEvents(ctx, r, w, rv, columns)
		w.Stop()
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

func (o *listOptions) printEvents(ctx context.Context, r *root, w watch.Interface, rv string, columns *printers.CustomColumns) (string, error) {
	format := o.format()
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, open := <-w.ResultChan():
			if !open {
				return rv, nil
			}
			if ev.Type == watch.Error {
				return rv, fmt.Errorf("watch: %w", apierrors.FromObject(ev.Object))
			}
			m, ok := ev.Object.(*v1alpha1.EtcdMember)
			if !ok {
				continue
			}
			rv = m.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			if err := o.printEvent(r, m, format, columns); err != nil {
				return rv, err
			}
		}
	}
}

func (o *listOptions) printEvent(r *root, m *v1alpha1.EtcdMember, format string, columns *printers.CustomColumns) error {
	switch {
	case columns != nil:
		t, err := columns.Table([]v1alpha1.EtcdMember{*m})
		if err != nil {
			return err
		}
		return o.writeTable(r, t)
	case printers.IsTable(format):
		row := members.ObjectRow(m)
		return o.writeTable(r, printers.MemberTable([]members.Row{row}, format == printers.FormatWide, time.Now()))
	}
	return printers.PrintObject(o.print, m, r.streams.Out)
}

// writeTable prints t, through the stream under -w.
func (o *listOptions) writeTable(r *root, t printers.Table) error {
	if o.stream != nil {
		return o.stream.Write(t)
	}
	return t.Write(r.streams.Out, o.noHeaders)
}
