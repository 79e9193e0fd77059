package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// errSkip marks a step that no longer fits what happened: its target is gone, or taking it down
// now would let the injector itself cost the cluster its quorum.
var errSkip = errors.New("skipped")

func skip(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSkip, fmt.Sprintf(format, args...))
}

// runStep carries out one step and logs what it did.
func (r *run) runStep(s step) {
	r.t.Helper()
	r.sleep(s.before)
	var (
		what string
		err  error
	)
	switch s.kind {
	case killMember, pauseMember, restartMember:
		what, err = r.faultMember(s)
	case outage:
		what, err = r.outage(s)
	case healMember:
		what, err = r.healMember()
	case killAgent, pauseAgent, restartAgent:
		what, err = r.faultAgent(s)
	case healAgent:
		what, err = r.healAgent()
	case restartAPIServer:
		what, err = r.restartAPIServer()
	case leave:
		what, err = r.leave(s.member, "")
	case deleteNode:
		what, err = r.deleteNode(s.member)
	case cancelLeave:
		what, err = r.cancel(s.member)
	case rejoin:
		what, err = r.rejoin(s.member)
	case cutLink, cutOneWay, slowPeers, cutAgentEtcd:
		what, err = r.faultNet(s)
	case healNet:
		what, err = r.healNet()
	case wait:
		what = "waited " + s.before.Round(100*time.Millisecond).String()
	}
	r.mu.Lock()
	if errors.Is(err, errSkip) {
		r.c.skipped++
	} else {
		r.c.steps++
	}
	r.mu.Unlock()
	switch {
	case errors.Is(err, errSkip):
		r.logf("  %s: %v", s, err)
	case err != nil:
		r.violate("step "+s.String(), "%s: %v", s, err)
	default:
		r.logf("  %s", what)
	}
}

func (r *run) count(fault string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.faults[fault]++
}

// restartAPIServer crashes kube-apiserver with SIGKILL and starts it again. A graceful restart
// waits for the requests in flight, and those can hang on an etcd member just killed or removed
// for longer than the framework waits for a stop.
func (r *run) restartAPIServer() (string, error) {
	start := time.Now()
	r.mu.Lock()
	r.apiDown = true
	r.disruptLocked("kube-apiserver killed")
	r.mu.Unlock()
	r.w.api.Kill(r.t)
	r.w.api.Start(r.t)
	r.mu.Lock()
	r.apiDown = false
	r.disruptLocked("kube-apiserver started again")
	r.mu.Unlock()
	r.count("apiserver restart")
	return fmt.Sprintf("SIGKILL kube-apiserver and started it again (%s)", time.Since(start).Round(100*time.Millisecond)), nil
}

// target is where a member step lands: the member, the node of the agent the Lease named when the
// step ran (-1: none, or the Lease could not be read), and what the log says of the choice.
type target struct {
	member, leading int
	note            string
}

// aim resolves where member step s lands: on etcd's leader (s.leader), on the member of the
// leading agent's own node (s.leadingNode), or on the member the plan names, which is also where
// a step aimed at a leader lands when none can be found. Agent names are member names, so the
// Lease's holder names the node. Every step that takes a member down reads the Lease, so that the
// summary can tell the faults that landed on the leading agent's node from the others.
func (r *run) aim(s step) target {
	t := target{member: s.member, leading: -1}
	if slices.Contains(memberFaults, s.kind) {
		if l, ok := r.w.leaderAgent(); ok {
			t.leading = l
		}
	}
	switch {
	case s.leader:
		if l, ok := r.w.etcdLeader(r.upOrder()); ok {
			t.member = l
		}
	case s.leadingNode && t.leading >= 0:
		t.member = t.leading
	case s.leadingNode:
		t.note = " (no agent holds the Lease: the planned node)"
	}
	if t.leading >= 0 && t.member == t.leading {
		t.note = " (the leading agent's node)"
	}
	return t
}

// landed counts a member fault that took its member down by where it landed.
func (r *run) landed(s step, t target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case t.leading < 0:
		r.c.noLeadingNode++
	case t.member == t.leading:
		r.c.onLeadingNode++
		if s.leadingNode {
			r.c.aimedLeadingNode++
		}
	default:
		r.c.onOtherNode[t.member]++
	}
}

// faultMember kills, pauses or restarts an etcd member, if quorumHolds allows it.
func (r *run) faultMember(s step) (string, error) {
	return r.faultMemberAt(s, r.aim(s))
}

