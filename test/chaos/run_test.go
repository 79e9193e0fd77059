package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// fault is what the injector did to a member or an agent.
type fault int

const (
	up         fault = iota
	killed           // SIGKILL
	paused           // SIGSTOP
	restarting       // between SIGTERM and the start that follows
	joining          // a member being re-joined: added to etcd, not serving yet
	crashed          // an agent that exited by itself and has not been started again
	retired          // an agent stopped because its member was removed (whole-node mode)
)

var faultNames = map[fault]string{
	up: "up", killed: "killed", paused: "frozen", restarting: "restarting", joining: "re-joining", crashed: "crashed", retired: "retired",
}

// leaveRec is one leave request and what became of it.
type leaveRec struct {
	scenario int
	member   int
	name     string
	id       uint64
	idHex    string
	issued   time.Time
	// crash is the failpoint the agent carrying it out was armed with, if any.
	crash string

	cancelled bool
	rejoined  bool
	// uncertain: the patch's answer was lost, so the leave may not have been sent at all.
	uncertain bool
	// policy: the dead-member policy asked for it (--remove-unreachable-after), not the harness.
	policy bool
	// nodeUID is the Node the harness deleted to ask for it (deleteNode), if it did; nodeDeleted
	// is the deletionTimestamp the monitor saw on it, nodeGone when it first saw it gone.
	nodeUID               types.UID
	nodeDeleted, nodeGone time.Time
	// reasons are the Left conditions seen, as status/reason, consecutive repeats dropped.
	reasons   []string
	explained time.Time // when a Left condition was first seen
	removed   time.Time // when the monitor first saw the member gone from etcd
	outcome   string
}

func (l *leaveRec) String() string {
	by := ""
	switch {
	case l.policy:
		by = " asked by the dead-member policy"
	case l.nodeUID != "":
		by = fmt.Sprintf(" asked by deleting its Node (uid %s)", l.nodeUID)
	}
	return fmt.Sprintf("leave of %s (member %s, scenario %d)%s", l.name, l.idHex, l.scenario, by)
}

// violation is a broken invariant.
type violation struct {
	scenario int
	at       time.Duration // since the run started
	msg      string
}

// counts are what the summary reports.
type counts struct {
	scenarios, steps, skipped int
	// netScenarios counts the scenarios that put a network fault in place.
	netScenarios              int
	faults                    map[string]int
	leaves, cancels, refusals int
	// policyLeaves are the leaves the dead-member policy asked for; outages the outage steps.
	policyLeaves, outages int
	// nodeDeletions are the Nodes deleted (deleteNode); nodeReleases counts how each went, and
	// terminating how long each was Terminating.
	nodeDeletions         int
	nodeReleases          map[string]int
	terminating           []time.Duration
	handOvers, etcdErrors int
	removals, rejoins     int
	crashArmed, crashHit  map[string]int
	outcomes              map[string]int
	scenarioTime          []time.Duration
	explainTime           []time.Duration

	// The member faults that took a member down, by where they landed (run.landed): on the
	// leading agent's node (aimedLeadingNode of them aimed there), on each other node, or while
	// the Lease named no agent.
	onLeadingNode, aimedLeadingNode, noLeadingNode int
	onOtherNode                                    []int
	// healthJudged counts the times a member was down past its deadline on Healthy: the times
	// the health invariant had something to judge.
	healthJudged int
}

