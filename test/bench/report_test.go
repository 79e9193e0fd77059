//go:build bench

package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// results is every figure one run measured.
type results struct {
	leaveIntent, leaveGone []time.Duration
	leaveJoinedFalse       []time.Duration
	floorGone, floorRPC    []time.Duration
	// least holds the least-cost leaves, interleaved with the leaves and the floor.
	least []leastSample
	// leaveSteps holds, per leave, when each step of the leader's removing reconcile ended.
	leaveSteps []map[string]float64
	// delayedGone, delayedJoinedFalse and delayedFloor are leaves and raw MemberRemoves with
	// every raft link delayed (benchDelayed).
	delayedGone, delayedJoinedFalse, delayedFloor []time.Duration
	// leaveRemoveErrors counts failed MemberRemove calls of the agents during the leave cycles:
	// each costs a retry, so a figure above zero explains slow samples.
	leaveRemoveErrors float64
	failover          map[string][]failoverSample
	stall             []stallSample
	// ridesOut is the longest stall of every apiserver-to-etcd link the production defaults rode
	// out, and the first that ended the term (0: none up to a lease duration); ridesOutMeasured
	// says the part ran.
	ridesOut, ridesOutLost time.Duration
	ridesOutMeasured       bool
	// detection is from a member's SIGKILL to its Healthy=False seen by a watch.
	detection []time.Duration
	// outage is one member's node down for outageWindow.
	outage       *outageCost
	quiet        *quietCost
	scaleObjects int
	resync       []resyncSample
	// pluginList and kubectlGet are wall times of the two commands over the scale section's
	// objects, process start included; frozenList is `list` with etcd access while one of three
	// members is frozen, with --timeout frozenListTimeout.
	pluginList, kubectlGet []time.Duration
	frozenList             []time.Duration
	frozenListTimeout      time.Duration
	// nodeDelete holds the Node lifecycle's removals (benchNodeDelete), manyNodes the leading
	// agent's cost with and without thousands of Nodes (benchManyNodes).
	nodeDelete []nodeSample
	manyNodes  *manyNodesCost
	// ownNode holds the kills of etcd on the leading agent's node and on another node
	// (benchOwnNode), interleaved.
	ownNode []ownNodeSample
	// leaderLeave holds the removals of etcd's leader under a write load (benchLeaderLeave), the
	// modes interleaved.
	leaderLeave []leaderLeaveSample
}

// report is the results with what they were measured on.
type report struct {
	results
	started            time.Time
	elapsed            time.Duration
	loadStart, loadEnd string
	machine            string
	versions           [][2]string
}

func newReport(t *testing.T) *report {
	return &report{
		results: results{failover: map[string][]failoverSample{}},
		started: time.Now(),
		// Other tests may share the machine: the load before and after tells whether they did.
		loadStart: loadAverage(t),
	}
}

// finish records the end of the run and what it ran on.
func (r *report) finish(t *testing.T) {
	r.elapsed = time.Since(r.started).Round(time.Second)
	r.loadEnd = loadAverage(t)
	r.machine = machine(t)
	r.versions = versions(t)
}

func (r *report) complete() bool {
	return len(r.leaveGone) > 0 && len(r.delayedGone) > 0 && len(r.failover) == 2 && len(r.stall) > 0 && r.ridesOutMeasured && r.quiet != nil && len(r.resync) > 0 &&
		len(r.detection) > 0 && r.outage != nil && len(r.pluginList) > 0 && len(r.frozenList) > 0 &&
		len(r.nodeDelete) > 0 && r.manyNodes != nil && len(r.ownNode) > 0 && len(r.leaderLeave) > 0
}

// stats is a distribution by nearest rank.
type stats struct {
	n                       int
	min, p50, p90, p99, max float64
}

func summarize(values []float64) stats {
	s := slices.Sorted(slices.Values(values))
	if len(s) == 0 {
		return stats{}
	}
	rank := func(p float64) float64 { return s[int(math.Ceil(p*float64(len(s))))-1] }
	return stats{n: len(s), min: s[0], p50: rank(0.5), p90: rank(0.9), p99: rank(0.99), max: s[len(s)-1]}
}

func inUnit(ds []time.Duration, unit time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(unit)
	}
	return out
}

