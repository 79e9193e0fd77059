package chaos

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
)

// kind is what a step does.
type kind int

const (
	killMember       kind = iota // SIGKILL an etcd member
	pauseMember                  // SIGSTOP an etcd member
	restartMember                // SIGTERM an etcd member and start it again
	healMember                   // start or resume the member that went down first
	killAgent                    // SIGKILL an agent
	pauseAgent                   // SIGSTOP an agent
	restartAgent                 // SIGTERM an agent and start it again
	healAgent                    // start or resume the agent that went down first
	restartAPIServer             // SIGTERM kube-apiserver and start it again
	leave                        // set spec.leave on a member's object
	cancelLeave                  // set spec.leave back to false
	rejoin                       // once the member is removed: wipe it and add it back (Cluster.Rejoin)
	wait                         // let the controller work
	cutLink                      // drop every raft message between two members, both ways
	cutOneWay                    // drop one member's raft messages to another, not the answers
	slowPeers                    // delay every raft message by peerDelay ± peerJitter
	cutAgentEtcd                 // drop everything between an agent and its own etcd member
	healNet                      // lift every network fault
	outage                       // SIGKILL an etcd member and keep it down past --remove-unreachable-after
	deleteNode                   // delete a member's Node: under --leave-on-node-delete, a leave request
)

var kindNames = map[kind]string{
	killMember: "kill etcd", pauseMember: "pause etcd", restartMember: "restart etcd", healMember: "heal etcd",
	killAgent: "kill agent", pauseAgent: "pause agent", restartAgent: "restart agent", healAgent: "heal agent",
	restartAPIServer: "restart apiserver", leave: "leave", cancelLeave: "cancel leave", rejoin: "rejoin", wait: "wait",
	cutLink: "cut link", cutOneWay: "cut one way", slowPeers: "delay peer links", cutAgentEtcd: "cut etcd link of agent",
	healNet: "heal network", outage: "outage of etcd", deleteNode: "delete the Node of",
}

// netKinds are the network faults; a scenario carries at most one at a time.
var netKinds = []kind{cutLink, cutOneWay, slowPeers, cutAgentEtcd}

// The delay of slowPeers: a WAN link between control-plane sites.
const (
	peerDelay  = 200 * time.Millisecond
	peerJitter = 50 * time.Millisecond
)

// step is one action of a scenario.
type step struct {
	kind kind
	// member is the target's index. A step aimed at a leader uses it when no leader can be found.
	member int
	// other is the far end of a link step: cutLink and cutOneWay cut member's link to other.
	other int
	// leader aims a member step at etcd's leader and an agent step at the agent holding the Lease:
	// who leads is only known when the step runs, so these are the steps a replay may aim
	// differently.
	leader bool
	// leadingNode aims a member step at the etcd member of the leading agent's own node (the
	// agent holding the Lease), resolved when the step runs like leader.
	leadingNode bool
	// before is how long to let the system work before the step.
	before time.Duration
}

func (s step) String() string {
	var target string
	switch {
	case s.kind == healMember, s.kind == healAgent, s.kind == restartAPIServer, s.kind == slowPeers, s.kind == healNet:
	case s.kind == cutLink, s.kind == cutOneWay:
		from := nodeName(s.member)
		if s.leader {
			from = fmt.Sprintf("etcd leader (else %s)", from)
		}
		arrow := " <-> "
		if s.kind == cutOneWay {
			arrow = " -> "
		}
		target = from + arrow + nodeName(s.other)
	case s.kind == wait:
		target = s.before.String()
	case s.leadingNode:
		target = fmt.Sprintf("leading agent's node (else %s)", nodeName(s.member))
	case s.leader:
		target = fmt.Sprintf("leader (else %s)", nodeName(s.member))
	default:
		target = nodeName(s.member)
	}
	return strings.TrimSpace(kindNames[s.kind] + " " + target)
}

// crashPlan is a scenario that crashes the agent carrying out a leave at a failpoint.
type crashPlan struct {
	target, armed int
	point         string
	// alsoDown is a third member SIGKILLed before the leave, or -1: the removal stays allowed
	// (three voters remain, two of them healthy) but is judged on a cluster with a dead member.
	alsoDown int
}

