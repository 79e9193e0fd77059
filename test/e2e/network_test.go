package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// Network faults (issue #17): each scenario cuts or slows single links through the framework's
// fault proxies, which framework's own tests show take effect and heal.

// stepDownBound is how long a leading agent that lost its etcd may keep the Lease, with the
// tests' timings (--sync-interval 1s, --leader-elect-retry-period 500ms): its registrar's next
// sync starts within 1s and fails when its Status call times out (etcd.DefaultCallTimeout, 5s);
// the local guard, checking every retry period, then waits localUnusableAfter (2) sync intervals,
// asks the member once more (agent.recheckTimeout, 2s: a member that serves again keeps its
// leader) and takes the change lock, which a reconcile stuck on its own etcd call holds for up to
// 5s more; stepping down stops the term's manager, which waits for the reconcile in flight (up to
// one more etcd call, 5s), releases the Lease, and another agent takes it within a retry period.
// 1 + 5 + 0.5 + 2 + 2 + 5 + 5 + 0.5 = 21s. Measured before the second question: 10.3-10.8s on an
// idle machine; one CI run with every scenario in parallel took longer than 15s.
const stepDownBound = 22 * time.Second

// TestLeaderCutFromEtcdStepsDown: the leading agent loses every byte to and from its etcd member
// but keeps the apiserver. The leave pending meanwhile is carried out exactly once, by that
// agent through the members' client URLs or by the next leader; the agent stops leading within
// stepDownBound, and once the link heals nothing changes any more.
func TestLeaderCutFromEtcdStepsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 4, faultProxies: true})
	leader := e.leaderAgent()
	old := e.agents[leader]
	target := otherThan(e, leader)
	removalsBefore := removalsLogged(t, e)

	link := old.EtcdLink(t)
	link.Blackhole(framework.BothWays)
	cut := time.Now()
	e.leave(target.Name)

	var next string
	framework.Eventually(t, stepDownBound, retryEvery, "another agent holds the Lease", func(ctx context.Context) (bool, error) {
		next = e.leaderAgent()
		return next != leader, nil
	})
	// LeaderAgent waits for a holder: a Lease released in time but taken late shows here.
	if took := time.Since(cut); took > stepDownBound {
		t.Errorf("agent %s led until %s after its etcd link was cut, want at most %s", leader, took.Round(100*time.Millisecond), stepDownBound)
	}
	t.Logf("agent %s led %s after its etcd link was cut; %s leads now", leader, time.Since(cut).Round(100*time.Millisecond), next)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	// The Event follows the status write that the wait above saw.
	e.waitEvent(target.Name, corev1.EventTypeNormal, v1alpha1.ReasonRemoved)

	link.Heal()
	members := e.etcdMemberIDs()
	// The healed agent reaches etcd again, and whatever it still held from before the cut must
	// not move etcd: the members stay as they are, and it logs no removal of its own.
	framework.Consistently(t, 6*time.Second, pollEvery, "the membership stays as the new leader left it", func(context.Context) (bool, error) {
		now := e.etcdMemberIDs()
		if len(now) != len(members) {
			return false, nil
		}
		for id := range members {
			if !now[id] {
				return false, nil
			}
		}
		return true, nil
	})
	// Counted once the membership has stayed put for a while: a second removal would show here.
	if n := countEvents(e, target.Name, v1alpha1.ReasonRemoved); n != 1 {
		t.Errorf("%d Removed Events about %s, want exactly 1: %+v", n, target.Name, e.events(target.Name))
	}
	if n := removalsLogged(t, e); n != removalsBefore+1 {
		t.Errorf("the agents logged %d removals after %s's etcd link was cut, want exactly 1", n-removalsBefore, leader)
	}
	if !strings.Contains(readFile(t, old.LogFile()), "Local etcd member unusable; stepping down") {
		t.Errorf("agent %s did not log its step-down", leader)
	}
}

// removalsLogged counts the removals every agent of e logged.
func removalsLogged(t *testing.T, e *env) int {
	t.Helper()
	n := 0
	for _, a := range e.agents {
		n += logCount(t, a.LogFile(), "Removing member from etcd")
	}
	return n
}

