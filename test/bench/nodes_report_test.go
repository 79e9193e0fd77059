//go:build bench

package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// nodeCommandGoal bounds kubectl delete node against kubectl etcdmember leave of the same kind of
// member, at p50 and at p99; nodeGoneGoal bounds a Node's deletion to its member's absence, at p99.
const (
	nodeCommandGoal = 1.5
	nodeGoneGoal    = time.Second
)

// nodeWhose are the two kinds of member, in the order reported.
var nodeWhose = []bool{false, true}

func whoseName(leaderNode bool) string {
	if leaderNode {
		return "the leading agent's node"
	}
	return "another node"
}

// nodeSamples returns the samples of one case.
func (r *results) nodeSamples(c nodeCase) []nodeSample {
	var out []nodeSample
	for _, s := range r.nodeDelete {
		if s.nodeCase == c {
			out = append(out, s)
		}
	}
	return out
}

// spans is the time from the instant start to the instant end (nodeSample.instant) of every
// sample, in ms.
func spans(samples []nodeSample, start, end string) []float64 {
	out := make([]float64, len(samples))
	for i, s := range samples {
		out[i] = millis(s.instant(end).Sub(s.instant(start)))
	}
	return out
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *report) nodeRows() []row {
	if len(r.nodeDelete) == 0 {
		return nil
	}
	var rows []row
	for _, leaderNode := range nodeWhose {
		del, leave := r.nodeSamples(nodeCase{true, leaderNode}), r.nodeSamples(nodeCase{false, leaderNode})
		prefix := "Nodes, tests' timings, " + whoseName(leaderNode) + ": "
		d, l := summarize(spans(del, "started", "exited")), summarize(spans(leave, "started", "exited"))
		p50, p99 := d.p50/l.p50, d.p99/l.p99
		fromDelete := summarize(spans(del, "request", "gone"))
		fromRecorded := summarize(spans(del, "deletionTimestamp", "gone"))
		rows = append(rows,
			distRow(prefix+"kubectl delete node, process start → exit (ms)", d),
			distRow(prefix+"kubectl etcdmember leave, process start → exit (ms)", l),
			row{what: prefix + "kubectl delete node ÷ kubectl etcdmember leave (p50, p99)", n: none, min: none, p50: num(p50) + "×", p90: none, p99: num(p99) + "×", max: none}.
				withGoal(fmt.Sprintf("p50 and p99 ≤ %s×", num(nodeCommandGoal)), p50 <= nodeCommandGoal && p99 <= nodeCommandGoal, fmt.Sprintf("p50 %s×, p99 %s×", num(p50), num(p99))),
			distRow(prefix+"the Node's DELETE received by the apiserver (audit log, µs) → gone from etcd's member list (ms)", fromDelete).
				withGoal(fmt.Sprintf("p99 ≤ %d ms", nodeGoneGoal.Milliseconds()), fromDelete.p99 <= float64(nodeGoneGoal.Milliseconds()), "p99 "+num(fromDelete.p99)+" ms"),
			distRow(prefix+"the Node's deletionTimestamp as recorded (whole seconds, see Details) → gone from etcd's member list (ms)", fromRecorded),
		)
	}
	return append(rows, r.manyNodesRows()...)
}