// scenario is one generated sequence. Each scenario starts from the baseline (every member and
// agent up, no leave pending) and restores it afterwards, so scenario i of a seed can be replayed
// on its own.
type scenario struct {
	index int // 1-based, as printed
	steps []step
	// tail is how long the last step may work before every fault is healed: long enough for the
	// controller to judge a leave on the faulted cluster, and refuse it if it must.
	tail  time.Duration
	crash *crashPlan
}

func (sc scenario) String() string {
	if c := sc.crash; c != nil {
		s := fmt.Sprintf("crash point %s: leave %s with only the agent of %s armed", c.point, nodeName(c.target), nodeName(c.armed))
		if c.alsoDown >= 0 {
			s += ", etcd " + nodeName(c.alsoDown) + " killed first"
		}
		return s
	}
	parts := make([]string, len(sc.steps))
	for i, s := range sc.steps {
		parts[i] = s.String()
	}
	return strings.Join(parts, " · ")
}

func nodeName(i int) string { return fmt.Sprintf("node-%d", i+1) }

// Shape of the generated scenarios, sized so that a scenario takes seconds: every removal costs a
// re-join of about 8s when the baseline is restored, so leaves are the expensive steps.
const (
	crashPercent = 12
	// netPercent of the scenarios that are not crash scenarios carry a network fault (issue #17
	// asks for at least a quarter of all scenarios: 0.88 × 40% ≈ 35%).
	netPercent     = 40
	minSteps       = 2
	maxSteps       = 6
	maxLeaves      = 4
	maxBefore      = 700 * time.Millisecond
	maxWait        = 4 * time.Second
	maxAgentFaults = 3
	outageWeight   = 4
	minTail        = 300 * time.Millisecond
	shortTail      = time.Second
	judgeTail      = 3 * time.Second
	maxTail        = 5 * time.Second
)

const (
	// The weights of a member fault aimed at one node (every node has its own) and of one aimed
	// at the leading agent's node (issue #30), which also takes half the outages. One node's
	// faults weigh 2+1 and a quarter of the other outages, 3.5; those aimed at the leading
	// agent's node 8, more than twice that: a fixed node also draws in the states where only some
	// members may go down, and over 200 scenarios one of four nodes may draw a third more than
	// the others. TestLeadingNodeIsAimedAtMost checks the outcome; at run time the leading
	// agent's node draws its share of the fixed faults too, so it is hit at least as often as
	// any other node.
	killWeight          = 2
	pauseWeight         = 1
	leadingKillWeight   = 5
	leadingPauseWeight  = 1
	leadingOutageWeight = outageWeight / 2
)

// newRand returns scenario index's random source for seed. Each scenario has its own stream, so a
// scenario's steps do not depend on how many random numbers the ones before it drew, and
// CHAOS_ONLY can replay one alone.
func newRand(seed uint64, index int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(index)))
}

// planScenario generates scenario index of a run of n members. It depends on nothing but its
// arguments: the same seed always yields the same steps. When they run, each step is checked
// again against what really happened (a leave the controller refused, a leader that moved), and
// skipped when it no longer fits; the timing of everything varies from run to run.
func planScenario(seed uint64, index, n int) scenario {
	r := newRand(seed, index)
	sc := scenario{index: index}
	if r.IntN(100) < crashPercent {
		sc.crash = planCrash(r, n)
		return sc
	}
	p := planState{n: n, all: uint(1)<<n - 1}
	count := minSteps + r.IntN(maxSteps-minSteps+1)
	netAt := -1
	if r.IntN(100) < netPercent {
		netAt = r.IntN(count)
	}
	for i := range count {
		if i == netAt {
			sc.steps = append(sc.steps, p.netStep(r))
			continue
		}
		sc.steps = append(sc.steps, p.next(r))
	}
	// A leave still pending on a faulted cluster is what the quorum guard is for: give the
	// controller time to judge it before the faults are healed.
	lo, hi := minTail, shortTail
	if p.leaves != 0 && (len(p.memberDown) > 0 || p.net) {
		lo, hi = judgeTail, maxTail
	}
	sc.tail = lo + time.Duration(r.Int64N(int64(hi-lo)))
	return sc
}

