package e2e

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	// ridesOutStall is the goal of the shipped defaults: a window in which no apiserver-to-etcd
	// request completes (they all do after it) costs the leader nothing.
	ridesOutStall = 7 * time.Second
	// stallBlock holds the leader between storing a removal's intent and the fence, so that the
	// stall begins while the leave is under way, not before the leader has seen it.
	stallBlock = 2 * time.Second
	// duplicateWindow is how long a second Event of one fact is given to show: a few sync
	// intervals of the tests' agents.
	duplicateWindow = 3 * time.Second
)

// shippedElection is the agent's leader election as shipped (agent.DefaultOptions), over the
// tests' shorter TestAgentArgs, which come first and so lose.
func shippedElection() []string {
	o := agent.DefaultOptions()
	return []string{
		"--leader-elect-lease-duration=" + o.LeaseDuration.String(),
		"--leader-elect-renew-deadline=" + o.RenewDeadline.String(),
		"--leader-elect-retry-period=" + o.RetryPeriod.String(),
	}
}

// leaderRidesOutEtcdStall: with the shipped leader election, every apiserver-to-etcd link
// stalls while a leave is under way. Through ridesOutStall the leader keeps its Lease, with no
// term ended and no other leader, and the leave completes once its calls get through. Through a
// stall longer than the lease, the Lease changes holder at most once, and the pending leave
// removes its member and nothing else, once.
func leaderRidesOutEtcdStall(t *testing.T) {
	// Four members, so that the second leave still leaves quorum and fault tolerance to judge.
	e := newEnv(t, envConfig{size: 4, faultProxies: true, agentArgs: shippedElection()})
	// Any agent may lead; each holds the first removal it reaches for stallBlock.
	for _, a := range e.agents {
		a.Stop(t)
		a.SetEnv(t, failpoint.EnvVar+"="+failpoint.LeaveBeforeRemove+":block="+stallBlock.String())
	}
	for _, a := range e.agents {
		a.Start(t)
	}

	// Within the lease: nothing changes hands.
	leader := e.leaderAgent()
	before := e.lease()
	terms, ended := e.logCount("Became leader"), e.logCount("Leadership term ended")
	target := e.notLeading(1)[0]
	e.stallDuringLeave(leader, target, ridesOutStall)
	if after := e.lease(); ptr.Deref(after.Spec.HolderIdentity, "") != ptr.Deref(before.Spec.HolderIdentity, "") ||
		ptr.Deref(after.Spec.LeaseTransitions, 0) != ptr.Deref(before.Spec.LeaseTransitions, 0) {
		t.Errorf("a %s stall moved the Lease: holder %q, transitions %d before; %q, %d after", ridesOutStall,
			ptr.Deref(before.Spec.HolderIdentity, ""), ptr.Deref(before.Spec.LeaseTransitions, 0),
			ptr.Deref(after.Spec.HolderIdentity, ""), ptr.Deref(after.Spec.LeaseTransitions, 0))
	}
	if n := e.logCount("Became leader"); n != terms {
		t.Errorf("%d leadership terms began during a %s stall, want none", n-terms, ridesOutStall)
	}
	if n := e.logCount("Leadership term ended"); n != ended {
		t.Errorf("%d leadership terms ended during a %s stall, want none", n-ended, ridesOutStall)
	}
	e.removedOnce(target.Name)

	// Longer than the lease: the leader's failpoint fired already, so it restarts (releasing the
	// Lease) and the next leader, whose own is armed, takes the next leave into the stall.
	e.agents[leader].Restart(t)
	var next string
	framework.Eventually(t, settle, pollEvery, "another agent leads after "+leader+"'s restart", func(context.Context) (bool, error) {
		next = e.leaderAgent()
		return next != leader, nil
	})
	// An agent whose member was removed cannot act from it: it must not take the Lease.
	if next == target.Name {
		t.Fatalf("the agent of %s, whose member was removed, took the Lease after %s's restart", target.Name, leader)
	}
	before = e.lease()
	var second *framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != next && m.Name != target.Name {
			second = m
			break
		}
	}
	long := agent.DefaultOptions().LeaseDuration + 3*time.Second
	e.stallDuringLeave(next, second, long)
	after := e.lease()
	if moves := ptr.Deref(after.Spec.LeaseTransitions, 0) - ptr.Deref(before.Spec.LeaseTransitions, 0); moves > 1 {
		t.Errorf("the Lease changed holder %d times through a %s stall, want at most once (%q then %q)", moves, long,
			ptr.Deref(before.Spec.HolderIdentity, ""), ptr.Deref(after.Spec.HolderIdentity, ""))
	}
	e.removedOnce(target.Name)
	e.removedOnce(second.Name)
	ids := e.etcdMemberIDs()
	for _, m := range e.cluster.Members() {
		if gone := m == target || m == second; ids[m.ID()] == gone {
			t.Errorf("member %s in etcd: %v, want %v", m.Name, ids[m.ID()], !gone)
		}
	}
}