func (r *report) manyNodesRows() []row {
	c := r.manyNodes
	if c == nil {
		return nil
	}
	const prefix = "Many Nodes, production defaults, --leave-on-node-delete, 3 members bound: "
	extra := fmt.Sprintf("%d other Nodes", c.with.extraNodes)
	var rows []row
	for _, part := range []struct {
		what string
		get  func(manyNodesRun) agentWindow
	}{
		{"the leading agent over a steady minute", func(m manyNodesRun) agentWindow { return m.steady }},
		{"the next leader over the minute from the leader's SIGKILL (its term's start and sweep inside)", func(m manyNodesRun) agentWindow { return m.failover }},
	} {
		without, with := part.get(c.without), part.get(c.with)
		rssGrowth := mib(with.rss - without.rss)
		reqGrowth := 100 * (with.requestsPerMinute()/without.requestsPerMinute() - 1)
		rows = append(rows,
			valueRow(prefix+part.what+", no other Node: RSS at the end (MiB)", mib(without.rss)),
			valueRow(prefix+part.what+", "+extra+": RSS at the end (MiB)", mib(with.rss)).
				withGoal("≤ no other Node + 10 MB", with.rss-without.rss <= 10e6, fmt.Sprintf("%+.2f MiB", rssGrowth)),
			valueRow(prefix+part.what+", no other Node: its API requests per minute", without.requestsPerMinute()),
			valueRow(prefix+part.what+", "+extra+": its API requests per minute", with.requestsPerMinute()).
				withGoal("≤ no other Node + 10 %", reqGrowth <= 10, fmt.Sprintf("%+.1f %%", reqGrowth)),
		)
	}
	return append(rows,
		valueRow(prefix+"the term's sweep, no other Node: list pages of every Node (audit log)", float64(c.without.failover.sweepPages)),
		valueRow(prefix+"the term's sweep, "+extra+": list pages of every Node (audit log)", float64(c.with.failover.sweepPages)),
	)
}

// Which cases a step of nodeSteps applies to.
var (
	anyCase    = func(nodeCase) bool { return true }
	deleteCase = func(c nodeCase) bool { return c.deleteNode }
	leaveCase  = func(c nodeCase) bool { return !c.deleteNode }
	leaderCase = func(c nodeCase) bool { return c.leaderNode }
)

// nodeSteps are the breakdown of a removal, from the timed command's start to its exit, each
// between two of a sample's instants (nodeSample.instant).
var nodeSteps = []struct {
	what       string
	applies    func(nodeCase) bool
	start, end string
}{
	{"kubectl start → DELETE of the Node received", deleteCase, "started", "request"},
	{"DELETE received → answered (the deletionTimestamp is set in between)", deleteCase, "request", "requestDone"},
	{"DELETE received → the leader's spec.leave request received", deleteCase, "request", "asked"},
	{"plugin start → its spec.leave patch received", leaveCase, "started", "request"},
	{"spec.leave received → the leader logs handing over", leaderCase, "leaveAsked", "handOver"},
	{"handing over → the next agent logs that it leads", leaderCase, "handOver", "newLeader"},
	{"the next agent leads → its removing reconcile starts", leaderCase, "newLeader", "removeStart"},
	{"spec.leave received → the removing reconcile starts", anyCase, "leaveAsked", "removeStart"},
	{"removing reconcile starts → the leader logs the member removed", anyCase, "removeStart", "removed"},
	{"the leader logs the member removed → gone from the polled member list (< 0: the poll saw it first)", anyCase, "removed", "gone"},
	{"gone → the leader's finalizer removal received", deleteCase, "gone", "released"},
	{"finalizer removal received → kubectl exits", deleteCase, "released", "exited"},
	{"gone → the plugin exits (Joined=False written and seen)", leaveCase, "gone", "exited"},
}

// instant returns the sample's instant of that name. leaveAsked is the spec.leave write that
// started the removal as the apiserver received it: the leader's for a Node's deletion, else the
// plugin's.
func (s nodeSample) instant(name string) time.Time {
	switch name {
	case "started":
		return s.started
	case "exited":
		return s.exited
	case "gone":
		return s.gone
	case "request":
		return s.request
	case "requestDone":
		return s.requestDone
	case "deletionTimestamp":
		return s.deletionTimestamp
	case "asked":
		return s.asked
	case "released":
		return s.released
	case "handOver":
		return s.handOver
	case "newLeader":
		return s.newLeader
	case "removeStart":
		return s.removeStart
	case "removed":
		return s.removed
	case "leaveAsked":
		if s.deleteNode {
			return s.asked
		}
		return s.request
	}
	panic("no instant " + name)
}