func planCrash(r *rand.Rand, n int) *crashPlan {
	perm := r.Perm(n)
	c := &crashPlan{target: perm[0], armed: perm[1], point: failpoint.LeaveBeforeRemove, alsoDown: -1}
	if r.IntN(2) == 1 {
		c.point = failpoint.LeaveAfterRemove
	}
	// A dead member besides the target must leave the removal allowed: with n voters, n-1 remain
	// after it, and n-2 of those must still be a quorum.
	if n >= 4 && r.IntN(3) == 0 && n-2 >= quorum(n-1) {
		c.alsoDown = perm[2]
	}
	return c
}

// planState is what the generator knows after its steps so far, assuming each did what it says.
type planState struct {
	n   int
	all uint
	// memberDown lists the members taken down, in the order they went down.
	memberDown   []int
	killed       uint
	agentDown    []int
	leaves       uint // targets of leaves that may still be carried out
	cancelled    uint
	apiRestarted bool
	agentFaults  int
	// net: a network fault is in place; raft: that fault is on raft links (cut or delayed).
	net, raft bool
}

// netStep draws a network fault. Link cuts start, half the time, from whichever member leads etcd
// when the step runs: a leader that cannot reach a follower, or is heard by nobody, is where a
// cut hurts most. An agent's etcd link is cut, half the time, under the agent that leads.
func (p *planState) netStep(r *rand.Rand) step {
	s := step{kind: netKinds[r.IntN(len(netKinds))], member: r.IntN(p.n), before: time.Duration(r.Int64N(int64(maxBefore)))}
	switch s.kind {
	case cutLink, cutOneWay:
		s.other = (s.member + 1 + r.IntN(p.n-1)) % p.n
		s.leader = r.IntN(2) == 0
	case cutAgentEtcd:
		s.leader = r.IntN(2) == 0
	}
	p.apply(s)
	return s
}

// anyFrozen tells whether a member taken down is frozen (SIGSTOP) rather than killed.
func (p *planState) anyFrozen() bool {
	return slices.ContainsFunc(p.memberDown, func(i int) bool { return p.killed&(1<<i) == 0 })
}

func bitsOf(members []int) uint {
	var b uint
	for _, i := range members {
		b |= 1 << i
	}
	return b
}

// firstHealable returns the position in down of the first member that can be brought back now,
// or -1. A killed member with a leave pending stays down: it may be removed any moment, and a
// removed member started again only learns that it was removed and exits.
func firstHealable(down []int, killed, leaves uint) int {
	return slices.IndexFunc(down, func(i int) bool { return killed&leaves&(1<<i) == 0 })
}

// leaveWeights makes each further leave in a scenario less likely: every removal costs a re-join.
var leaveWeights = [maxLeaves]int{3, 2, 1, 1}

// nodeDeleteWeights are the part of leaveWeights that deleting the member's Node takes: the
// deletion asks for the member's leave (--leave-on-node-delete), so it is drawn as one kind of
// leave, and the mix of the other steps stays what it was.
var nodeDeleteWeights = [maxLeaves]int{1, 1, 0, 0}

type candidate struct {
	weight int
	step   step
}

