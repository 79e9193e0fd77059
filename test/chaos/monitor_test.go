package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// How often the monitors sample. The member list is read often enough to see every removal
// between two steps on its own; the objects only change as fast as the agents write them.
const (
	listEvery    = 150 * time.Millisecond
	objectsEvery = 300 * time.Millisecond
	// exitGrace is how long a member process may be gone while etcd still lists it before that
	// counts as a crash: a removed member exits by itself, and the list read before its removal
	// may still name it.
	exitGrace = 3 * time.Second
)

// The reasons the API defines: anything else in a condition is a violation.
var (
	leftReasons = []string{
		v1alpha1.ReasonRemoved, v1alpha1.ReasonNotFound, v1alpha1.ReasonHandingOver,
		v1alpha1.ReasonNoOtherAgent, v1alpha1.ReasonQuorumAtRisk, v1alpha1.ReasonLastVoter,
		v1alpha1.ReasonNoMemberID, v1alpha1.ReasonMemberMismatch, v1alpha1.ReasonEtcdError,
	}
	joinedReasons = []string{
		v1alpha1.ReasonInMemberList, v1alpha1.ReasonRejoined, v1alpha1.ReasonRemoved, v1alpha1.ReasonNotFound,
		v1alpha1.ReasonEvicted,
	}
)

// memberSample is one read of etcd's member list.
type memberSample struct {
	at      time.Time
	members []*etcdserverpb.Member
}

func (s memberSample) has(id uint64) bool {
	return framework.FindMember(s.members, id) != nil
}

func (s memberSample) voters() int {
	n := 0
	for _, m := range s.members {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// monitor runs both samplers until stop is called.
func (r *run) monitor() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.every(ctx, listEvery, r.sampleMembers) })
	wg.Go(func() { r.every(ctx, objectsEvery, r.sampleObjects) })
	return func() {
		cancel()
		wg.Wait()
	}
}