func (r *report) writeNodes(b *strings.Builder) {
	if len(r.nodeDelete) > 0 {
		rounds := len(r.nodeSamples(nodeCase{true, false}))
		fmt.Fprintf(b, "### Deleting a Node\n\n%d rounds on one 3-member cluster (tests' timings, `--leave-on-node-delete`), each removing four members one\n", rounds)
		b.WriteString("after the other: another node's by `kubectl delete node` and by `kubectl etcdmember leave`, then the leading agent's\n")
		b.WriteString("own node's the same two ways (the pair's order swapped in every other round). Where the time went, in ms\n")
		b.WriteString("(p50 / p99 of each step; a step that does not apply is blank; from the audit log, the agents' logs and the\n")
		b.WriteString("bench's clocks, all on this machine's clock):\n\n")
		var cases []nodeCase
		header := "| step |"
		for _, leaderNode := range nodeWhose {
			for _, del := range []bool{true, false} {
				c := nodeCase{del, leaderNode}
				cases = append(cases, c)
				header += " " + c.String() + " |"
			}
		}
		b.WriteString(header + "\n|---|" + strings.Repeat("--:|", len(cases)) + "\n")
		for _, step := range nodeSteps {
			fmt.Fprintf(b, "| %s |", step.what)
			for _, c := range cases {
				if !step.applies(c) {
					b.WriteString(" |")
					continue
				}
				st := summarize(spans(r.nodeSamples(c), step.start, step.end))
				fmt.Fprintf(b, " %s / %s |", num(st.p50), num(st.p99))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		b.WriteString(nodeStepsText)
		for _, c := range cases {
			var parts []string
			for _, s := range r.nodeSamples(c) {
				p := num(millis(s.exited.Sub(s.started)))
				if c.deleteNode {
					p += fmt.Sprintf(" (DELETE → gone %s, recorded deletionTimestamp → gone %s)", num(millis(s.gone.Sub(s.request))), num(millis(s.gone.Sub(s.deletionTimestamp))))
				}
				parts = append(parts, p)
			}
			fmt.Fprintf(b, "%s, each run, process start → exit (ms): %s.\n\n", c, strings.Join(parts, ", "))
		}
	}
	r.writeManyNodes(b)
}

func (r *report) writeManyNodes(b *strings.Builder) {
	c := r.manyNodes
	if c == nil {
		return
	}
	fmt.Fprintf(b, "### Many Nodes\n\nTwo fresh 3-member test beds at the production defaults with `--leave-on-node-delete`, each member's\n")
	fmt.Fprintf(b, "agent bound to its Node: one with no other Node, one with %d other Nodes created before the agents started\n", c.with.extraNodes)
	fmt.Fprintf(b, "(%d at once, in %s; one Node's metadata as the agents' metadata client receives it: %d bytes).\n\n", createWorkers, c.with.created.Round(time.Second), c.with.metadataBytes)
	b.WriteString("| test bed | window | agent | RSS at the end (MiB) | peak RSS since start (MiB) | CPU s | API requests per minute by method | elected after (s) | agents' Node requests in the window (audit log) |\n")
	b.WriteString("|---|---|---|--:|--:|--:|---|--:|---|\n")
	for _, run := range []manyNodesRun{c.without, c.with} {
		bed := "no other Node"
		if run.extraNodes > 0 {
			bed = fmt.Sprintf("%d other Nodes", run.extraNodes)
		}
		for _, w := range []struct {
			name string
			w    agentWindow
		}{{"steady", run.steady}, {"failover", run.failover}} {
			var methods []string
			for _, k := range slices.Sorted(maps.Keys(w.w.requests)) {
				methods = append(methods, fmt.Sprintf("%s %s", k, num(w.w.requests[k])))
			}
			elected := none
			if w.w.elected > 0 {
				elected = num(w.w.elected.Seconds())
			}
			fmt.Fprintf(b, "| %s | %s, %s | %s | %s | %s | %s | %s | %s | lists of all %d, by name %d; watches by name %d, of all %d |\n",
				bed, w.name, w.w.window.Round(time.Millisecond), w.w.agent, num(mib(w.w.rss)), num(mib(w.w.hwm)), num(w.w.cpu.Seconds()),
				strings.Join(methods, ", "), elected, w.w.sweepPages, w.w.namedLists, w.w.namedWatches, w.w.allWatches)
		}
	}
	b.WriteString("\n")
}

// nodeStepsText says what the breakdown's steps are made of; it describes the agents' code as the
// logs and the audit log show it.
const nodeStepsText = `The leading agent's own member takes a hand-over besides: the leader asks for the leave and
steps down (the Lease is released), and the other agents, which watch the Lease,
campaign again at once: a new term each, whose manager starts and lists the EtcdMembers into its
cache (controller-runtime waits for that sync in steps polled every 100 ms) while it takes the Lease,
before its membership reconciler removes the member; for a Node's deletion, the new leader's node
controller then follows every bound Node, the watches started side by side, before it lets the
deleted one go. A Node's deletion also costs one watch delivery and the
leader's spec.leave write before the leave starts, and the finalizer's removal and kubectl's own
watch after the member is gone; the plugin's leave instead waits for ` + "`Joined=False`" + `. kubectl delete
starts one process where ` + "`kubectl etcdmember`" + ` starts two (kubectl, then the plugin).

`

// nodeMethodsText says how the Node figures are measured.
const nodeMethodsText = `- **Nodes** (` + "`TestBench/nodes/delete`" + `): a 3-member cluster, agents at the tests' timings with
  ` + "`--leave-on-node-delete --node-name=<member>`" + `, a Node registered through the API per member (the test
  bed runs no kubelet), the apiserver writing an audit log of every Node request and every EtcdMember
  write (Metadata level). Each cycle waits until the leader holds the target's Node with its
  finalizer and etcd will accept the removal, then runs ` + "`kubectl delete node <name> --timeout=1m`" + ` or
  ` + "`kubectl etcdmember leave <name> --timeout=1m`" + ` through the real ` + "`bin/kubectl`" + ` (as for the plugin rows:
  admin kubeconfig, discovery cache filled once beforehand) and times the process from its start to
  its exit; the member list is polled every 1 ms through a member that stays. "Another node" is a
  member that neither leads etcd nor runs the leading agent; "the leading agent's node" is the
  leading agent's own member, which it hands over to have removed (moved off etcd's leadership
  first, untimed, if it led etcd). The apiserver records a deletionTimestamp in whole seconds,
  truncated: counting from it adds the fraction of the second the DELETE fell in, 0 to 1 s, to
  every figure. The goal is therefore judged from the DELETE's arrival as the audit log stamps it
  (to the µs; the deletionTimestamp is set while that request is served, so this can only
  overstate the time from the true deletion instant, by the DELETE's own few ms), and the row from
  the recorded deletionTimestamp is shown beside it. Then the Node is registered again, the member
  re-joined (` + "`cluster.Rejoin`" + `), its agent seen taking it over, and its Node seen held again.
- **Many Nodes** (` + "`TestBench/nodes/many`" + `): two fresh 3-member test beds, the agents at the production defaults
  with ` + "`--leave-on-node-delete`" + ` and bound to their Nodes; in the second, the extra Nodes (labels, annotations,
  spec and status as a kubelet and a cloud provider set them) are created before the agents start.
  After the quiet section's warm-up, the leading agent is measured over one quiet window: its
  ` + "`/metrics`" + ` (` + "`rest_client_requests_total`" + `, by method) and ` + "`/proc`" + ` (VmRSS, VmHWM, CPU) before and after.
  Then every other agent is read, the leader is SIGKILLed, and the agent that leads at the end of a
  window of the same length from the kill is read again: the window holds its election, its term's
  start and the term's one paginated list of every Node (the sweep, 500 per page). The audit log
  counts the agents' Node requests in each window: lists without a field selector (sweep pages),
  lists and watches selecting one Node by name, and watches of every Node.
`