// next draws one step among those that fit the state, weighted, and applies it to the state.
func (p *planState) next(r *rand.Rand) step {
	var cands []candidate
	add := func(weight int, s step) { cands = append(cands, candidate{weight, s}) }
	down := bitsOf(p.memberDown)
	pending := bits.OnesCount(p.leaves)
	anyMayFail := true
	for i := range p.n {
		bit := uint(1) << i
		if down&bit == 0 && quorumHolds(p.all, down|bit, p.leaves) {
			add(killWeight, step{kind: killMember, member: i})
			// A frozen member stalls kube-apiserver's requests that land on it for half a minute,
			// so the steps that need the API slow down: freeze less often than kill.
			add(pauseWeight, step{kind: pauseMember, member: i})
			if p.leaves&bit == 0 {
				// A restart costs seconds: a member that starts again re-publishes itself, and
				// that often waits out etcd's request timeout.
				add(1, step{kind: restartMember, member: i})
			}
		} else {
			anyMayFail = false
		}
		if p.leaves&bit == 0 && pending < maxLeaves {
			add(leaveWeights[pending]-nodeDeleteWeights[pending], step{kind: leave, member: i})
			if w := nodeDeleteWeights[pending]; w > 0 {
				add(w, step{kind: deleteNode, member: i})
			}
		}
		if p.leaves&^p.cancelled&bit != 0 {
			add(1, step{kind: cancelLeave, member: i})
			if quorumHolds(p.all, down|bit, p.leaves&^bit) {
				add(3, step{kind: rejoin, member: i})
			}
		}
	}
	// Faults aimed at whoever leads, which is where they hurt: etcd's leader, and the member of
	// the leading agent's own node, whose failure that agent must report while it runs on beside
	// it. Who that is is decided when the step runs, so every member must be one the injector may
	// take down; the plan assumes the member it names as fallback goes down.
	if anyMayFail {
		add(2, step{kind: killMember, member: r.IntN(p.n), leader: true})
		add(1, step{kind: pauseMember, member: r.IntN(p.n), leader: true})
		add(leadingKillWeight, step{kind: killMember, member: r.IntN(p.n), leadingNode: true})
		add(leadingPauseWeight, step{kind: pauseMember, member: r.IntN(p.n), leadingNode: true})
		// Each outage holds the scenario up to outageBound and, once the policy removed the
		// member, costs a re-join; at weight 1 a 200-scenario run had about 8, too few for the
		// one path where etcdmember removes a member nobody named. Half of them fall on the
		// leading agent's node.
		add(outageWeight-leadingOutageWeight, step{kind: outage, member: r.IntN(p.n)})
		add(leadingOutageWeight, step{kind: outage, member: r.IntN(p.n), leadingNode: true})
	}
	if p.agentFaults < maxAgentFaults {
		for i := range p.n {
			if !slices.Contains(p.agentDown, i) {
				add(1, step{kind: killAgent, member: i})
				add(1, step{kind: pauseAgent, member: i})
				add(1, step{kind: restartAgent, member: i})
			}
		}
		add(3, step{kind: killAgent, member: r.IntN(p.n), leader: true})
		add(3, step{kind: pauseAgent, member: r.IntN(p.n), leader: true})
		add(1, step{kind: restartAgent, member: r.IntN(p.n), leader: true})
	}
	if firstHealable(p.memberDown, p.killed, p.leaves) >= 0 {
		add(4, step{kind: healMember})
	}
	if len(p.agentDown) > 0 {
		add(3, step{kind: healAgent})
	}
	// kube-apiserver stores on the cluster under test, and its bootstrap (RBAC roles, priority
	// classes: hundreds of requests) outlasts the harness's wait when a raft link is faulted: on
	// delayed links every write is slow, and a member cut from etcd's leader serves no
	// linearizable read and commits nothing, so each request the apiserver's client sends it
	// waits out a timeout (seed 660826, scenario 2: /readyz still failing on rbac/bootstrap-roles
	// after a minute). A frozen member does the same to the requests that land on it, for half a
	// minute each. How long that takes is the apiserver's business, not etcdmember's.
	if !p.apiRestarted && !p.raft && !p.anyFrozen() {
		add(1, step{kind: restartAPIServer})
	}
	if p.net {
		add(2, step{kind: healNet})
	}
	add(1, step{kind: wait})

	total := 0
	for _, c := range cands {
		total += c.weight
	}
	pick := r.IntN(total)
	var s step
	for _, c := range cands {
		if pick < c.weight {
			s = c.step
			break
		}
		pick -= c.weight
	}
	s.before = time.Duration(r.Int64N(int64(maxBefore)))
	if s.kind == wait {
		s.before = time.Second + time.Duration(r.Int64N(int64(maxWait-time.Second)))
	}
	p.apply(s)
	return s
}

func (p *planState) apply(s step) {
	bit := uint(1) << s.member
	switch s.kind {
	case killMember, outage:
		p.memberDown = append(p.memberDown, s.member)
		p.killed |= bit
	case pauseMember:
		p.memberDown = append(p.memberDown, s.member)
	case healMember:
		at := firstHealable(p.memberDown, p.killed, p.leaves)
		p.killed &^= 1 << p.memberDown[at]
		p.memberDown = slices.Delete(p.memberDown, at, at+1)
	case killAgent, pauseAgent:
		p.agentDown = append(p.agentDown, s.member)
		p.agentFaults++
	case restartAgent:
		p.agentFaults++
	case healAgent:
		p.agentDown = p.agentDown[1:]
	case restartAPIServer:
		p.apiRestarted = true
	case cutLink, cutOneWay, slowPeers, cutAgentEtcd:
		p.net, p.raft = true, s.kind != cutAgentEtcd
	case healNet:
		p.net, p.raft = false, false
	case leave, deleteNode:
		p.leaves |= bit
	case cancelLeave:
		p.cancelled |= bit
	case rejoin:
		// The wiped member comes back as a new member, up and with no leave of its own.
		p.leaves &^= bit
		p.killed &^= bit
		p.memberDown = slices.DeleteFunc(p.memberDown, func(i int) bool { return i == s.member })
	}
}