func (r *run) faultMemberAt(s step, t target) (string, error) {
	i := t.member
	m := r.w.members[i]
	r.mu.Lock()
	state, pending, down, voters := r.member[i], r.pending, r.downBits(), r.voterBits()
	r.mu.Unlock()
	switch {
	case state != up:
		return "", skip("%s is down already", m.Name)
	case !m.Running():
		return "", skip("%s has exited: it was removed", m.Name)
	case s.kind == restartMember && pending&(1<<i) != 0:
		// A removed member started again would only learn it was removed and exit.
		return "", skip("%s has a leave pending", m.Name)
	case s.kind == restartMember && len(r.netFaults) > 0:
		return "", skip("a network fault is in place: %s", startsBehindFault)
	case !quorumHolds(voters, down|1<<i, pending):
		return "", skip("taking %s down could cost quorum with the leaves pending", m.Name)
	}
	// The state changes before the signal: the monitor must never count a member as running
	// that may already be gone.
	switch s.kind {
	case killMember, outage:
		r.setMember(i, killed)
		m.Kill(r.t)
		r.count("etcd kill")
		r.landed(s, t)
		return "SIGKILL etcd " + m.Name + t.note + r.takeNode(i, killed), nil
	case pauseMember:
		r.setMember(i, paused)
		m.Pause(r.t)
		r.count("etcd pause")
		r.landed(s, t)
		return "SIGSTOP etcd " + m.Name + t.note + r.takeNode(i, paused), nil
	default:
		start := time.Now()
		r.setMember(i, restarting)
		m.Stop(r.t)
		r.setMember(i, up)
		removed := r.startMember(i)
		r.count("etcd restart")
		return fmt.Sprintf("restarted etcd %s (%s)%s", m.Name, time.Since(start).Round(100*time.Millisecond), removed), nil
	}
}

// outage kills an etcd member and lets the scenario run on without it until the dead-member
// policy asks it to leave, for at most outageBound: the monitor accepts the policy's removal of a
// member the injector took down, and nothing else (notePolicyLeavesLocked). It does not wait
// where the policy must hold back: for a member with a leave pending already, or when the
// cluster has policyMinVoters voters or fewer.
func (r *run) outage(s step) (string, error) {
	t := r.aim(s)
	m := r.w.members[t.member]
	r.mu.Lock()
	pending, voters := r.pending&(1<<t.member) != 0, r.list.voters()
	r.mu.Unlock()
	id := m.IDHex()
	what, err := r.faultMemberAt(s, t)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.c.outages++
	r.mu.Unlock()
	if pending || voters <= policyMinVoters {
		return what + " (the policy has nothing to ask: a leave is pending or too few voters would remain)", nil
	}
	start := time.Now()
	err = r.await(outageBound, func(ctx context.Context) error {
		obj, err := r.w.object(ctx, m.Name)
		if err != nil {
			return err
		}
		if !obj.Spec.Leave || obj.Spec.MemberID != id || obj.Annotations[v1alpha1.AnnotationLeaveReason] == "" {
			return fmt.Errorf("not asked to leave: %s", describe(obj))
		}
		return nil
	})
	if err != nil {
		// Not a violation: the policy holds back while a leading agent is paused, or the guard
		// would refuse.
		return fmt.Sprintf("%s; the dead-member policy did not ask it to leave within %s: %v", what, outageBound, err), nil
	}
	return fmt.Sprintf("%s; the dead-member policy asked it to leave after %s", what, time.Since(start).Round(100*time.Millisecond)), nil
}

// takeNode, in whole-node mode, does to member i's agent what was done to its etcd: the node
// crashed or froze as a whole.
func (r *run) takeNode(i int, f fault) string {
	a := r.w.agents[i]
	r.mu.Lock()
	state := r.agent[i]
	r.mu.Unlock()
	if !r.cfg.wholeNodes || state != up || !a.Running() {
		return ""
	}
	r.setAgent(i, f)
	r.mu.Lock()
	r.withNode |= 1 << i
	r.mu.Unlock()
	if f == paused {
		a.Pause(r.t)
		return " and its agent"
	}
	a.Kill(r.t)
	return " and its agent"
}

// bringNode brings back the agent that went down with member i's etcd, if one did.
func (r *run) bringNode(i int) string {
	r.mu.Lock()
	tied, state := r.withNode&(1<<i) != 0, r.agent[i]
	r.withNode &^= 1 << i
	r.mu.Unlock()
	if !tied {
		return ""
	}
	r.startAgent(i, state)
	return " and its agent"
}

