//go:build bench

package bench

import (
	"fmt"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
)

// ownNodeRowKinds are the section's three rows, each from one instant of a sample to another.
var ownNodeRowKinds = []struct {
	name string
	// what says what the row measures, given where etcd was killed.
	what       func(whose string) string
	start, end string
}{
	{"Detection", func(whose string) string {
		return fmt.Sprintf("production defaults (--probe-interval %s): etcd SIGKILLed on %s → its Healthy=False seen by a watch", agent.DefaultOptions().ProbeInterval, whose)
	}, "killed", "down"},
	{"Refusal", func(whose string) string {
		return "production defaults: etcd SIGKILLed on " + whose + ", a leave leaving 1 healthy voter of 2 asked at once → Left=False/QuorumAtRisk seen"
	}, "killed", "refused"},
	{"Failover", func(whose string) string {
		how := "the leader removes it"
		if whose == whoseName(true) {
			how = "handed over, the next leader removes it"
		}
		return fmt.Sprintf("%s: etcd SIGKILLed on %s, then that member's own leave asked (%s) → gone from etcd's member list", productionTimingsName, whose, how)
	}, "request", "gone"},
}

// ownNodeFigure is one row kind's two distributions, in seconds, and its goals.
type ownNodeFigure struct {
	other, own stats
	ratio      float64
}

func (f ownNodeFigure) maxMet() bool   { return f.own.max <= ownNodeMaxGoal.Seconds() }
func (f ownNodeFigure) ratioMet() bool { return f.ratio <= ownNodeRatioGoal }

// ownNodeFigures summarizes the samples for each of ownNodeRowKinds, in order.
func ownNodeFigures(samples []ownNodeSample) []ownNodeFigure {
	var other, own []ownNodeSample
	for _, s := range samples {
		if s.leaderNode {
			own = append(own, s)
		} else {
			other = append(other, s)
		}
	}
	var out []ownNodeFigure
	for _, k := range ownNodeRowKinds {
		f := ownNodeFigure{
			other: summarize(ownNodeSpans(other, k.start, k.end, time.Second)),
			own:   summarize(ownNodeSpans(own, k.start, k.end, time.Second)),
		}
		f.ratio = f.own.p50 / f.other.p50
		out = append(out, f)
	}
	return out
}

// ownNodeSpans is the time from the instant start to the instant end of every sample that has
// both, in the unit given.
func ownNodeSpans(samples []ownNodeSample, start, end string, unit time.Duration) []float64 {
	var out []float64
	for _, s := range samples {
		if d, ok := s.span(start, end); ok {
			out = append(out, float64(d)/float64(unit))
		}
	}
	return out
}

func (r *report) ownNodeRows() []row {
	if len(r.ownNode) == 0 {
		return nil
	}
	var rows []row
	for i, f := range ownNodeFigures(r.ownNode) {
		k := ownNodeRowKinds[i]
		rows = append(rows,
			distRow(k.name+", "+k.what(whoseName(false))+" (s)", f.other),
			distRow(k.name+", "+k.what(whoseName(true))+" (s)", f.own).
				withGoal(fmt.Sprintf("max ≤ %s s", num(ownNodeMaxGoal.Seconds())), f.maxMet(), "max "+num(f.own.max)+" s"),
			row{what: k.name + ": etcd on the leading agent's node ÷ on another node (p50)", n: none, min: none, p50: num(f.ratio) + "×", p90: none, p99: none, max: none}.
				withGoal(fmt.Sprintf("p50 ≤ %s×", num(ownNodeRatioGoal)), f.ratioMet(), "p50 "+num(f.ratio)+"×"),
		)
	}
	return rows
}

// ownNodeSteps are the breakdown of a cycle, each between two of a sample's instants
// (ownNodeSample.instant); a step whose instants a sample lacks leaves it out.
var ownNodeSteps = []struct {
	what       string
	applies    func(leaderNode bool) bool
	start, end string
}{
	{"Detection: kill → the leader's first failed member-list read, where one failed", anyNode, "killed", "listFailed"},
	{"Detection: kill → the leader's first probe of the member that failed", anyNode, "killed", "failedProbe"},
	{"Detection: that probe → Healthy=False seen (status write, watch delivery)", anyNode, "failedProbe", "down"},
	{"Refusal: kill → the other member's leave patch accepted", anyNode, "killed", "asked"},
	{"Refusal: kill → the leader logs the refusal", anyNode, "killed", "refusing"},
	{"Refusal: the refusal logged → Left=False/QuorumAtRisk seen", anyNode, "refusing", "refused"},
	{"Failover: own leave's patch sent → the leader logs handing over", leaderNodeOnly, "request", "handOver"},
	{"Failover: handing over → the next agent logs that it leads", leaderNodeOnly, "handOver", "newLeader"},
	{"Failover: the next agent leads → its removing reconcile starts", leaderNodeOnly, "newLeader", "removeStart"},
	{"Failover: own leave's patch sent → the removing reconcile starts", anyNode, "request", "removeStart"},
	{"Failover: removing reconcile starts → the leader logs the member removed", anyNode, "removeStart", "removed"},
	{"Failover: the member removed logged → gone from the polled member list (< 0: the poll saw it first)", anyNode, "removed", "gone"},
}

func anyNode(bool) bool               { return true }
func leaderNodeOnly(leader bool) bool { return leader }

// instant returns the sample's instant of that name; the zero time when it has none.
func (s ownNodeSample) instant(name string) time.Time {
	switch name {
	case "killed":
		return s.killed
	case "asked":
		return s.asked
	case "down":
		return s.down
	case "refused":
		return s.refused
	case "request":
		return s.request
	case "gone":
		return s.gone
	case "failedProbe":
		return s.failedProbe
	case "listFailed":
		return s.listFailed
	case "refusing":
		return s.refusing
	case "handOver":
		return s.handOver
	case "newLeader":
		return s.newLeader
	case "removeStart":
		return s.removeStart
	case "removed":
		return s.removed
	}
	panic("no instant " + name)
}

// span is the time from the instant start to the instant end, and whether the sample has both.
func (s ownNodeSample) span(start, end string) (time.Duration, bool) {
	a, b := s.instant(start), s.instant(end)
	return b.Sub(a), !a.IsZero() && !b.IsZero()
}