// TestPlanIsDeterministic: a seed names one sequence of steps, which is what makes a failing
// run's seed worth printing.
func TestPlanIsDeterministic(t *testing.T) {
	for index := 1; index <= 50; index++ {
		a, b := planScenario(42, index, 4), planScenario(42, index, 4)
		if a.String() != b.String() {
			t.Fatalf("scenario %d differs between two plans of one seed:\n%s\n%s", index, a, b)
		}
		if a.crash == nil && len(a.steps) == 0 {
			t.Errorf("scenario %d has no steps", index)
		}
	}
	if planScenario(1, 1, 4).String() == planScenario(2, 1, 4).String() &&
		planScenario(1, 2, 4).String() == planScenario(2, 2, 4).String() {
		t.Errorf("seeds 1 and 2 plan the same scenarios")
	}
}

// shortRunMisses lists what the first n scenarios of seed lack of what the short run in
// `make test` must cover. Outages and re-joins count only where the injector cannot skip them,
// which the plan alone can tell only in a scenario that took no other member down before them: the
// dead-member policy may ask any member down for a few seconds to leave, and a heal planned while
// a network fault is in place does not happen. So an outage counts when no member went down and
// no leave was asked before it (the policy keeps --min-voters=3 of the four), and a re-join when
// besides that no network fault is in place and no other member's leave may be pending (a
// skipped re-join leaves its member's pending). A second leave with a member down counts unless
// its member is the outage's, whose leave the policy has already asked. Deleting a Node is a leave
// request; it counts as such, and on its own when its member was not taken down before it (the
// policy may have asked for that member already, and the deletion is then skipped). A fault aimed
// at a leader may take any member down. A member fault on the leading agent's node counts when it
// is aimed there and no member went down and no leave was asked before it: nothing can make the
// injector skip it then.
func shortRunMisses(seed uint64, n int) []string {
	want := map[string]bool{}
	for index := 1; index <= n; index++ {
		sc := planScenario(seed, index, members)
		if sc.crash != nil {
			want["crash point "+sc.crash.point] = true
			continue
		}
		var down, leaves int
		var leaving, outaged, wentDown uint
		net := false
		for _, s := range sc.steps {
			bit := uint(1) << s.member
			if s.kind == outage || s.kind == killMember || s.kind == pauseMember {
				if s.leadingNode && wentDown == 0 && leaves == 0 {
					want["a member fault on the leading agent's node"] = true
				}
				if s.leader || s.leadingNode {
					bit = uint(1)<<members - 1
				}
			}
			switch s.kind {
			case killMember, pauseMember:
				down++
				wentDown |= bit
			case outage:
				if wentDown == 0 && leaves == 0 {
					want["an outage past --remove-unreachable-after"] = true
				}
				down++
				wentDown |= bit
				outaged |= bit
			case healMember:
				down = max(down-1, 0)
			case leave, deleteNode:
				if outaged&bit != 0 {
					continue
				}
				if s.kind == deleteNode && wentDown&bit == 0 {
					want["a Node deleted"] = true
				}
				leaves++
				leaving |= bit
				if leaves >= 2 && down > 0 {
					want["two leaves with a member down"] = true
				}
			case rejoin:
				if !net && wentDown&^bit == 0 && leaving&^bit == 0 {
					want["a re-join mid-scenario"] = true
					leaving &^= bit
				}
			case cutOneWay, slowPeers, cutAgentEtcd:
				net = true
			case healNet:
				net = false
			case restartAPIServer:
				want["an apiserver crash"] = true
			case cutLink:
				net = true
				if s.leader {
					want["a partition"] = true
				}
			}
		}
	}
	var misses []string
	for _, need := range []string{
		"crash point " + failpoint.LeaveBeforeRemove, "crash point " + failpoint.LeaveAfterRemove,
		"two leaves with a member down", "a re-join mid-scenario", "an apiserver crash", "a partition",
		"an outage past --remove-unreachable-after", "a Node deleted", "a member fault on the leading agent's node",
	} {
		if !want[need] {
			misses = append(misses, need)
		}
	}
	return misses
}

