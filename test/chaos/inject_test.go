package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/failpoint"
	"github.com/etcdmember/etcdmember/internal/status"
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
	case cancelLeave:
		what, err = r.cancel(s.member)
	case rejoin:
		what, err = r.rejoin(s.member)
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

// restartAPIServer restarts kube-apiserver, unless an etcd member is frozen: the apiserver's
// graceful stop then waits on requests to the frozen member until the framework gives up on it.
func (r *run) restartAPIServer() (string, error) {
	r.mu.Lock()
	frozen := slices.Contains(r.member, paused)
	r.mu.Unlock()
	if frozen {
		return "", skip("an etcd member is frozen")
	}
	start := time.Now()
	r.w.api.Restart(r.t)
	r.count("apiserver restart")
	return fmt.Sprintf("restarted kube-apiserver (%s)", time.Since(start).Round(100*time.Millisecond)), nil
}

// faultMember kills, pauses or restarts an etcd member, if quorumHolds allows it.
func (r *run) faultMember(s step) (string, error) {
	i := s.member
	if s.leader {
		if l, ok := r.w.etcdLeader(r.upOrder()); ok {
			i = l
		}
	}
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
	case !quorumHolds(voters, down|1<<i, pending):
		return "", skip("taking %s down could cost quorum with the leaves pending", m.Name)
	}
	// The state changes before the signal: the monitor must never count a member as running
	// that may already be gone.
	switch s.kind {
	case killMember:
		r.setMember(i, killed)
		m.Kill(r.t)
		r.count("etcd kill")
		return "SIGKILL etcd " + m.Name + r.takeNode(i, killed), nil
	case pauseMember:
		r.setMember(i, paused)
		m.Pause(r.t)
		r.count("etcd pause")
		return "SIGSTOP etcd " + m.Name + r.takeNode(i, paused), nil
	default:
		start := time.Now()
		r.setMember(i, restarting)
		m.Stop(r.t)
		r.setMember(i, up)
		m.Start(r.t)
		r.count("etcd restart")
		return fmt.Sprintf("restarted etcd %s (%s)", m.Name, time.Since(start).Round(100*time.Millisecond)), nil
	}
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