// stallDuringLeave asks target to leave, waits until leader holds the removal at its failpoint,
// then stalls every link between the apiserver and etcd for d, and waits for the removal.
func (e *env) stallDuringLeave(leader string, target *framework.Member, d time.Duration) {
	e.t.Helper()
	e.waitFor(target.Name, "Removable=True", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, "True", v1alpha1.ReasonQuorumKept)
	})
	e.leave(target.Name)
	waitLog(e.t, e.agents[leader].LogFile(), failpoint.BlockingMarker, settle)
	links := make([]*framework.Link, 0, len(e.cluster.Members()))
	for _, m := range e.cluster.Members() {
		links = append(links, e.api.EtcdLink(e.t, m))
	}
	for _, l := range links {
		l.Stall(framework.BothWays)
	}
	// The fault itself lasts d: a sleep is its duration, not a wait for a state.
	time.Sleep(d)
	for _, l := range links {
		l.Heal()
	}
	healed := time.Now()
	e.waitFor(target.Name, "Left=True/Removed after the stall", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, "True", v1alpha1.ReasonRemoved)
	})
	e.t.Logf("%s stall with the leave of %s pending: removed %s after the links healed", d, target.Name, time.Since(healed).Round(10*time.Millisecond))
}

// removedOnce checks that the member has left with exactly one Removed Event. The leader writes
// the Event after the status the caller waited for, so it waits for the Event (once it read none
// yet, in a make test run of issue #48), then gives a second one the time to show.
func (e *env) removedOnce(name string) {
	e.t.Helper()
	if _, found := e.awaitEvent(name, func(ev eventsv1.Event) bool { return ev.Reason == v1alpha1.ReasonRemoved }); !found {
		e.t.Errorf("no Removed Event about %s within %s; events: %+v", name, settle, e.events(name))
		return
	}
	_ = framework.Hold(duplicateWindow, pollEvery, func(context.Context) (bool, error) {
		return len(e.eventsOf(name, v1alpha1.ReasonRemoved)) <= 1, nil
	})
	if n := len(e.eventsOf(name, v1alpha1.ReasonRemoved)); n != 1 {
		e.t.Errorf("%d Removed Events about %s, want exactly one", n, name)
	}
}

// lease reads the leader Lease.
func (e *env) lease() *coordinationv1.Lease {
	e.t.Helper()
	var lease *coordinationv1.Lease
	e.retry("get the leader Lease", func(ctx context.Context) error {
		var err error
		lease, err = e.api.Clientset().CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
		return err
	})
	return lease
}

// logCount counts the occurrences of text in every agent's log.
func (e *env) logCount(text string) int {
	e.t.Helper()
	n := 0
	for _, a := range e.agents {
		c, err := a.LogCount(text)
		if err != nil {
			e.t.Fatal(err)
		}
		n += c
	}
	return n
}