// run is one chaos run: the world, the injector's bookkeeping and what the monitors saw. mu
// guards everything the monitors read or write; the injector (the test goroutine) is the only
// writer of the fault state (member, agent and the lists of what is down), so it may read that
// without the lock. The monitor registers the policy's leaves (leaves, authorized, pending).
type run struct {
	t     *testing.T
	cfg   config
	w     *world
	n     int
	all   uint
	start time.Time

	mu         sync.Mutex
	scenario   int
	member     []fault
	memberDown []int // members taken down, in order
	agent      []fault
	agentDown  []int
	// withNode are the agents taken down together with their etcd member (whole-node mode):
	// they come back with it, not on their own.
	withNode uint
	armed    []string
	// pending are the members whose leave the controller may still carry out: set when the leave
	// is sent, cleared only once the baseline is restored or the member re-joined.
	pending uint
	leaves  []*leaveRec
	// authorized maps every member ID a leave asked to remove to that leave: the only removals
	// the monitor accepts.
	authorized map[uint64]*leaveRec
	// list is the latest member list the monitor read.
	list       memberSample
	violations []violation
	reported   map[string]bool
	// exitSeen is when a member process was first seen gone while etcd still listed it.
	exitSeen map[string]time.Time
	// upSince is when the injector last brought each member back (resumed, or started and
	// serving); zero: up since the run began. downSince is when it last took each down.
	upSince, downSince []time.Time
	// lateUp is when a member down long enough for the dead-member policy to ask for it last came
	// back: restore waits for a read of the objects that shows what the policy decided meanwhile.
	lateUp time.Time
	// healedAt is when restore last resumed the frozen members and healed the network (healAll;
	// a killed member keeps no request unread, so starting one later does not move it): a write
	// whose answer was lost is judged by what shows lostWriteLands after it.
	healedAt time.Time
	// former maps the member IDs of re-joined nodes to their node.
	former map[uint64]int
	// unexplained are removals no leave asked for yet, by member ID, with when the monitor saw
	// each: the policy's request may reach the monitor after the removal it led to.
	unexplained map[uint64]unexplained
	// objectsRead is when the latest read of the objects started: a request that read did not
	// show was made after it.
	objectsRead time.Time
	c           counts
	// netScenario: the current scenario put a network fault in place.
	netScenario bool

	// hold is the agents' --node-delete-hold, slack the Terminating invariant's (nodeTimings).
	hold, slack time.Duration
	// disruptedAt is when the injector last did something that may end or stall the leading
	// agent's term, or the monitor last saw such a state (nodeDisruptionLocked); disruption says
	// what. apiDown: kube-apiserver is being restarted; netInPlace: a network fault is in place.
	disruptedAt         time.Time
	disruption          string
	apiDown, netInPlace bool
	// termDisruptedAt and termDisruption are the same for the health invariant
	// (checkHealthLocked), except that an etcd member killed is none and a change of the Lease's
	// holder the monitor saw is one; holder is the agent the Lease last named, if holderSeen.
	// healthBound is that invariant's bound (healthTimings); healthJudged is, for each member,
	// the downSince of the latest time it was down past its deadline.
	termDisruptedAt time.Time
	termDisruption  string
	holder          int
	holderSeen      bool
	healthBound     time.Duration
	healthJudged    []time.Time

	// netFaults are the network faults in place; only the injector touches them.
	netFaults []netFault
}

// netFault is a network fault in place and how to lift it.
type netFault struct {
	what string
	heal []func()
}

func newRun(t *testing.T, cfg config, w *world) *run {
	n := len(w.members)
	r := &run{
		t: t, cfg: cfg, w: w, n: n, all: uint(1)<<n - 1, start: time.Now(),
		member: make([]fault, n), agent: make([]fault, n), armed: make([]string, n),
		authorized: map[uint64]*leaveRec{}, reported: map[string]bool{}, exitSeen: map[string]time.Time{},
		upSince: make([]time.Time, n), downSince: make([]time.Time, n), healthJudged: make([]time.Time, n), unexplained: map[uint64]unexplained{},
		former: map[uint64]int{},
	}
	r.c.faults, r.c.outcomes = map[string]int{}, map[string]int{}
	r.c.crashArmed, r.c.crashHit = map[string]int{}, map[string]int{}
	r.c.nodeReleases = map[string]int{}
	r.c.onOtherNode = make([]int, n)
	return r
}

func (r *run) since() time.Duration { return time.Since(r.start).Truncate(100 * time.Millisecond) }

func (r *run) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%8s  %s", r.since(), fmt.Sprintf(format, args...))
}

// violate records a broken invariant, once per key: a monitor sees the same state many times.
func (r *run) violate(key, format string, args ...any) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violateLocked(key, format, args...)
}

func (r *run) violateLocked(key, format string, args ...any) {
	r.t.Helper()
	key = fmt.Sprintf("%d/%s", r.scenario, key)
	if r.reported[key] {
		return
	}
	r.reported[key] = true
	v := violation{scenario: r.scenario, at: r.since(), msg: fmt.Sprintf(format, args...)}
	r.violations = append(r.violations, v)
	r.t.Errorf("VIOLATION in scenario %d at %s: %s", v.scenario, v.at, v.msg)
}

func (r *run) violated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.violations) > 0
}

// downBits are the members the injector has taken down or is re-joining.
func (r *run) downBits() uint {
	var d uint
	for i, f := range r.member {
		if f != up {
			d |= 1 << i
		}
	}
	return d
}

// voterBits are the members the latest member list names, and the one being re-joined. A stale
// list can only miss a member the harness has just re-joined, which runs: leaving it out never
// makes quorumHolds more lenient.
func (r *run) voterBits() uint {
	var v uint
	for i, m := range r.w.members {
		if r.member[i] == joining || r.list.has(m.ID()) {
			v |= 1 << i
		}
	}
	return v
}

func (r *run) setMember(i int, f fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch was := r.member[i]; {
	case f == up && was != up && was != joining:
		r.backLocked(i)
		if was == paused {
			// The apiserver's requests held by the frozen member go on now.
			r.disruptLocked("etcd " + nodeName(i) + " resumed")
		}
	case f != up && was == up:
		r.downSince[i] = time.Now()
	}
	switch what := "etcd " + nodeName(i) + " " + faultNames[f]; {
	case f == killed:
		// Not a disruption to the health invariant: the count of how long the member is down
		// starts here. A kill that does end the leading agent's term shows as a change of the
		// Lease's holder (noteHolderLocked).
		r.disruptedAt, r.disruption = time.Now(), what
	case f != up:
		r.disruptLocked(what)
	}
	r.member[i] = f
	if f == up || f == joining {
		r.memberDown = slices.DeleteFunc(r.memberDown, func(j int) bool { return j == i })
	} else if !slices.Contains(r.memberDown, i) {
		r.memberDown = append(r.memberDown, i)
	}
}