// await retries check until it returns nil or bound passes, tending the nodes before each attempt.
func (r *run) await(bound time.Duration, check func(ctx context.Context) error) error {
	return framework.Poll(bound, pollEvery, retried(func(ctx context.Context) error {
		r.tend()
		return check(ctx)
	}))
}

// sleep waits for d, tending the nodes meanwhile.
func (r *run) sleep(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		r.tend()
		time.Sleep(min(200*time.Millisecond, time.Until(end)))
	}
}

// tend, in whole-node mode, stops the agent of every member etcd no longer lists, as an operator
// decommissioning a removed node would; the node's re-join starts it again.
func (r *run) tend() {
	if !r.cfg.wholeNodes {
		return
	}
	r.mu.Lock()
	list := r.list
	var retire []int
	for i, m := range r.w.members {
		if r.agent[i] == up && r.w.agents[i].Running() && r.member[i] != joining && !list.at.IsZero() && !list.has(m.ID()) {
			retire = append(retire, i)
		}
	}
	r.mu.Unlock()
	for _, i := range retire {
		r.setAgent(i, retired)
		r.w.agents[i].Stop(r.t)
		r.logf("  stopped agent %s: its member was removed", r.w.agents[i].Name)
	}
}

// startsBehindFault is why no etcd member is started while a network fault is in place: a member
// that starts behind a cut link to etcd's leader never hears a leader (its peers, hearing theirs,
// refuse its pre-votes), so the framework's wait for it to serve runs out (seed 954830404,
// scenario 93). The end of the scenario heals the network first and starts members then.
const startsBehindFault = "a member started now might never hear etcd's leader"

// healMember brings back the first member taken down that can come back now.
func (r *run) healMember() (string, error) {
	r.mu.Lock()
	var killedBits uint
	for _, i := range r.memberDown {
		if r.member[i] == killed {
			killedBits |= 1 << i
		}
	}
	at := firstHealable(r.memberDown, killedBits, r.pending)
	var i int
	var state fault
	if at >= 0 {
		i = r.memberDown[at]
		state = r.member[i]
	}
	r.mu.Unlock()
	if at < 0 {
		return "", skip("no member can come back now")
	}
	if state != paused && len(r.netFaults) > 0 {
		return "", skip("a network fault is in place: %s", startsBehindFault)
	}
	m := r.w.members[i]
	r.setMember(i, up)
	if state == paused {
		m.Resume(r.t)
		return "SIGCONT etcd " + m.Name + r.bringNode(i), nil
	}
	removed := r.startMember(i)
	return "started etcd " + m.Name + removed + r.bringNode(i), nil
}

// startMember starts member i again. The dead-member policy may be removing it just then (it
// decided on the outage that is ending): the member then learns so from its peers and exits, as
// any removed member does, and the re-join at the end of the scenario brings it back.
func (r *run) startMember(i int) string {
	serving := r.w.members[i].StartUnlessRemoved(r.t)
	// Back only now: the start took a while, which the policy's slack must not lose.
	r.mu.Lock()
	r.backLocked(i)
	r.mu.Unlock()
	if !serving {
		return " (removed meanwhile: it exited)"
	}
	return ""
}

// faultAgent kills, pauses or restarts an agent.
func (r *run) faultAgent(s step) (string, error) {
	i := s.member
	if s.leader {
		if l, ok := r.w.leaderAgent(); ok {
			i = l
		}
	}
	a := r.w.agents[i]
	r.mu.Lock()
	state := r.agent[i]
	r.mu.Unlock()
	if state != up || !a.Running() {
		return "", skip("agent %s is down already", a.Name)
	}
	switch s.kind {
	case killAgent:
		r.setAgent(i, killed)
		a.Kill(r.t)
		r.count("agent kill")
		return "SIGKILL agent " + a.Name, nil
	case pauseAgent:
		r.setAgent(i, paused)
		a.Pause(r.t)
		r.count("agent pause")
		return "SIGSTOP agent " + a.Name, nil
	default:
		r.setAgent(i, restarting)
		a.Stop(r.t)
		a.StartUnready(r.t)
		r.setAgent(i, up)
		r.count("agent restart")
		return "restarted agent " + a.Name, nil
	}
}