func (r *run) every(ctx context.Context, interval time.Duration, sample func(context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sampleMembers reads the member list and checks the membership invariants against the previous
// read: every member that disappeared was the target of a leave; every member that appeared is
// one the harness added; and the voters the injector left running are a quorum of the voters
// etcd lists. The last can only break through a removal: the injector never takes down more than
// quorumHolds allows, whatever the leaves in flight do.
func (r *run) sampleMembers(ctx context.Context) {
	resp, err := r.w.memberList(ctx, r.upOrder())
	if err != nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.list
	r.list = memberSample{at: now, members: resp.Members}
	if prev.at.IsZero() {
		return
	}
	for _, m := range prev.members {
		if r.list.has(m.ID) {
			continue
		}
		l := r.authorized[m.ID]
		if l == nil {
			// Judged by the next read of the objects, which shows whether the policy asked.
			if _, seen := r.unexplained[m.ID]; !seen {
				r.unexplained[m.ID] = unexplained{name: m.Name, at: now}
			}
			continue
		}
		r.c.removals++
		if l.removed.IsZero() {
			l.removed = now
		}
	}
	joiningNow := slices.Contains(r.member, joining)
	for _, m := range r.list.members {
		if !prev.has(m.ID) && !joiningNow && r.w.memberIndex(m.ID) < 0 {
			r.violateLocked(fmt.Sprintf("added %x", m.ID), "member %s (%s, %v) appeared in etcd, but the harness added nobody", etcd.IDString(m.ID), m.Name, m.PeerURLs)
		}
	}
	voters, running := 0, 0
	var down []string
	for _, m := range r.list.members {
		if m.IsLearner {
			continue
		}
		voters++
		i := r.w.memberIndex(m.ID)
		switch {
		case i < 0 && joiningNow:
			// The member being re-joined, whose new ID the framework learns once it serves: it
			// has been launched or is about to be, and quorumHolds counted it as down before.
			running++
		case i < 0:
		case r.member[i] == up:
			running++
		default:
			down = append(down, nodeName(i))
		}
	}
	if running < quorum(voters) {
		r.violateLocked("quorum", "quorum lost: etcd lists %d voters (%s), of which %d run, fewer than the %d a quorum needs; down by the injector: %v; removals so far: %s",
			voters, renderMembers(r.list.members), running, quorum(voters), down, r.removalsLocked())
	}
}

func renderMembers(members []*etcdserverpb.Member) string {
	var parts []string
	for _, m := range members {
		parts = append(parts, fmt.Sprintf("%s=%s", m.Name, etcd.IDString(m.ID)))
	}
	return strings.Join(parts, " ")
}

func (r *run) removalsLocked() string {
	var parts []string
	for _, l := range r.leaves {
		if !l.removed.IsZero() {
			parts = append(parts, fmt.Sprintf("%s at %s", l.name, l.removed.Sub(r.start).Truncate(100*time.Millisecond)))
		}
	}
	if len(parts) == 0 {
		return "none this scenario"
	}
	return strings.Join(parts, ", ")
}

// sampleObjects reads the objects and the processes, and checks what must hold at every moment:
// conditions carry only the API's reasons; a member etcdmember removed is never reported as gone
// for another reason (NotFound), a crash between its steps included; a member down for longer
// than the health bound is not Healthy=True; and no agent or etcd member exits unless the
// injector made it.
func (r *run) sampleObjects(ctx context.Context) {
	started := time.Now()
	objs, err := r.w.objects(ctx)
	if err != nil {
		return
	}
	nodesRead := time.Now()
	nodes, nodesErr := r.w.nodes(ctx)
	mayLead := r.leadableAgent()
	holder, holderOK := r.w.leaderAgent()
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if what := r.nodeDisruptionLocked(mayLead); what != "" {
		r.disruptLocked(what)
	}
	r.noteHolderLocked(holder, holderOK)
	if nodesErr == nil {
		r.checkNodesLocked(nodes, nodesRead, now)
	}
	r.checkHealthLocked(objs, started)
	r.notePolicyLeavesLocked(objs, now)
	r.judgeRemovalsLocked(started)
	r.objectsRead = started
	for i := range objs {
		obj := &objs[i]
		r.checkReasons(obj)
		if l := r.authorized[idOf(obj)]; l != nil && l.scenario == r.scenario && !l.rejoined {
			r.followLeave(l, obj, now)
		}
	}
	r.checkProcesses(now)
}

// unexplained is a removal the monitor saw before any leave that asked for it.
type unexplained struct {
	name string
	at   time.Time
}

// policySlack is how long after the injector brought a member back the dead-member policy may
// still ask it to leave: its verdict rests on a probe round and on two seconds without raft
// traffic from the member, both of which may end just before the member came back.
const policySlack = 3 * time.Second

// notePolicyLeavesLocked registers the leaves the dead-member policy asked for, and checks its
// promise: it asks only for a voter that etcd's leader no longer hears, which in these runs is a
// member the injector took down (no network fault here silences a running member towards etcd's
// leader while also cutting it from the leading agent's probes). A request this read shows but
// the previous one did not was made after that one started, so the member must have been down at
// some moment since then, give or take policySlack.
func (r *run) notePolicyLeavesLocked(objs []v1alpha1.EtcdMember, now time.Time) {
	for k := range objs {
		obj := &objs[k]
		why := obj.Annotations[v1alpha1.AnnotationLeaveReason]
		id, err := etcd.ParseID(obj.Spec.MemberID)
		if !obj.Spec.Leave || why == "" || err != nil || r.authorized[id] != nil {
			continue
		}
		i := r.w.memberIndex(id)
		if _, gone := r.former[id]; gone && i < 0 {
			// Of a node re-joined since: its removal was judged before the re-join.
			continue
		}
		if isNodeReason(why) {
			// The harness registers every member whose Node it deletes before the deletion.
			r.violateLocked("node request "+obj.Spec.MemberID, "%s: a Node's deletion asked member %s to leave (%q), but the harness deleted no Node bound to that member: %s",
				obj.Name, obj.Spec.MemberID, why, describe(obj))
			continue
		}
		if i < 0 {
			r.violateLocked("policy "+obj.Spec.MemberID, "%s: the dead-member policy asked member %s to leave, which no node runs: %s", obj.Name, obj.Spec.MemberID, describe(obj))
			continue
		}
		if !policyMayAsk(r.member[i], r.upSince[i], r.objectsRead) {
			since := "the run began"
			if !r.upSince[i].IsZero() {
				since = r.upSince[i].Sub(r.start).Truncate(100 * time.Millisecond).String()
			}
			r.violateLocked("policy "+obj.Spec.MemberID, "%s: the dead-member policy asked member %s to leave (%q), but the injector has left it up since %s: %s",
				obj.Name, obj.Spec.MemberID, why, since, describe(obj))
		}
		l := &leaveRec{scenario: r.scenario, member: i, name: obj.Name, id: id, idHex: obj.Spec.MemberID, issued: now, policy: true}
		if u, ok := r.unexplained[id]; ok {
			l.removed = u.at
			r.c.removals++
			delete(r.unexplained, id)
		}
		r.authorized[id] = l
		r.leaves = append(r.leaves, l)
		r.pending |= 1 << i
		r.c.policyLeaves++
	}
}

// policyMayAsk tells whether the dead-member policy may ask for a member that is in state f and
// was last brought up at upSince, in a request made after prevRead: the member was down at some
// moment since then, or came up at most policySlack before.
func policyMayAsk(f fault, upSince, prevRead time.Time) bool {
	return f != up || !upSince.Before(prevRead.Add(-policySlack))
}

// judgeRemovalsLocked reports the removals no leave asked for: a read of the objects that started
// after the monitor saw the removal would show the policy's request, had there been one (the
// request stays on the object until its node re-joins, and restore waits for this verdict first).
func (r *run) judgeRemovalsLocked(readStarted time.Time) {
	for id, u := range r.unexplained {
		if u.at.Before(readStarted) {
			r.violateLocked(fmt.Sprintf("unasked %x", id), "member %s (%s) was removed from etcd, but no leave asked for it", etcd.IDString(id), u.name)
			delete(r.unexplained, id)
		}
	}
}

func idOf(obj *v1alpha1.EtcdMember) uint64 {
	id, err := etcd.ParseID(obj.Status.MemberID)
	if err != nil {
		return 0
	}
	return id
}

func (r *run) checkReasons(obj *v1alpha1.EtcdMember) {
	if c := status.Get(obj, v1alpha1.ConditionLeft); c != nil && !slices.Contains(leftReasons, c.Reason) {
		r.violateLocked("reason "+obj.Name+c.Reason, "%s: Left has reason %q, which the API does not define", obj.Name, c.Reason)
	}
	c := status.Get(obj, v1alpha1.ConditionJoined)
	if c == nil {
		return
	}
	if !slices.Contains(joinedReasons, c.Reason) {
		r.violateLocked("reason "+obj.Name+c.Reason, "%s: Joined has reason %q, which the API does not define", obj.Name, c.Reason)
	}
	// Nobody but etcdmember removes members in these runs, so a member reported gone "for
	// another reason" is a removal etcdmember lost track of.
	if c.Reason == v1alpha1.ReasonNotFound {
		r.violateLocked("notfound "+obj.Name+obj.Status.MemberID, "%s: Joined=False/NotFound for member %s, which only etcdmember removed (%s): %s",
			obj.Name, obj.Status.MemberID, r.authorizedBy(idOf(obj)), describe(obj))
	}
}

func (r *run) authorizedBy(id uint64) string {
	if l := r.authorized[id]; l != nil {
		s := l.String()
		if l.crash != "" {
			s += " with the leader crashing at " + l.crash
		}
		return s
	}
	return "asked by no leave"
}

// followLeave records the Left conditions a leave goes through.
func (r *run) followLeave(l *leaveRec, obj *v1alpha1.EtcdMember, now time.Time) {
	r.checkNodeRequest(l, obj)
	c := status.Get(obj, v1alpha1.ConditionLeft)
	if c == nil {
		return
	}
	if l.explained.IsZero() && obj.Spec.Leave {
		l.explained = now
		r.c.explainTime = append(r.c.explainTime, now.Sub(l.issued))
	}
	seen := string(c.Status) + "/" + c.Reason
	if n := len(l.reasons); n > 0 && l.reasons[n-1] == seen {
		return
	}
	switch {
	case c.Reason == v1alpha1.ReasonQuorumAtRisk || c.Reason == v1alpha1.ReasonLastVoter:
		if !slices.ContainsFunc(l.reasons, refusal) {
			r.c.refusals++
		}
	case c.Reason == v1alpha1.ReasonHandingOver && !slices.Contains(l.reasons, seen):
		r.c.handOvers++
	case c.Reason == v1alpha1.ReasonEtcdError && !slices.Contains(l.reasons, seen):
		r.c.etcdErrors++
	}
	l.reasons = append(l.reasons, seen)
	if c.Status == metav1.ConditionTrue && c.Reason != v1alpha1.ReasonRemoved {
		r.violateLocked("left "+l.idHex, "%s ended Left=True/%s, but etcdmember removed it (crash point: %q): %s; Left went %v",
			l, c.Reason, l.crash, describe(obj), l.reasons)
	}
}

func refusal(seen string) bool {
	return strings.HasSuffix(seen, "/"+v1alpha1.ReasonQuorumAtRisk) || strings.HasSuffix(seen, "/"+v1alpha1.ReasonLastVoter)
}

// checkProcesses flags agents and members that exited although the injector left them up. An
// agent armed with a failpoint that exits with the failpoint's code did what it was asked.
func (r *run) checkProcesses(now time.Time) {
	for i, a := range r.w.agents {
		if r.agent[i] != up {
			continue
		}
		code, exited := a.Exited()
		if !exited {
			continue
		}
		r.disruptLocked("agent " + nodeName(i) + " exited")
		if r.armed[i] != "" && code == failpoint.ExitCode {
			r.agent[i] = crashed
			r.agentDown = append(r.agentDown, i)
			continue
		}
		r.violateLocked(fmt.Sprintf("agent exit %d", i), "the agent of %s exited by itself with code %d (log: %s)", nodeName(i), code, a.LogFile())
		r.agent[i] = crashed
		r.agentDown = append(r.agentDown, i)
	}
	for i, m := range r.w.members {
		if r.member[i] != up || m.Running() {
			continue
		}
		// A removed member shuts itself down: only a member etcd still lists, in a list read
		// well after the exit was noticed, has crashed.
		if r.list.has(m.ID()) && r.list.at.After(now.Add(-listEvery)) {
			key := fmt.Sprintf("etcd exit %s", m.IDHex())
			if first, ok := r.exitSeen[key]; !ok {
				r.exitSeen[key] = now
			} else if now.Sub(first) > exitGrace {
				r.violateLocked(key, "etcd member %s (%s) exited by itself while etcd still lists it (log: %s)", nodeName(i), m.IDHex(), m.LogFile())
			}
		}
	}
}

// TestPolicyMayAsk pins down when the monitor accepts a request of the dead-member policy.
func TestPolicyMayAsk(t *testing.T) {
	read := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name          string
		state         fault
		upSince, prev time.Time
		want          bool
	}{
		{"killed", killed, time.Time{}, read, true},
		{"paused", paused, read.Add(-time.Hour), read, true},
		{"being re-joined", joining, time.Time{}, read, true},
		{"never taken down", up, time.Time{}, read, false},
		{"up long before the previous read", up, read.Add(-policySlack - time.Second), read, false},
		{"brought up just before the previous read", up, read.Add(-policySlack + time.Second), read, true},
		{"brought up after the previous read", up, read.Add(time.Second), read, true},
	}
	for _, tc := range cases {
		if got := policyMayAsk(tc.state, tc.upSince, tc.prev); got != tc.want {
			t.Errorf("%s: policyMayAsk = %v, want %v", tc.name, got, tc.want)
		}
	}
}