// backLocked records that member i is back from a fault now.
func (r *run) backLocked(i int) {
	now := time.Now()
	r.upSince[i] = now
	if !r.downSince[i].IsZero() && now.Sub(r.downSince[i]) >= policyAfter {
		r.lateUp = now
	}
}

func (r *run) setAgent(i int, f fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f != up {
		r.disruptLocked("agent " + nodeName(i) + " " + faultNames[f])
	}
	r.agent[i] = f
	if f == up {
		r.agentDown = slices.DeleteFunc(r.agentDown, func(j int) bool { return j == i })
	} else if !slices.Contains(r.agentDown, i) {
		r.agentDown = append(r.agentDown, i)
	}
}

// upOrder lists the members the injector has not taken down, starting at a different one each
// time so that reads spread over them.
func (r *run) upOrder() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var order []int
	off := int(time.Now().UnixNano() % int64(r.n))
	for k := range r.n {
		if i := (k + off) % r.n; r.member[i] == up {
			order = append(order, i)
		}
	}
	return order
}

func (r *run) leaveOf(i int) *leaveRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range slices.Backward(r.leaves) {
		if l.member == i {
			return l
		}
	}
	return nil
}

// summary renders the counts, one figure per line.
func (r *run) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.c
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary\n")
	fmt.Fprintf(&b, "  seed        %d\n", r.cfg.seed)
	fmt.Fprintf(&b, "  members     %d etcd members, one agent each\n", r.n)
	fmt.Fprintf(&b, "  scenarios   %d of %d (%d crash-point scenarios, %d with a network fault)\n", c.scenarios, r.cfg.total(), sum(c.crashArmed), c.netScenarios)
	fmt.Fprintf(&b, "  steps       %d run, %d skipped as no longer fitting\n", c.steps, c.skipped)
	fmt.Fprintf(&b, "  faults      %d: %s\n", sum(c.faults), render(c.faults))
	fmt.Fprintf(&b, "  leaves      %d sent by the harness and %d by deleting a Node (%d cancelled), %d asked by the dead-member policy (%d outage steps), outcomes: %s\n", c.leaves, c.nodeDeletions, c.cancels, c.policyLeaves, c.outages, render(c.outcomes))
	fmt.Fprintf(&b, "  nodes       %d deleted, let go when: %s; Terminating %s at the median, %s at most (hold %s, slack %s)\n",
		c.nodeDeletions, render(c.nodeReleases), median(c.terminating), maxOf(c.terminating), r.hold, r.slack)
	var others []string
	for i, k := range c.onOtherNode {
		if k > 0 {
			others = append(others, fmt.Sprintf("%s %d", nodeName(i), k))
		}
	}
	fmt.Fprintf(&b, "  own node    %d member faults landed on the leading agent's node (%d aimed there), %d on other nodes (%s), %d while the Lease named no agent\n",
		c.onLeadingNode, c.aimedLeadingNode, sumOf(c.onOtherNode), strings.Join(others, ", "), c.noLeadingNode)
	fmt.Fprintf(&b, "  health      %d members judged down past their deadline on Healthy (bound %s after the later of going down and the slack after a disruption)\n", c.healthJudged, r.healthBound)
	fmt.Fprintf(&b, "  refusals    %d leaves refused at least once (QuorumAtRisk or LastVoter); %d handed over; %d met an etcd error\n", c.refusals, c.handOvers, c.etcdErrors)
	fmt.Fprintf(&b, "  removals    %d seen in etcd's member list; %d re-joins\n", c.removals, c.rejoins)
	fmt.Fprintf(&b, "  crash points armed %s, hit %s\n", render(c.crashArmed), render(c.crashHit))
	fmt.Fprintf(&b, "  explained   a leave's first Left condition after %s at the median, %s at most\n", median(c.explainTime), maxOf(c.explainTime))
	fmt.Fprintf(&b, "  scenario    %s at the median, %s at most\n", median(c.scenarioTime), maxOf(c.scenarioTime))
	fmt.Fprintf(&b, "  wall time   %s\n", time.Since(r.start).Round(time.Second))
	fmt.Fprintf(&b, "  violations  %d\n", len(r.violations))
	for _, v := range r.violations {
		fmt.Fprintf(&b, "    scenario %d at %s: %s\n", v.scenario, v.at, v.msg)
	}
	return b.String()
}

func sum(m map[string]int) int {
	total := 0
	for _, v := range m {
		total += v
	}
	return total
}

func sumOf(counts []int) int {
	total := 0
	for _, v := range counts {
		total += v
	}
	return total
}

func render(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2].Round(100 * time.Millisecond)
}

func maxOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds).Round(100 * time.Millisecond)
}