// num prints whole numbers as such, others to two decimals, or none from 100 on.
func num(v float64) string {
	if v == math.Trunc(v) || math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// row is one line of the results table.
type row struct {
	what                       string
	n, min, p50, p90, p99, max string
	goal, verdict              string
}

const none = "–"

// distRow shows a distribution; p90 and p99 of fewer than 10 samples would only repeat the max.
func distRow(what string, s stats) row {
	r := row{what: what, n: strconv.Itoa(s.n), min: num(s.min), p50: num(s.p50), p90: none, p99: none, max: num(s.max), goal: none, verdict: none}
	if s.n >= 10 {
		r.p90, r.p99 = num(s.p90), num(s.p99)
	}
	return r
}

// valueRow shows a single figure in the p50 column.
func valueRow(what string, v float64) row {
	return row{what: what, n: "1", min: none, p50: num(v), p90: none, p99: none, max: none, goal: none, verdict: none}
}

func (r row) withGoal(goal string, met bool, measured string) row {
	r.goal = goal
	if met {
		r.verdict = "met (" + measured + ")"
	} else {
		r.verdict = "**missed** (" + measured + ")"
	}
	return r
}

func (r *report) rows() []row {
	var rows []row
	rows = append(rows, r.leaveRows()...)
	rows = append(rows, r.delayedRows()...)
	for _, timings := range []string{testTimings, productionTimingsName} {
		if samples := r.failover[timings]; len(samples) > 0 {
			var gone []time.Duration
			for _, s := range samples {
				gone = append(gone, s.gone)
			}
			st := summarize(inUnit(gone, time.Second))
			// The production goal moved from 10 s to 20 s with the defaults that ride out a slow
			// control plane (issue #48); the tests' timings keep the old one.
			goal := 10.0
			if timings == productionTimingsName {
				goal = 20
			}
			rows = append(rows, distRow("Failover, "+timings+": leading agent SIGKILLed → pending leave done (s)", st).
				withGoal(fmt.Sprintf("max ≤ %s s", num(goal)), st.max <= goal, "max "+num(st.max)+" s"))
		}
	}
	if r.ridesOutMeasured {
		lost := "none up to a lease duration"
		if r.ridesOutLost > 0 {
			lost = num(r.ridesOutLost.Seconds()) + " s"
		}
		rows = append(rows, valueRow("Stall of every apiserver-to-etcd link ridden out by the "+productionTimingsName+
			", in steps of "+rideOutStep.String()+" from "+rideOutGoal.String()+": longest with the Lease kept (s); the next ended the term: "+lost,
			r.ridesOut.Seconds()).
			withGoal(fmt.Sprintf("≥ %s s", num(rideOutGoal.Seconds())), r.ridesOut >= rideOutGoal, num(r.ridesOut.Seconds())+" s"))
	}
	rows = append(rows, r.leaderLeaveRows()...)
	rows = append(rows, r.stallRows()...)
	if len(r.detection) > 0 {
		probe := agent.DefaultOptions().ProbeInterval
		st := summarize(inUnit(r.detection, time.Second))
		rows = append(rows, distRow(fmt.Sprintf("Detection, production defaults (--probe-interval %s): member SIGKILLed → Healthy=False seen by a watch (s)", probe), st).
			withGoal(fmt.Sprintf("max ≤ 2 probe intervals (%s)", 2*probe), st.max <= (2*probe).Seconds(), "max "+num(st.max)+" s"))
	}
	rows = append(rows, r.ownNodeRows()...)
	rows = append(rows, r.outageRows()...)
	rows = append(rows, r.quietRows()...)
	rows = append(rows, r.resyncRows()...)
	rows = append(rows, r.pluginRows()...)
	return append(rows, r.nodeRows()...)
}

func (r *report) pluginRows() []row {
	if len(r.pluginList) == 0 || len(r.frozenList) == 0 {
		return nil
	}
	list := summarize(inUnit(r.pluginList, time.Millisecond))
	get := summarize(inUnit(r.kubectlGet, time.Millisecond))
	ratio := list.p50 / get.p50
	frozen := summarize(inUnit(r.frozenList, time.Millisecond))
	limit := float64((r.frozenListTimeout + 500*time.Millisecond).Milliseconds())
	return []row{
		distRow(fmt.Sprintf("Plugin: kubectl etcdmember list, %d objects, process start included (ms)", r.scaleObjects), list),
		distRow(fmt.Sprintf("Plugin: kubectl get etcdmembers.etcdmember.io, the same %d objects (ms)", r.scaleObjects), get),
		row{what: "Plugin: list ÷ kubectl get (p50)", n: none, min: none, p50: num(ratio) + "×", p90: none, p99: none, max: none}.
			withGoal("p50 ≤ 1.5×", ratio <= 1.5, "p50 "+num(ratio)+"×"),
		distRow(fmt.Sprintf("Plugin: list with etcd access, 1 of 3 members SIGSTOPped, --timeout %s (ms)", r.frozenListTimeout), frozen).
			withGoal(fmt.Sprintf("max ≤ --timeout + 0.5 s (%s ms)", num(limit)), frozen.max <= limit, "max "+num(frozen.max)+" ms"),
	}
}

func (r *report) leaveRows() []row {
	if len(r.leaveGone) < 2 {
		return nil
	}
	// The first cycle runs right after the agents started; it is reported on its own, and the
	// distributions are of the warm cycles after it.
	warmGone, warmIntent, warmJoined := r.leaveGone[1:], r.leaveIntent[1:], r.leaveJoinedFalse[1:]
	gone := summarize(inUnit(warmGone, time.Millisecond))
	joinedFalse := summarize(inUnit(warmJoined, time.Millisecond))
	floor := summarize(inUnit(r.floorGone, time.Millisecond))
	p50, p99 := gone.p50/floor.p50, gone.p99/floor.p99
	removal := make([]time.Duration, len(warmGone))
	for i := range warmGone {
		removal[i] = warmGone[i] - warmIntent[i]
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return append([]row{
		valueRow("Leave, first after the agents started: patch accepted → removal intent seen (ms)", ms(r.leaveIntent[0])),
		valueRow("Leave, first after the agents started: patch accepted → gone from etcd's member list (ms)", ms(r.leaveGone[0])),
		valueRow("Leave, first after the agents started: patch accepted → Joined=False seen (ms)", ms(r.leaveJoinedFalse[0])),
		distRow("Leave, warm: patch accepted → the leader's removal intent seen by an etcd watch (ms)", summarize(inUnit(warmIntent, time.Millisecond))),
		distRow("Leave, warm: removal intent seen → gone from etcd's member list (ms)", summarize(inUnit(removal, time.Millisecond))),
		distRow("Leave, warm: patch accepted → gone from etcd's member list (ms)", gone).
			withGoal("p99 ≤ 100 ms", gone.p99 <= 100, "p99 "+num(gone.p99)+" ms"),
		distRow("Leave, warm: patch accepted → Joined=False seen by a watch (ms)", joinedFalse).
			withGoal("p99 ≤ 1000 ms", joinedFalse.p99 <= 1000, "p99 "+num(joinedFalse.p99)+" ms"),
		distRow("Floor: raw MemberRemove → gone from the member list (ms)", floor),
		distRow("Floor: the MemberRemove call alone (ms)", summarize(inUnit(r.floorRPC, time.Millisecond))),
		row{what: "Leave (warm) ÷ floor, gone from etcd (p50, p99)", n: none, min: none, p50: num(p50) + "×", p90: none, p99: num(p99) + "×", max: none}.
			withGoal("p50 ≤ 2×", p50 <= 2, "p50 "+num(p50)+"×"),
	}, append(r.leastRows(gone, floor), r.stepRows()...)...)
}

// leastRows report the least-cost leaves (leastSample) next to the leaves and the floor: what
// etcdmember's safety steps cost at best on this machine, apart from what its own code adds.
func (r *report) leastRows(leave, floor stats) []row {
	if len(r.least) == 0 {
		return nil
	}
	var seen, ready, rpc, gone []time.Duration
	for _, s := range r.least {
		seen, ready, rpc, gone = append(seen, s.seen), append(ready, s.ready), append(rpc, s.rpc), append(gone, s.gone)
	}
	least := summarize(inUnit(gone, time.Millisecond))
	ratio := func(what string, a, b stats) row {
		return row{what: what, n: none, min: none, p50: num(a.p50/b.p50) + "×", p90: none, p99: num(a.p99/b.p99) + "×", max: none}
	}
	const prefix = "Least-cost leave (the bench's own etcd calls, no agent; see Details): "
	return []row{
		distRow(prefix+"patch accepted → a watch sees it (ms)", summarize(inUnit(seen, time.Millisecond))),
		distRow(prefix+"seen → member list, other voters probed and intent stored, in parallel (ms)", summarize(inUnit(ready, time.Millisecond))),
		distRow(prefix+"the MemberRemove call (ms)", summarize(inUnit(rpc, time.Millisecond))),
		distRow(prefix+"patch accepted → gone from etcd's member list (ms)", least),
		ratio("Least-cost leave ÷ floor, gone from etcd (p50, p99)", least, floor),
		ratio("Leave (warm) ÷ least-cost leave, gone from etcd (p50, p99)", leave, least),
	}
}

// removalSteps are the steps of the leader's removing reconcile, in the order they are reported.
var removalSteps = []struct{ key, what string }{
	{"memberList", "fresh member list read"},
	{"probes", "every other voter probed"},
	{"intent", "removal intent stored"},
	{"fenceLease", "fence: leader Lease read past the cache"},
	{"fenceObject", "fence: object read past the cache"},
	{"removeSent", "MemberRemove sent"},
	{"removed", "MemberRemove answered"},
}

// stepRows say where the leader's time went in the warm leaves, from its own log of each removal.
func (r *report) stepRows() []row {
	if len(r.leaveSteps) < 2 {
		return nil
	}
	var rows []row
	for _, step := range removalSteps {
		var ms []float64
		for _, steps := range r.leaveSteps[1:] {
			if v, ok := steps[step.key]; ok {
				ms = append(ms, v)
			}
		}
		if len(ms) > 0 {
			rows = append(rows, distRow("Leave, warm, the leader's reconcile: from its start → "+step.what+" (ms)", summarize(ms)))
		}
	}
	return rows
}

// delayedRows report the leaves under peer delay next to the loopback figures.
func (r *report) delayedRows() []row {
	if len(r.delayedGone) == 0 {
		return nil
	}
	delay := fmt.Sprintf("%s ± %s on every raft link", peerDelay, peerJitter)
	return []row{
		distRow("Leave, "+delay+": patch accepted → gone from etcd's member list (ms)", summarize(inUnit(r.delayedGone, time.Millisecond))),
		distRow("Leave, "+delay+": patch accepted → Joined=False seen by a watch (ms)", summarize(inUnit(r.delayedJoinedFalse, time.Millisecond))),
		distRow("Floor, "+delay+": raw MemberRemove → gone from the member list (ms)", summarize(inUnit(r.delayedFloor, time.Millisecond))),
	}
}

func (r *report) stallRows() []row {
	if len(r.stall) == 0 {
		return nil
	}
	var refused, gone []time.Duration
	for _, s := range r.stall {
		refused, gone = append(refused, s.refused), append(gone, s.gone)
	}
	st := summarize(inUnit(gone, time.Second))
	return []row{
		distRow("Stall, production defaults: leader's own member leaves, other agents frozen: patch → Left=False/NoOtherAgent (s)", summarize(inUnit(refused, time.Second))),
		distRow("Stall: other agents continued → member gone from etcd (s)", st).
			withGoal("max ≤ 10 s", st.max <= stallGoal.Seconds(), "max "+num(st.max)+" s"),
	}
}

// outageRows shows the outage's counts against their goals; a count over its goal is shown as
// missed with the count, like every other figure.
func (r *report) outageRows() []row {
	o := r.outage
	if o == nil {
		return nil
	}
	what := "Outage, production defaults, one node (etcd and agent) down for " + o.window.String()
	writes, events, goal := float64(o.statusWrites), float64(len(o.events)), o.writeGoal()
	reasons := none
	if len(o.events) > 0 {
		var parts []string
		counts := o.eventReasons()
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
		}
		reasons = strings.Join(parts, ", ")
	}
	return []row{
		valueRow(what+": status writes to its EtcdMember", writes).
			withGoal(fmt.Sprintf("≤ %d (1 + one per %s health refresh)", goal, o.refresh), o.statusWrites <= goal, num(writes)),
		valueRow(what+": Events about it in kube-system ("+reasons+")", events).
			withGoal(fmt.Sprintf("≤ %d", outageEventGoal), len(o.events) <= outageEventGoal, num(events)),
		valueRow(fmt.Sprintf("Outage: probe rounds in the window (%s ÷ --probe-interval %s), for comparison", o.window, o.probe), float64(o.probeRounds())),
	}
}

func (r *report) quietRows() []row {
	q := r.quiet
	if q == nil {
		return nil
	}
	var rss, cpu []float64
	for _, u := range q.usage {
		rss = append(rss, float64(u.rss)/(1<<20))
		cpu = append(cpu, 100*float64(u.cpu)/float64(q.window))
	}
	perMember := q.agentWritesBesidesElection() / float64(q.members)
	rssStats := summarize(rss)
	return []row{
		valueRow("Quiet, production defaults: API writes per member per minute, besides leader election", perMember).
			withGoal("≤ 1", perMember <= 1, num(perMember)),
		valueRow("Quiet: leader-election renewals (Lease "+v1alpha1.LeaseName+" updates per minute)", q.leaseUpdates[v1alpha1.LeaseName]),
		valueRow("Quiet: API requests per minute by all agents together (client side)", total(q.agentRequests)),
		valueRow("Quiet: etcd gRPC requests per minute, all members (the apiserver's included)", total(q.etcd)),
		distRow("Quiet: agent RSS (MiB)", rssStats).withGoal("max ≤ 60 MB", rssStats.max*(1<<20) <= 60e6, "max "+num(rssStats.max)+" MiB"),
		distRow("Quiet: agent CPU (% of one core)", summarize(cpu)),
	}
}

func (r *report) resyncRows() []row {
	if len(r.resync) == 0 {
		return nil
	}
	var reconciled, gauge []time.Duration
	var writes []float64
	for _, s := range r.resync {
		reconciled, gauge, writes = append(reconciled, s.reconciled), append(gauge, s.gauge), append(writes, s.writes)
	}
	scale := fmt.Sprintf("%d voters + %d left", scaleVoters, r.scaleObjects-scaleVoters)
	st := summarize(inUnit(reconciled, time.Millisecond))
	return []row{
		distRow("Resync, "+scale+": new leader elected → every object reconciled, queue empty (ms)", st).
			withGoal("max ≤ 1000 ms", st.max <= 1000, "max "+num(st.max)+" ms"),
		distRow(fmt.Sprintf("Resync: new leader elected → its objects gauge counts all %d (ms)", r.scaleObjects), summarize(inUnit(gauge, time.Millisecond))),
		distRow("Resync: API writes to EtcdMembers from the kill to the end of the resync", summarize(writes)),
	}
}

// agentWritesBesidesElection counts writes to the only resources the agents write besides their
// Lease: EtcdMembers and Events. Nothing else writes them in a quiet minute.
func (q *quietCost) agentWritesBesidesElection() float64 {
	var n float64
	for key, v := range q.api {
		verb, resource, _ := strings.Cut(key, " ")
		resource, _, _ = strings.Cut(resource, "/")
		if writeVerbs[verb] && (resource == "etcdmembers" || resource == "events") {
			n += v
		}
	}
	return n
}

func total(m map[string]float64) float64 {
	var n float64
	for _, v := range m {
		n += v
	}
	return n
}

func (r *report) table() string {
	var b strings.Builder
	b.WriteString("| measurement | n | min | p50 | p90 | p99 | max | goal | verdict |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, x := range r.rows() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.what, x.n, x.min, x.p50, x.p90, x.p99, x.max, x.goal, x.verdict)
	}
	return b.String()
}

// sortedCounts renders a map as table rows, largest first.
func sortedCounts(b *strings.Builder, header string, m map[string]float64) {
	fmt.Fprintf(b, "| %s | per minute |\n|---|--:|\n", header)
	keys := slices.SortedFunc(maps.Keys(m), func(a, c string) int { return cmp.Or(cmp.Compare(m[c], m[a]), cmp.Compare(a, c)) })
	for _, k := range keys {
		fmt.Fprintf(b, "| %s | %s |\n", k, num(m[k]))
	}
	b.WriteString("\n")
}

func (r *report) write(t *testing.T) {
	t.Helper()
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	path := filepath.Join(root, "docs", "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(r.markdown()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `make bench` (package `test/bench`, build tag `bench`): every figure below comes from\n")
	b.WriteString("one run on the real test bed of `test/framework` (real etcd members, a real kube-apiserver,\n")
	b.WriteString("`bin/failpoints/kubectl-etcdmember serve` agents (failpoints compiled in, none armed) with the least-privilege credential of the e2e tests). Run it\n")
	b.WriteString("again to refresh this file; on a machine shared with other tests, re-run when the load below\n")
	b.WriteString("is high.\n\n")
	r.writeSetup(&b)
	b.WriteString("## Results\n\n")
	b.WriteString(r.table())
	b.WriteString("\n")
	r.writeDetails(&b)
	b.WriteString(methods())
	return b.String()
}

func (r *report) writeSetup(b *strings.Builder) {
	b.WriteString("| | |\n|---|---|\n")
	fmt.Fprintf(b, "| command | `make bench` = `go test -tags bench -count=1 -timeout 80m -v -run '^TestBench$' ./test/bench/` |\n")
	fmt.Fprintf(b, "| date | %s (took %s) |\n", r.started.UTC().Format("2006-01-02 15:04 UTC"), r.elapsed)
	fmt.Fprintf(b, "| machine | %s |\n", r.machine)
	fmt.Fprintf(b, "| load average (1, 5, 15 min) | %s at the start, %s at the end |\n", r.loadStart, r.loadEnd)
	for _, v := range r.versions {
		fmt.Fprintf(b, "| %s | %s |\n", v[0], v[1])
	}
	b.WriteString("\n")
}

func (r *report) writeDetails(b *strings.Builder) {
	b.WriteString("## Details\n\n")
	if len(r.leaveGone) > 0 {
		fmt.Fprintf(b, "Leave, floor and least-cost leave: %d cycles of each on one 3-member cluster, interleaved; the first leave is\n", len(r.leaveGone))
		b.WriteString("reported on its own, the warm rows are the other cycles. MemberRemove calls that\n")
		fmt.Fprintf(b, "the agents counted as failed during the leave cycles (each costs a retry): %.0f.\n\n", r.leaveRemoveErrors)
	}
	if len(r.least) > 0 {
		b.WriteString("Least-cost leave: in each cycle, after the leave and the floor, the bench itself does what a\n")
		b.WriteString("leave must do at the least while it keeps etcdmember's safety steps, with nothing between the\n")
		b.WriteString("calls: it patches a ConfigMap no agent watches, and once its own watch delivers the change it\n")
		b.WriteString("reads a fresh member list, probes every other voter as the guard does (a Status and a\n")
		b.WriteString("linearizable read each) and Puts an intent, all in parallel, then calls MemberRemove. No\n")
		b.WriteString("decision, fence, status write or controller machinery is in it, so a leave that keeps these\n")
		b.WriteString("steps cannot be faster than it on this machine. The watch event can arrive before the patch's\n")
		b.WriteString("response, hence the negative \"sees it\" figures (the leaves' \"intent seen\" rows likewise).\n\n")
	}
	for _, timings := range []string{testTimings, productionTimingsName} {
		if samples := r.failover[timings]; len(samples) > 0 {
			var parts []string
			for _, s := range samples {
				p := num(s.gone.Seconds()) + " s"
				if s.handedOver {
					p += " (leaving member's own agent won first and handed over)"
				}
				parts = append(parts, p)
			}
			fmt.Fprintf(b, "Failover with the %s, each run: %s.\n\n", timings, strings.Join(parts, ", "))
		}
	}
	if len(r.stall) > 0 {
		var parts []string
		for _, s := range r.stall {
			parts = append(parts, fmt.Sprintf("NoOtherAgent after %s s, gone %s s after the others continued", num(s.refused.Seconds()), num(s.gone.Seconds())))
		}
		fmt.Fprintf(b, "Stall with the %s, each run: %s.\n\n", productionTimingsName, strings.Join(parts, "; "))
	}
	if len(r.resync) > 0 {
		var parts []string
		for _, s := range r.resync {
			parts = append(parts, fmt.Sprintf("%s ms (gauge %s ms, %.0f writes)", num(float64(s.reconciled.Microseconds())/1000), num(float64(s.gauge.Microseconds())/1000), s.writes))
		}
		fmt.Fprintf(b, "Resync of %d objects, each run: %s.\n\n", r.scaleObjects, strings.Join(parts, ", "))
	}
	if len(r.frozenList) > 0 {
		var parts []string
		for _, d := range r.frozenList {
			parts = append(parts, num(float64(d.Microseconds())/1000))
		}
		fmt.Fprintf(b, "List with one member frozen, --timeout %s, each run (ms): %s.\n\n", r.frozenListTimeout, strings.Join(parts, ", "))
	}
	r.writeOwnNode(b)
	r.writeLeaderLeave(b)
	r.writeOutage(b)
	r.writeQuiet(b)
	r.writeNodes(b)
}

func (r *report) writeOutage(b *strings.Builder) {
	o := r.outage
	if o == nil {
		return
	}
	fmt.Fprintf(b, "Outage of %s for %s: %d status writes to its object, %d other writes to it, %d Events about it, %d probe rounds;\n",
		o.member, o.window, o.statusWrites, o.otherWrites, len(o.events), o.probeRounds())
	fmt.Fprintf(b, "back to Healthy=True/Serving %s after its etcd was started again.\n\n", num(o.back.Seconds())+" s")
	if len(o.changes) > 0 {
		b.WriteString("| what a status write during the outage changed | writes |\n|---|--:|\n")
		keys := slices.SortedFunc(maps.Keys(o.changes), func(a, c string) int { return cmp.Or(cmp.Compare(o.changes[c], o.changes[a]), cmp.Compare(a, c)) })
		for _, k := range keys {
			fmt.Fprintf(b, "| %s | %d |\n", k, o.changes[k])
		}
		b.WriteString("\n")
	}
	if len(o.events) > 0 {
		var parts []string
		for _, ev := range o.events {
			parts = append(parts, fmt.Sprintf("%s/%s at +%s s", ev.eventType, ev.reason, num(ev.after.Seconds())))
		}
		fmt.Fprintf(b, "Events about %s during the outage: %s.\n\n", o.member, strings.Join(parts, ", "))
	}
}

func (r *report) writeQuiet(b *strings.Builder) {
	q := r.quiet
	if q == nil {
		return
	}
	fmt.Fprintf(b, "### The quiet minute\n\nA steady 3-member cluster, agents at their production defaults, measured over %s\n", q.window.Round(time.Millisecond))
	fmt.Fprintf(b, "after %s of warm-up; the leading agent was %s. Rates are per minute.\n\n", quietWarmup, q.leader)
	b.WriteString("Every agent:\n\n| agent | role | RSS (MiB) | CPU seconds in the window | % of one core |\n|---|---|--:|--:|--:|\n")
	for _, name := range slices.Sorted(maps.Keys(q.usage)) {
		u, role := q.usage[name], "candidate"
		if name == q.leader {
			role = "leader"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", name, role, num(float64(u.rss)/(1<<20)), num(u.cpu.Seconds()), num(100*float64(u.cpu)/float64(q.window)))
	}
	b.WriteString("\n")
	sortedCounts(b, "apiserver requests by verb and resource (`apiserver_request_total`, every client, the apiserver's own included)", q.api)
	sortedCounts(b, "Lease updates, from a watch on kube-system (leader election vs the apiserver's identity Lease)", q.leaseUpdates)
	sortedCounts(b, "the agents' own API requests by method (`rest_client_requests_total`, all agents)", q.agentRequests)
	sortedCounts(b, "etcd gRPC requests by method (`grpc_server_handled_total`, all members; streams count when they end)", q.etcd)
}

// methods says how each figure is taken; it describes this package's code.
func methods() string {
	text := strings.Replace(methodsText, "\n## What bounds a leave", nodeMethodsText+ownNodeMethodsText+"\n## What bounds a leave", 1)
	return strings.NewReplacer("{production}", strings.Join(productionTimings, " "), "{outage}", outageWindow.String()).Replace(text)
}

// methodsText is methods with {production} for the production flags.
const methodsText = `## How each figure is measured

Percentiles are by nearest rank: of 30 samples, p90 is the 27th and p99 the largest. p90 and p99
are left out below 10 samples.

- **Leave**: a member that neither leads etcd nor runs the leading agent gets ` + "`spec.leave: true`" + ` by a
  merge patch (the admin client). The clock starts when the patch call returns. (a) A goroutine polls
  MemberList every 1 ms through a client on the leading agent's member (which stays) and stops at the
  first answer without the member; (b) a watch on the object, opened before the patch, stops at the
  first event with the old member ID and Joined=False; (c) an etcd watch on the member's removal
  intent key, opened before the patch, stops at its first write. The leader acts on the
  apiserver's watch event, which can arrive before the patch call's own answer does, so the
  intent can be seen a few ms "before" the patch. Then the member comes back with
  ` + "`cluster.Rejoin`" + ` (wipe, MemberAdd, start) and the cycle waits until its agent shows the new member ID
  with Joined=True, and until etcd's strict reconfiguration check (peers connected for 5 s) will
  accept the next removal, so that etcd refusals stay out of the figures.
- **Floor**: the same kind of member, removed by a raw clientv3 MemberRemove through the staying
  member, timed from the call to the first member list without it (the same 1 ms poll), and the
  call alone. Leave and floor cycles alternate on the same cluster.
- **Delayed** (issue #17): a fresh 3-member cluster with etcd's fault proxy on every directed raft
  link, each holding the bytes 200 ms ± 50 ms (drawn once per link; each chunk waits its delay
  before the next is read, so the links also carry less), agents with
  ` + "`--probe-interval=5s --probe-timeout=3s`" + ` (sized for two round trips), the apiserver on an etcd of its own; then
  leave and floor cycles as above, interleaved. Loopback figures are the rows above.
- **Failover**: the leading agent is SIGKILLed (it cannot release its Lease), another member's leave
  is patched right after, and the clock runs from the kill to the member's absence from the member
  list (1 ms poll). The killed agent is restarted and the member re-added between runs. Once with the
  tests' agent timings, once with the production defaults passed as flags.
- **Stall**: at the production defaults, every agent but the leading one is frozen with SIGSTOP
  and the leading agent's own member gets ` + "`spec.leave: true`" + `. The leader hands over (steps down),
  finds nobody taking the Lease, leads again and says ` + "`Left=False/NoOtherAgent`" + ` (the first figure,
  from the patch). Then the others are continued (SIGCONT) and the clock runs until the member is
  gone from the member list (1 ms poll): the leader's next hand-over, with back-off, and another
  agent's removal. The member is re-added between runs.
- **Stall ridden out**: on a test bed of its own (three members whose apiserver reaches etcd
  through fault proxies), at the production defaults, every apiserver-to-etcd link is stalled
  (bytes held, nothing lost; they flow once healed) for 7 s, then a second longer each time, up to
  a lease duration. After each stall and 5 s more, the leadership counts as kept when the Lease has
  the same holder and transition count and no agent logged the end of a term. The row is the
  longest stall kept; it names the first that was not.
- **Quiet**: agents at the production defaults (` + "`{production}`" + `). Counters are read before and after the window:
  the apiserver's ` + "`/metrics`" + `, every agent's ` + "`/metrics`" + `, every etcd member's ` + "`/metrics`" + ` on its
  client URL, and ` + "`/proc/<pid>/stat`" + ` (utime+stime) and ` + "`/proc/<pid>/status`" + ` (VmRSS, at the end) of each
  agent process, found by its command line. "API writes besides leader election" are the
  apiserver's POST/PUT/PATCH/DELETE on etcdmembers and events, which only the agents write.
- **Resync**: a 7-member cluster with an agent each (tests' timings) and 200 extra EtcdMember objects
  of members that left (fake member IDs, Joined=False/Removed, Left=True/Removed, created through the
  API). The leading agent is SIGKILLed; the clock starts when a watch on the Lease sees another
  holder. It stops when the new leader's ` + "`/metrics`" + `, read every 25 ms, show at least one finished
  leave reconcile per object since before the kill (` + "`controller_runtime_reconcile_total`" + `) with an
  empty queue and no reconcile running (` + "`workqueue_depth`, `controller_runtime_active_workers`" + `): an
  upper bound on "every object reconciled once", since objects enqueued twice count twice. The
  gauge figure is when ` + "`etcdmember_objects`" + ` first sums to every object.
- **Plugin**: on the resync section's cluster (207 objects), ` + "`kubectl etcdmember list`" + ` and ` + "`kubectl get\n  etcdmembers.etcdmember.io`" + ` run through the real ` + "`bin/kubectl`" + ` (the plugin found on PATH, admin
  kubeconfig in ` + "`KUBECONFIG`" + `), alternating, each timed from the start of kubectl to its exit:
  process start, discovery (kubectl get only) and the list call included. Then, on a fresh 3-member
  cluster whose apiserver stores on an etcd of its own, one member is frozen with SIGSTOP and
  ` + "`list --etcd-endpoints <all three> --timeout 2s`" + ` is timed the same way: the frozen member must cost
  one timeout, not one per call.
- **Detection**: on the quiet section's cluster (production probe settings), a member whose agent
  does not lead is SIGKILLed, and a watch on its object, opened before the kill, stops at the first
  event with ` + "`Healthy=False`" + `. The member is restarted and seen ` + "`Healthy=True/Serving`" + ` again before the
  next kill, so that each kill falls at a random point of the probe cycle.
- **Outage**: on the same cluster, after the detection runs, every object is seen
  ` + "`Healthy=True/Serving`" + ` and a member that neither leads etcd nor runs the leading agent (which keeps
  probing it) loses its node: its agent and then its etcd are SIGKILLed, as when a machine loses
  power, for {outage} (` + "`BENCH_OUTAGE_WINDOW`" + ` shortens it for trial runs). A watch on its
  EtcdMember, opened from the object's resourceVersion before the kill, counts every write to it
  in the window, and those that changed its status by what they changed; a watch on Events in
  kube-system, opened from a list's resourceVersion, collects those whose ` + "`regarding`" + ` is that
  object. Both watches resume from the last resourceVersion seen if the apiserver ends them. The
  goal for writes is one for going down plus one per ` + "`--health-refresh-interval`" + `; were every
  probe to write, the count would be near the probe rounds. On this test bed the killed member's
  address refuses connections at once, so every probe fails with the same error; a machine that
  loses power answers nothing, and its probes time out instead. Then etcd and the agent are
  started again and the part waits for ` + "`Healthy=True/Serving`" + `.

## What bounds a leave

A leave is, in series: the apiserver's watch event reaching the leader; then, side by side, the
fresh member list, the guard's probe of every other voter, the removal intent (a key in etcd
itself, ` + "`/etcdmember.io/removing/<member ID>`" + `, one raft round) and the fence's two reads past
every cache (the leader Lease and the object, through the apiserver); then the MemberRemove. The
intent must be stored before the removal: it is what lets a leader that stopped right after a
removal tell the next one "we removed it" (` + "`Removed`" + `, which runs the node's ` + "`--on-removed-exec`" + `)
from "it vanished" (` + "`NotFound`" + `). The fence's reads are what keeps a leader that was frozen between
its decision and the removal from acting on a term or a request that no longer holds (see
docs/safety.md). So a leave costs at least the floor plus a watch delivery and one raft write,
and in practice the floor plus a watch delivery and the longest of the side-by-side steps. The
rows "the leader's reconcile: from its start → …" show which one that is: each removal's log line
(` + "`Removed member from etcd`" + `, field ` + "`stepsMs`" + `) records when each step ended, in milliseconds
after the reconcile began, and the rows summarize those of the warm cycles. ` + "`Joined=False`" + ` then
takes one status write through the apiserver and another watch delivery.

## The first leave, and the slow outliers

Measured with temporary timing logs in the reconcile (rfc3339nano timestamps, not committed; two
runs of 3 and 6 cycles of ` + "`go test -tags bench -run TestBench/leave`" + `): the first leave after the agents
start is not slow in itself. Its reconcile took the ChangeLock 3.5 ms after the patch, had the
member list at 3.7 ms and the intent at 6.7 ms, of which 3.3 ms was the one-time lease grant for
the agent's intents; the member was gone 19 ms after the patch. What made first cycles, and some
later ones, slow was the status write *after* the removal: this test bed's apiserver balances its
etcd client over every member, including the one just removed, and the write sent to it failed
(` + "`Unavailable`" + `, or ` + "`raft: stopped`" + `). The reconcile then returned the error and the controller's
back-off (250 ms at first) held ` + "`Joined=False`" + ` back: 228, 280 and 293 ms in those runs, against
12-24 ms otherwise. The leader now retries such a write at once (up to 4 tries, 10 ms apart, only
for errors the apiserver reports on its own side; every write carries its resourceVersion, so a
write that did land is never applied twice). Where an apiserver talks only to its local member,
as on kubeadm control planes, only a removal of that member can hit this.
`

func loadAverage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

func machine(t *testing.T) string {
	t.Helper()
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	model := "unknown CPU"
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			model = strings.TrimSpace(value)
			break
		}
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var memKB float64
	for _, line := range strings.Split(string(meminfo), "\n") {
		if value, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			memKB, _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		}
	}
	return fmt.Sprintf("%d CPUs (nproc), %s, %.1f GiB RAM", runtime.NumCPU(), model, memKB/(1<<20))
}

// versions asks every binary of the test bed for its version.
func versions(t *testing.T) [][2]string {
	t.Helper()
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	commit := output(t, root, "git", "rev-parse", "--short", "HEAD")
	if output(t, root, "git", "status", "--porcelain", "--untracked-files=no") != "" {
		commit += " with uncommitted changes"
	}
	// The first line reads "etcd Version: 3.7.3".
	etcd, _, _ := strings.Cut(output(t, root, framework.Binary(t, "etcd"), "--version"), "\n")
	etcd = strings.TrimPrefix(etcd, "etcd Version: ")
	return [][2]string{
		{"go", runtime.Version()},
		{"etcd", etcd},
		{"kube-apiserver", output(t, root, framework.Binary(t, "kube-apiserver"), "--version")},
		{"kubectl-etcdmember", output(t, root, framework.Binary(t, "kubectl-etcdmember"), "--version") + " (git " + commit + ")"},
	}
}

func output(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