// await is eventually, tending the nodes between attempts.
func (r *run) await(bound time.Duration, check func(ctx context.Context) error) error {
	return eventually(bound, func(ctx context.Context) error {
		r.tend()
		return check(ctx)
	})
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
		if r.agent[i] == up && r.member[i] != joining && !list.at.IsZero() && !list.has(m.ID()) {
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
	m := r.w.members[i]
	r.setMember(i, up)
	if state == paused {
		m.Resume(r.t)
		return "SIGCONT etcd " + m.Name + r.bringNode(i), nil
	}
	m.Start(r.t)
	return "started etcd " + m.Name + r.bringNode(i), nil
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

// leave asks for member i's removal as an operator would, through spec.leave, on the object
// version whose member ID it recorded: the ID is what the removal is then allowed for.
func (r *run) leave(i int, crash string) (string, error) {
	m := r.w.members[i]
	r.mu.Lock()
	pending := r.pending&(1<<i) != 0
	r.mu.Unlock()
	if pending {
		return "", skip("%s has a leave pending", m.Name)
	}
	var l *leaveRec
	err := eventually(15*time.Second, func(ctx context.Context) error {
		obj, err := r.w.object(ctx, m.Name)
		if err != nil {
			return err
		}
		// After a re-join the object records the new member once its agent took it over.
		if obj.Status.MemberID != m.IDHex() || !status.IsTrue(obj, v1alpha1.ConditionJoined) {
			return fmt.Errorf("the object does not record the member yet: %s", describe(obj))
		}
		l = &leaveRec{scenario: r.scenario, member: i, name: m.Name, id: m.ID(), idHex: m.IDHex(), crash: crash}
		r.mu.Lock()
		r.authorized[l.id] = l
		r.mu.Unlock()
		patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
		obj.Spec.Leave = true
		l.issued = time.Now()
		return r.w.client.Patch(ctx, obj, patch)
	})
	if err != nil && l != nil && r.leaveLanded(l) {
		// The patch landed, and only its answer was lost.
		err = nil
	}
	if err != nil {
		r.mu.Lock()
		if l != nil {
			delete(r.authorized, l.id)
		}
		r.mu.Unlock()
		return "", skip("%s: %v", m.Name, err)
	}
	r.mu.Lock()
	r.pending |= 1 << i
	r.leaves = append(r.leaves, l)
	r.c.leaves++
	r.mu.Unlock()
	return fmt.Sprintf("leave %s (member %s)", m.Name, l.idHex), nil
}

// leaveLanded tells whether the object asks for l's member to leave after all.
func (r *run) leaveLanded(l *leaveRec) bool {
	var landed bool
	_ = eventually(callTimeout, func(ctx context.Context) error {
		obj, err := r.w.object(ctx, l.name)
		if err == nil {
			landed = obj.Spec.Leave && obj.Status.MemberID == l.idHex
		}
		return err
	})
	return landed
}

// cancel sets spec.leave back to false.
func (r *run) cancel(i int) (string, error) {
	l := r.leaveOf(i)
	if l == nil || l.cancelled || l.rejoined {
		return "", skip("no leave of %s to cancel", nodeName(i))
	}
	err := eventually(15*time.Second, func(ctx context.Context) error {
		obj, err := r.w.object(ctx, l.name)
		if err != nil {
			return err
		}
		if obj.Status.MemberID != l.idHex {
			return fmt.Errorf("the object records another member: %s", describe(obj))
		}
		patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
		obj.Spec.Leave = false
		return r.w.client.Patch(ctx, obj, patch)
	})
	if err != nil {
		return "", skip("cancel %s: %v", l.name, err)
	}
	r.mu.Lock()
	l.cancelled = true
	r.c.cancels++
	r.mu.Unlock()
	return "cancelled the " + l.String(), nil
}

// rejoin waits for member i's leave to be carried out, then brings the node back wiped, as a new
// member, while whatever else is in flight goes on.
func (r *run) rejoin(i int) (string, error) {
	l := r.leaveOf(i)
	if l == nil || l.cancelled || l.rejoined {
		return "", skip("no leave of %s to re-join after", nodeName(i))
	}
	err := r.await(removedBound, func(ctx context.Context) error {
		obj, err := r.w.object(ctx, l.name)
		if err != nil {
			return err
		}
		if !status.HasReason(obj, v1alpha1.ConditionLeft, v1alpha1.ReasonRemoved) || !status.IsTrue(obj, v1alpha1.ConditionLeft) {
			return fmt.Errorf("not removed: %s", describe(obj))
		}
		list, err := r.w.memberList(ctx, r.upOrder())
		if err != nil {
			return err
		}
		if (memberSample{members: list.Members}).has(l.id) {
			return fmt.Errorf("Left=True/Removed, but etcd still lists member %s", l.idHex)
		}
		return nil
	})
	if err != nil {
		return "", skip("%s: %v", l, err)
	}
	return r.rejoinMember(i)
}

// rejoinMember re-joins member i, whose member is no longer in etcd, if quorumHolds allows the
// new member to count as down until it serves.
func (r *run) rejoinMember(i int) (string, error) {
	m := r.w.members[i]
	r.mu.Lock()
	voters, down, pending := r.voterBits()|1<<i, r.downBits()|1<<i, r.pending&^(1<<i)
	r.mu.Unlock()
	// A cluster of one can only grow through one of two: etcd allows that add, and so does the
	// injector, when the one is up.
	fromOne := bits.OnesCount(voters&^(1<<i)) == 1 && down&voters&^(1<<i) == 0
	if !quorumHolds(voters, down, pending) && !fromOne {
		return "", skip("re-joining %s now could cost quorum", m.Name)
	}
	start, old := time.Now(), m.IDHex()
	r.setMember(i, joining)
	// The node comes back as a whole: an agent that went down with it, or was stopped with its
	// removal, starts with it and waits for its etcd, as on a booting machine.
	r.mu.Lock()
	agentState := r.agent[i]
	r.mu.Unlock()
	node := r.bringNode(i)
	if agentState == retired {
		r.startAgent(i, retired)
		node = " and its agent"
	}
	r.w.cluster.Rejoin(r.t, m, false)
	r.setMember(i, up)
	r.mu.Lock()
	r.pending &^= 1 << i
	if l := r.leaveOfLocked(i); l != nil {
		l.rejoined = true
	}
	r.c.rejoins++
	r.mu.Unlock()
	return fmt.Sprintf("re-joined %s%s: member %s is now %s (%s)", m.Name, node, old, m.IDHex(), time.Since(start).Round(100*time.Millisecond)), nil
}

func (r *run) leaveOfLocked(i int) *leaveRec {
	for k := len(r.leaves) - 1; k >= 0; k-- {
		if r.leaves[k].member == i {
			return r.leaves[k]
		}
	}
	return nil
}

// runCrash arms one agent with a failpoint and makes it the only agent able to carry out a leave:
// the others are paused, except the target's own agent, which never removes its own member and
// hands leadership over if it leads. The armed agent exits at the failpoint; the next leader must
// then finish the leave and report Removed, which it can only know from the intent left behind.
func (r *run) runCrash(c *crashPlan) {
	r.t.Helper()
	x, a := c.armed, r.w.agents[c.armed]
	r.mu.Lock()
	r.c.crashArmed[c.point]++
	r.mu.Unlock()

	r.setAgent(x, restarting)
	a.Stop(r.t)
	a.SetEnv(r.t, failpoint.EnvVar+"="+c.point)
	r.mu.Lock()
	r.armed[x] = c.point
	r.mu.Unlock()
	a.StartUnready(r.t)
	r.setAgent(x, up)
	if err := eventually(agentReadyBound, func(context.Context) error {
		if !r.w.agentReady(x) {
			return errors.New("not ready")
		}
		return nil
	}); err != nil {
		r.violate("armed ready", "the agent of %s, restarted with failpoint %s, did not register: %v", a.Name, c.point, err)
	}
	r.logf("  armed agent %s with %s", a.Name, c.point)
	for i := range r.n {
		if i != x && i != c.target {
			r.setAgent(i, paused)
			r.w.agents[i].Pause(r.t)
		}
	}
	r.logf("  paused the agents other than %s and %s", a.Name, nodeName(c.target))
	if c.alsoDown >= 0 {
		r.runStep(step{kind: killMember, member: c.alsoDown})
	}
	what, err := r.leave(c.target, c.point)
	if err != nil {
		r.logf("  leave %s: %v", nodeName(c.target), err)
	} else {
		r.logf("  %s", what)
	}

	start := time.Now()
	hit := r.await(crashBound, func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.agent[x] != crashed {
			return errors.New("the armed agent still runs")
		}
		return nil
	}) == nil
	if hit {
		r.mu.Lock()
		r.c.crashHit[c.point]++
		r.mu.Unlock()
		r.logf("  agent %s exited at %s after %s", a.Name, c.point, time.Since(start).Round(100*time.Millisecond))
	} else {
		obj, _ := r.w.object(context.Background(), nodeName(c.target))
		r.logf("  agent %s did not reach %s within %s: %s", a.Name, c.point, crashBound, describe(obj))
	}
	// Disarm before anything can start the agent again.
	r.mu.Lock()
	state := r.agent[x]
	r.mu.Unlock()
	a.SetEnv(r.t)
	r.mu.Lock()
	r.armed[x] = ""
	r.mu.Unlock()
	if state == crashed {
		r.startAgent(x, crashed)
	} else {
		// Missed: restart it unarmed, so no later leave can trip it.
		r.setAgent(x, restarting)
		a.Stop(r.t)
		a.StartUnready(r.t)
		r.setAgent(x, up)
	}
	for i := range r.n {
		if i != x && i != c.target {
			r.startAgent(i, paused)
		}
	}
	r.logf("  disarmed %s and resumed the other agents", a.Name)
}