// TestShortRunCoversItsCases: the fixed seed of `make test` plans what its comment promises.
func TestShortRunCoversItsCases(t *testing.T) {
	if misses := shortRunMisses(shortSeed, shortScenarios); len(misses) > 0 {
		t.Fatalf("seed %d's %d scenarios lack: %s", shortSeed, shortScenarios, strings.Join(misses, ", "))
	}
}

// TestOutagesAreCommon: the dead-member policy is the one path where etcdmember removes a member
// no one named, so a long run must take members down past --remove-unreachable-after often
// enough to see it act more than a handful of times. The seeds here stand for the random ones of
// `make chaos`.
func TestOutagesAreCommon(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		outages := 0
		for index := 1; index <= 200; index++ {
			for _, s := range planScenario(seed, index, members).steps {
				if s.kind == outage {
					outages++
				}
			}
		}
		if outages < 15 {
			t.Errorf("seed %d: %d outage steps in 200 scenarios, want at least 15", seed, outages)
		}
	}
}

// TestAQuarterCarryANetworkFault: issue #17 asks that at least a quarter of a long run's
// scenarios carry a network fault. The seeds here stand for the random ones of `make chaos`.
func TestAQuarterCarryANetworkFault(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		withNet := 0
		for index := 1; index <= 200; index++ {
			if slices.ContainsFunc(planScenario(seed, index, members).steps, func(s step) bool { return slices.Contains(netKinds, s.kind) }) {
				withNet++
			}
		}
		if withNet < 50 {
			t.Errorf("seed %d: %d of 200 scenarios carry a network fault, want at least 50", seed, withNet)
		}
	}
}

// TestNodeDeletionsAreCommon: deleting a member's Node is drawn as one kind of leave
// (nodeDeleteWeights); a long run must carry enough of them to meet a refused leave, a
// hand-over and a failover during the hold now and then. The seeds here stand for the random ones
// of `make chaos`.
func TestNodeDeletionsAreCommon(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		deletions, leaves := 0, 0
		for index := 1; index <= 200; index++ {
			for _, s := range planScenario(seed, index, members).steps {
				switch s.kind {
				case deleteNode:
					deletions++
				case leave:
					leaves++
				}
			}
		}
		if deletions < 30 || deletions > leaves {
			t.Errorf("seed %d: %d Node deletions and %d leaves in 200 scenarios, want at least 30 deletions and no more than leaves", seed, deletions, leaves)
		}
	}
}

// memberFaults are the steps that take an etcd member down: the ones aimed at the leading
// agent's node, and counted by where they land (run.landed).
var memberFaults = []kind{killMember, pauseMember, outage}

// TestLeadingNodeIsAimedAtMost: issue #30 asks that the leading agent's node be picked for member
// faults at least as often as any other node. The plan cannot know which node that is, so it
// aims some faults at it (leadingNode) and the rest at etcd's leader or at a fixed node; the
// faults aimed at the leading agent's node must be at least as many as those aimed at any one
// fixed node, since at run time the leading agent's node also draws its share of the latter.
// The seeds here stand for the random ones of `make chaos`.
func TestLeadingNodeIsAimedAtMost(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		aimed := 0
		fixed := make([]int, members)
		for index := 1; index <= 200; index++ {
			for _, s := range planScenario(seed, index, members).steps {
				switch {
				case !slices.Contains(memberFaults, s.kind), s.leader:
				case s.leadingNode:
					aimed++
				default:
					fixed[s.member]++
				}
			}
		}
		t.Logf("seed %d: %d member faults aimed at the leading agent's node, at one fixed node %v", seed, aimed, fixed)
		if most := slices.Max(fixed); aimed < most {
			t.Errorf("seed %d: %d member faults aimed at the leading agent's node, fewer than the %d aimed at one fixed node (%v)", seed, aimed, most, fixed)
		}
	}
}