// TestEtcdLeaderLosingItsOutboundLinks: every raft message etcd's leader sends is lost, while it
// still hears its peers (one-way loss). The followers elect a new leader; the old one can no
// longer serve a linearizable read, so it counts as unhealthy. A leave that would leave one
// healthy voter of two is refused with the numbers; the leave of the cut-off member itself goes
// through and the cluster keeps its quorum. Nothing is left half-done. The apiserver stores on an
// etcd of its own: this test bed's apiserver balances over every member, and its requests to the
// cut-off one would hang, which is the apiserver's problem, not the one under test.
func TestEtcdLeaderLosingItsOutboundLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, faultProxies: true, separateStorage: true})
	cutOff := e.cluster.Leader(t)
	var followers []*framework.Member
	for _, m := range e.cluster.Members() {
		if m != cutOff {
			followers = append(followers, m)
			e.cluster.PeerLink(t, cutOff, m).Blackhole()
		}
	}

	refusedTarget := followers[0]
	e.leave(refusedTarget.Name)
	refused := e.waitFor(refusedTarget.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	want := "removing " + refusedTarget.Name + " would leave 1 healthy voter of 2; quorum of 2 needs 2"
	if msg := condition(refused, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, want) {
		t.Errorf("refusal message %q lacks %q", msg, want)
	}
	e.waitEvent(refusedTarget.Name, corev1.EventTypeWarning, v1alpha1.ReasonQuorumAtRisk)
	e.kubectl("patch", "etcdmembers.etcdmember.io", refusedTarget.Name, "--type", "merge", "-p", `{"spec":{"leave":false}}`)

	e.leave(cutOff.Name)
	e.waitFor(cutOff.Name, "Left=True/Removed", removedByUs)
	// Asked through a follower: a client balancing over every member can wait on the cut-off one.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	list, err := followers[0].DirectClient(t).MemberList(ctx)
	cancel()
	if err != nil {
		t.Fatalf("member list through %s: %v", followers[0].Name, err)
	}
	ids := map[uint64]bool{}
	for _, m := range list.Members {
		ids[m.ID] = true
	}
	if len(ids) != 2 || !ids[followers[0].ID()] || !ids[followers[1].ID()] {
		t.Fatalf("etcd members %v, want just the two followers %s and %s", ids, followers[0].Name, followers[1].Name)
	}
	// The remaining two still make a quorum: a write through each of them goes through.
	for _, m := range followers {
		cli := m.DirectClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := cli.Put(ctx, "/e2e/after-one-way-loss", m.Name)
		cancel()
		if err != nil {
			t.Fatalf("write through %s after the removal: %v", m.Name, err)
		}
	}
	// The refused request was withdrawn, not carried out later by a stale decision.
	e.holds(refusedTarget.Name, "still joined", 3*time.Second, joined)
}

// TestLeaveOfEtcdLeaderWhileFollowersCut: the two followers cannot reach each other, while each
// still reaches etcd's leader, so all three serve and the guard sees three healthy voters. Removed,
// the leader would leave two voters unable to elect one. The controller moves etcd leadership to a
// follower first; the other then does not serve through it, so the removal is judged again on that
// cluster and refused with the numbers. etcd keeps its quorum all along, and once the link heals
// the same request completes.
func TestLeaveOfEtcdLeaderWhileFollowersCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, faultProxies: true, separateStorage: true})
	target := e.etcdLeaderBesideAgentLeader()
	var stay []*framework.Member
	for _, m := range e.cluster.Members() {
		if m != target {
			stay = append(stay, m)
		}
	}
	cut := []*framework.PeerLink{e.cluster.PeerLink(t, stay[0], stay[1]), e.cluster.PeerLink(t, stay[1], stay[0])}
	for _, l := range cut {
		l.Blackhole()
	}

	e.leave(target.Name)
	refused := e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	msg := condition(refused, v1alpha1.ConditionLeft).Message
	for _, want := range []string{"would leave 1 healthy voter of 2; quorum of 2 needs 2", "did not serve through it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal message %q lacks %q", msg, want)
		}
	}
	// Asked through etcd's leader: a client balancing over every member can wait on the follower
	// cut from it, which serves no linearizable request.
	leader := e.cluster.Leader(t).DirectClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	list, err := leader.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list through etcd's leader: %v", err)
	}
	if !slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return m.ID == target.ID() }) {
		t.Fatalf("%s was removed from etcd while the members that stay could not reach each other", target.Name)
	}
	// etcd kept its quorum: a write through its leader goes through.
	if _, err := leader.Put(ctx, "/e2e/followers-cut", "v"); err != nil {
		t.Fatalf("write through etcd's leader while the followers' link is cut: %v", err)
	}
	// Leadership went back to the member both followers reach: each serves again, as before the
	// request.
	for _, m := range stay {
		cli := m.DirectClient(t)
		framework.Eventually(t, 10*time.Second, retryEvery, m.Name+" serves a linearizable read while the request waits",
			framework.PerAttempt(time.Second, framework.Succeeds(func(ctx context.Context) error {
				_, err := cli.Get(ctx, "/e2e/followers-cut")
				return err
			})))
	}

	for _, l := range cut {
		l.Heal()
	}
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	for _, m := range stay {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := m.DirectClient(t).Put(ctx, "/e2e/followers-healed", m.Name)
		cancel()
		if err != nil {
			t.Errorf("write through %s after the removal: %v", m.Name, err)
		}
	}
}