// healAgent brings back the agent that went down first on its own: one that went down with its
// node comes back with it, and one retired with its removed member with the re-join.
func (r *run) healAgent() (string, error) {
	r.mu.Lock()
	at := slices.IndexFunc(r.agentDown, func(i int) bool { return r.withNode&(1<<i) == 0 && r.agent[i] != retired })
	if at < 0 {
		r.mu.Unlock()
		return "", skip("no agent to bring back on its own")
	}
	i := r.agentDown[at]
	state := r.agent[i]
	r.mu.Unlock()
	return r.startAgent(i, state), nil
}

// startAgent brings agent i back from state, without its failpoint, and without waiting for it
// to register: its member may be down or removed.
func (r *run) startAgent(i int, state fault) string {
	a := r.w.agents[i]
	if state == paused {
		a.Resume(r.t)
		r.setAgent(i, up)
		return "SIGCONT agent " + a.Name
	}
	a.SetEnv(r.t)
	r.mu.Lock()
	r.armed[i] = ""
	r.mu.Unlock()
	a.StartUnready(r.t)
	r.setAgent(i, up)
	return "started agent " + a.Name
}

// faultNet puts a network fault in place through the framework's fault proxies. The processes
// keep running, so the fault never counts against the quorum budget of quorumHolds: raft copes
// with one lost link by routing leadership around it. The invariants stay those of the process
// faults (the quorum one counts running voters, so a removal that left a partitioned cluster
// unable to commit only while the fault lasted would not be flagged; the e2e network scenarios
// check the guard's counting under each fault on its own).
func (r *run) faultNet(s step) (string, error) {
	if len(r.netFaults) > 0 {
		return "", skip("a network fault is in place already")
	}
	from := s.member
	if s.leader {
		var (
			l     int
			found bool
		)
		if s.kind == cutAgentEtcd {
			l, found = r.w.leaderAgent()
		} else {
			l, found = r.w.etcdLeader(r.upOrder())
		}
		// A leader at a link's far end leaves the step as planned (for a one-way cut, that is
		// the member's messages to the leader, not the leader's).
		if found && (s.kind == cutAgentEtcd || l != s.other) {
			from = l
		}
	}
	var (
		what string
		heal []func()
	)
	switch s.kind {
	case cutLink:
		a, b := r.w.members[from], r.w.members[s.other]
		ab, ba := r.w.cluster.PeerLink(r.t, a, b), r.w.cluster.PeerLink(r.t, b, a)
		ab.Blackhole()
		ba.Blackhole()
		heal = []func(){ab.Heal, ba.Heal}
		what = "cut the link " + a.Name + " <-> " + b.Name
		r.count("link cut")
	case cutOneWay:
		a, b := r.w.members[from], r.w.members[s.other]
		ab := r.w.cluster.PeerLink(r.t, a, b)
		ab.Blackhole()
		heal = []func(){ab.Heal}
		what = "cut the link " + a.Name + " -> " + b.Name + " (one way)"
		r.count("link cut one way")
	case slowPeers:
		for _, a := range r.w.members {
			for _, b := range r.w.members {
				if a != b {
					l := r.w.cluster.PeerLink(r.t, a, b)
					l.Delay(peerDelay, peerJitter)
					heal = append(heal, l.Heal)
				}
			}
		}
		what = fmt.Sprintf("delayed every peer link by %s ± %s", peerDelay, peerJitter)
		r.count("peer delay")
	case cutAgentEtcd:
		a := r.w.agents[from]
		l := a.EtcdLink(r.t)
		l.Blackhole(framework.BothWays)
		heal = []func(){l.Heal}
		what = "cut agent " + a.Name + " from its etcd"
		r.count("agent etcd cut")
	}
	r.netFaults = append(r.netFaults, netFault{what: what, heal: heal})
	r.mu.Lock()
	r.netScenario = true
	r.netInPlace = true
	r.disruptLocked(what)
	r.mu.Unlock()
	return what, nil
}

// healNet lifts every network fault in place.
func (r *run) healNet() (string, error) {
	if len(r.netFaults) == 0 {
		return "", skip("no network fault in place")
	}
	var healed []string
	for _, f := range r.netFaults {
		for _, h := range f.heal {
			h()
		}
		healed = append(healed, f.what)
	}
	r.netFaults = nil
	r.mu.Lock()
	r.netInPlace = false
	r.disruptLocked("network healed")
	r.mu.Unlock()
	return "healed: " + strings.Join(healed, ", "), nil
}