// logCount counts the lines of an agent's log that contain text.
func logCount(t *testing.T, path, text string) int {
	t.Helper()
	n := 0
	for _, line := range fileLines(t, path) {
		if strings.Contains(line, text) {
			n++
		}
	}
	return n
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return string(data)
}

// slowWindow is how long TestTimingSensitive/SlowPeerLinks watches the health verdicts under delay.
const slowWindow = 70 * time.Second

// slowPeerLinks: every raft message between the members takes 200 ms ± 50 ms, as between
// control-plane sites over a WAN. A leave still completes, a member re-added as a learner is
// still promoted, and no member that stays changes its Healthy verdict more than once in the
// window: a slow but working link is no reason to call a member unhealthy.
//
// A probe is a linearizable read, which on a follower costs up to two round trips to the etcd
// leader (1s here): the agents run with --probe-timeout sized for that, as docs/agent.md tells
// operators of such clusters. The apiserver stores on an etcd of its own, so that its own
// slowness on the delayed cluster (its Lease renewals time out) stays out of what is measured.
func slowPeerLinks(t *testing.T) {
	e := newEnv(t, envConfig{size: 3, faultProxies: true, separateStorage: true,
		agentArgs: []string{"--probe-interval=5s", "--probe-timeout=3s"}})
	for _, a := range e.cluster.Members() {
		for _, b := range e.cluster.Members() {
			if a != b {
				e.cluster.PeerLink(t, a, b).Delay(200*time.Millisecond, 50*time.Millisecond)
			}
		}
	}
	target := leadingNeither(e)
	var stays []string
	for _, m := range e.cluster.Members() {
		if m != target {
			stays = append(stays, m.Name)
		}
	}
	changes := e.watchHealthy(stays, slowWindow)

	start := time.Now()
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	t.Logf("leave done %s after the patch, with the peer links delayed", time.Since(start).Round(100*time.Millisecond))
	e.cluster.Rejoin(t, target, true)
	e.waitForMember(target.ID(), "promoted", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionPromoted, metav1.ConditionTrue, v1alpha1.ReasonPromoted) && !m.Status.IsLearner
	})
	t.Logf("re-added as a learner and promoted %s after the patch", time.Since(start).Round(100*time.Millisecond))

	for name, seen := range <-changes {
		if len(seen) > 1 {
			t.Errorf("%s changed its Healthy verdict %d times in %s under delay, want at most once: %s", name, len(seen), slowWindow, strings.Join(seen, "; "))
		}
	}
	// A single change must not be a member called unhealthy for good.
	for _, name := range stays {
		if final := healthyStatus(e.get(name)); final != metav1.ConditionTrue {
			t.Errorf("%s ends the window Healthy=%s under delay, want True", name, final)
		}
	}
}

// leadingNeither is a member that leads neither the agents nor etcd. SlowPeerLinks judges a slow
// link, not a hand-over: a leaving etcd leader first hands its leadership over, and over 200 ms
// links that alone cost the followers two probe rounds without a linearizable read (run 17 in
// docs/testing.md), a true verdict. LeaveOfEtcdLeader judges the hand-over.
func leadingNeither(e *env) *framework.Member {
	e.t.Helper()
	agents, etcd := e.leaderAgent(), e.cluster.Leader(e.t)
	for _, m := range e.cluster.Members() {
		if m.Name != agents && m != etcd {
			e.t.Logf("leave target %s: the agents' leader is %s's, etcd's leader %s", m.Name, agents, etcd.Name)
			return m
		}
	}
	e.t.Fatalf("every member leads the agents or etcd (agents %s, etcd %s)", agents, etcd.Name)
	return nil
}

// watchHealthy records, for each named object, every change of its Healthy condition's status
// over window (when it was seen, the new status, reason and message), reading every retryEvery: a
// verdict lasts at least one probe round, far longer. The changes arrive on the channel once the
// window has passed.
func (e *env) watchHealthy(names []string, window time.Duration) <-chan map[string][]string {
	last := map[string]metav1.ConditionStatus{}
	for _, name := range names {
		last[name] = healthyStatus(e.get(name))
	}
	out := make(chan map[string][]string, 1)
	start := time.Now()
	go func() {
		changes := map[string][]string{}
		for end := start.Add(window); time.Now().Before(end); time.Sleep(retryEvery) {
			for _, name := range names {
				var m v1alpha1.EtcdMember
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				err := e.client.Get(ctx, types.NamespacedName{Name: name}, &m)
				cancel()
				if err != nil {
					continue
				}
				if now := healthyStatus(&m); now != last[name] {
					c := condition(&m, v1alpha1.ConditionHealthy)
					changes[name] = append(changes[name], fmt.Sprintf("at %s: %s/%s %q", time.Since(start).Round(100*time.Millisecond), c.Status, c.Reason, c.Message))
					last[name] = now
				}
			}
		}
		out <- changes
	}()
	return out
}

func healthyStatus(m *v1alpha1.EtcdMember) metav1.ConditionStatus {
	if c := condition(m, v1alpha1.ConditionHealthy); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// unreachableAfter is the --remove-unreachable-after of TestLeaderCutFromOneClientURL.
const unreachableAfter = 4 * time.Second

// TestLeaderCutFromOneClientURL: nobody reaches one member's client URL any more (the agents'
// probes among them), while the member is healthy for its raft peers and its own agent. The guard
// counts it unhealthy, as it cannot verify it: a removal that would then leave one healthy voter
// of two is refused with the numbers. But the dead-member policy does not remove it: etcd's
// leader still receives raft messages from it, so it is alive, and only the path to it is broken.
func TestLeaderCutFromOneClientURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, faultProxies: true, agentArgs: []string{
		"--remove-unreachable-after=" + unreachableAfter.String(), "--min-voters=2",
	}})
	leader := e.leaderAgent()
	var others []*framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != leader {
			others = append(others, m)
		}
	}
	cut, target := others[0], others[1]
	cut.ClientLink(t).Blackhole(framework.BothWays)
	e.waitFor(cut.Name, "Healthy=False/Unreachable", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})

	e.leave(target.Name)
	refused := e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	want := "removing " + target.Name + " would leave 1 healthy voter of 2; quorum of 2 needs 2"
	if msg := condition(refused, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, want) {
		t.Errorf("refusal message %q lacks %q", msg, want)
	}
	e.kubectl("patch", "etcdmembers.etcdmember.io", target.Name, "--type", "merge", "-p", `{"spec":{"leave":false}}`)

	// Three times the policy's delay: a member etcd still hears from is never asked to leave.
	e.holds(cut.Name, "not asked to leave, still in etcd", 3*unreachableAfter, func(m *v1alpha1.EtcdMember) bool {
		return !m.Spec.Leave && m.Annotations[v1alpha1.AnnotationLeaveReason] == "" && joined(m)
	})
	if !e.etcdMemberIDs()[cut.ID()] {
		t.Fatalf("member %s was removed from etcd", cut.Name)
	}
	// The operator is told why, and where to look. The voters that hear the cut member are those it
	// exchanges raft messages with: etcd's leader, or, when the cut member leads, every other voter.
	ev := e.waitEvent(cut.Name, corev1.EventTypeWarning, v1alpha1.ReasonUnreachableFromLeader)
	witnesses := []string{e.cluster.Leader(t).Name}
	if witnesses[0] == cut.Name {
		witnesses = []string{leader, target.Name}
	}
	for _, want := range append(witnesses, "still hear", cut.ClientURL()) {
		if !strings.Contains(ev.Note, want) {
			t.Errorf("%s Event %q does not say %q", v1alpha1.ReasonUnreachableFromLeader, ev.Note, want)
		}
	}
}
