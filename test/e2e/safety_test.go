package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

func leftReason(reason string) func(*v1alpha1.EtcdMember) bool {
	return func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, reason)
	}
}

// nonLeaders returns the members whose agent does not lead, in order.
func nonLeaders(e *env) []*framework.Member {
	leader := e.leaderAgent()
	var out []*framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != leader {
			out = append(out, m)
		}
	}
	return out
}

// refusedLeave kills one non-leader member and asks another to leave, which the quorum guard
// refuses: 1 healthy voter of 2 would remain.
func refusedLeave(e *env) (dead, target *framework.Member, refused *v1alpha1.EtcdMember) {
	e.t.Helper()
	others := nonLeaders(e)
	dead, target = others[0], others[1]
	dead.Kill(e.t)
	e.leave(target.Name)
	refused = e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	return dead, target, refused
}

// TestQuorumGuardRefusesThenAllows: with one of three members dead, removing a healthy one would
// leave 1 healthy voter of 2. The refusal carries the numbers and an Event, and the request goes
// through by itself once the dead member is back.
func TestQuorumGuardRefusesThenAllows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	dead, target, obj := refusedLeave(e)
	want := "removing " + target.Name + " would leave 1 healthy voter of 2; quorum of 2 needs 2"
	if msg := condition(obj, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, want) {
		t.Errorf("refusal message %q lacks %q", msg, want)
	}
	e.waitEvent(target.Name, corev1.EventTypeWarning, v1alpha1.ReasonQuorumAtRisk)
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("refused member was removed")
	}
	// A new term, which remembers nothing of the last, refuses again without saying it again.
	e.restartLeaderUntil(`etcdmember_guard_refusals_total{reason="QuorumAtRisk"}`, 2)
	if n := len(e.eventsOf(target.Name, v1alpha1.ReasonQuorumAtRisk)); n != 1 {
		t.Errorf("%d QuorumAtRisk Events for one refusal re-checked across a leader change, want 1", n)
	}

	dead.Start(t)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
}

// restartLeaderUntil restarts the leading agent, so that a term with none of the last one's memory
// takes over, and waits until one agent's counter series has grown by n since: the new term has
// evaluated the request again.
func (e *env) restartLeaderUntil(series string, n float64) {
	e.t.Helper()
	e.agents[e.leaderAgent()].Restart(e.t)
	before := e.seriesByAgent(series)
	var last map[string]float64
	err := framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		last = e.seriesByAgent(series)
		for name, v := range last {
			if v >= before[name]+n {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("after the leading agent's restart no agent's %s grew by %g: from %v to %v", series, n, before, last)
	}
}

// seriesByAgent reads one series from every running agent's /metrics; an agent without it has 0.
func (e *env) seriesByAgent(series string) map[string]float64 {
	e.t.Helper()
	out := map[string]float64{}
	for name, a := range e.agents {
		if !a.Running() {
			continue
		}
		_, body := httpGet(e.t, a.MetricsURL())
		out[name], _ = seriesValue(body, series)
	}
	return out
}

// TestAgentRestartKeepsPendingLeave: k0s issue 8141. An agent restarted while a leave of its own
// member is pending must not clear it.
func TestAgentRestartKeepsPendingLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	dead, target, _ := refusedLeave(e)

	e.agents[target.Name].Restart(t)
	// Ready means the restarted agent has synced its object once; watch a few more syncs.
	e.holds(target.Name, "spec.leave still set", 3*time.Second, func(m *v1alpha1.EtcdMember) bool { return m.Spec.Leave })
	dead.Start(t)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
}

// TestDeadMemberCanLeave: removing the dead member of an otherwise healthy cluster is allowed.
func TestDeadMemberCanLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	dead := nonLeaders(e)[0]
	e.agents[dead.Name].Kill(t)
	dead.Kill(t)
	e.leave(dead.Name)
	e.waitFor(dead.Name, "Left=True/Removed", removedByUs)
}

// TestFailedRemovalReportsEtcdError: with the quorum guard skipped by force, etcd's own check
// refuses; the condition says so in a stable message, the Warning Event carries etcd's error, and
// the removal is retried until it succeeds once the cluster is healthy again.
func TestFailedRemovalReportsEtcdError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	others := nonLeaders(e)
	dead, target := others[0], others[1]
	dead.Kill(t)
	e.kubectl("annotate", "etcdmembers.etcdmember.io", target.Name, v1alpha1.AnnotationForceLeave+"=true")
	e.leave(target.Name)

	obj := e.waitFor(target.Name, "Left=False/EtcdError", leftReason(v1alpha1.ReasonEtcdError))
	if msg := condition(obj, v1alpha1.ConditionLeft).Message; strings.Contains(msg, "unhealthy cluster") || !strings.Contains(msg, "EtcdError Event") {
		t.Errorf("condition message %q: want a stable text pointing to the Event, without etcd's error", msg)
	}
	if ev := e.waitEvent(target.Name, corev1.EventTypeWarning, v1alpha1.ReasonEtcdError); !strings.Contains(ev.Note, "unhealthy cluster") {
		t.Errorf("EtcdError Event %q does not carry etcd's error", ev.Note)
	}
	e.waitEvent(target.Name, corev1.EventTypeWarning, v1alpha1.ReasonForced)
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("member removed although etcd refused")
	}
	// Retried a few times, then by a new term with none of the last one's memory, before the
	// cluster heals: ForcedLeave is still said once per request.
	const removeErrors = `etcdmember_etcd_errors_total{method="MemberRemove"}`
	waitMetric(t, e.agents[e.leaderAgent()], removeErrors, func(v float64) bool { return v >= 3 })
	e.restartLeaderUntil(removeErrors, 2)
	dead.Start(t)
	obj = e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	if n := len(e.eventsOf(target.Name, v1alpha1.ReasonForced)); n != 1 {
		t.Errorf("%d ForcedLeave Events for one request retried at least 3 times and again after a leader change, want 1", n)
	}
	if c := condition(obj, v1alpha1.ConditionGuardSkipped); c == nil || c.Reason != v1alpha1.ReasonForced || c.ObservedGeneration != obj.Generation {
		t.Errorf("GuardSkipped = %+v, want True/ForcedLeave for the request's generation %d", c, obj.Generation)
	}
}

// TestTwoLeavesOnThreeMembers: membership changes are serialized and each is judged after the
// previous one: 3 -> 2 -> 1 both pass (see shared/CLARIFICATIONS.md), and the third member stays.
func TestTwoLeavesOnThreeMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	others := nonLeaders(e)
	e.kubectl("patch", "etcdmembers.etcdmember.io", others[0].Name, others[1].Name, "--type", "merge", "-p", `{"spec":{"leave":true}}`)
	for _, m := range others {
		e.waitFor(m.Name, "Left=True/Removed", removedByUs)
	}
	ids := e.etcdMemberIDs()
	if len(ids) != 1 || !ids[e.cluster.Member(e.leaderAgent()).ID()] {
		t.Fatalf("want only the leader's member left, etcd has %v", ids)
	}
}

// TestSerializedLeavesJudgedAfterEachChange: four voters, one dead, two healthy members asked to
// leave at once. The first leaves 2 healthy of 3 and passes; judged afterwards, the second would
// leave 1 healthy of 2 and is refused. Judged on the old snapshot both would pass and the cluster
// would lose quorum.
func TestSerializedLeavesJudgedAfterEachChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 4})
	others := nonLeaders(e)
	dead, a, b := others[0], others[1], others[2]
	e.agents[dead.Name].Kill(t)
	dead.Kill(t)
	e.kubectl("patch", "etcdmembers.etcdmember.io", a.Name, b.Name, "--type", "merge", "-p", `{"spec":{"leave":true}}`)

	var removed, refused []string
	// A timeout leaves fewer than two outcomes, which the check below reports.
	_ = framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		removed, refused = nil, nil
		for _, m := range []*framework.Member{a, b} {
			obj := e.get(m.Name)
			switch {
			case removedByUs(obj):
				removed = append(removed, m.Name)
			case leftReason(v1alpha1.ReasonQuorumAtRisk)(obj):
				refused = append(refused, m.Name)
			}
		}
		return len(removed)+len(refused) >= 2, nil
	})
	if len(removed) != 1 || len(refused) != 1 {
		t.Fatalf("want one removed and one refused, got removed=%v refused=%v", removed, refused)
	}
	msg := condition(e.get(refused[0]), v1alpha1.ConditionLeft).Message
	if want := "would leave 1 healthy voter of 2; quorum of 2 needs 2"; !strings.Contains(msg, want) {
		t.Errorf("refusal %q lacks %q", msg, want)
	}
	if got := len(e.etcdMemberIDs()); got != 3 {
		t.Fatalf("etcd has %d members, want 3", got)
	}
}

// leaveOfEtcdLeader: leadership moves to a healthy voter before the etcd leader is removed,
// so the cluster keeps committing writes throughout instead of going without a leader for an
// election timeout. The evidence is the longest stretch without a successful write: removing the
// leader without the move leaves the others waiting at least etcd's election timeout (1 s) before
// they elect a new one. A single write may still be lost to the transfer itself (etcd drops
// proposals that reach the old leader while it hands over); that is etcd's, and short.
func leaveOfEtcdLeader(t *testing.T) {
	const electionTimeout = time.Second
	e := newEnv(t, envConfig{size: 3})
	etcdLeader := e.etcdLeaderBesideAgentLeader()

	// The writer talks to a member that stays: connections to the removed member itself drop
	// with it, which is not what this test is about. Each write has a short timeout so that a
	// lost one does not hide the others.
	cli := otherThan(e, etcdLeader.Name).Client(t)
	stop := make(chan struct{})
	type outcome struct {
		at  time.Time
		err error
	}
	outcomes := make(chan []outcome, 1)
	go func() {
		var all []outcome
		defer func() { outcomes <- all }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), electionTimeout/4)
			_, err := cli.Put(ctx, "e2e/leader-leave", time.Now().String())
			cancel()
			all = append(all, outcome{time.Now(), err})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	e.leave(etcdLeader.Name)
	e.waitFor(etcdLeader.Name, "Left=True/Removed", removedByUs)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	all := <-outcomes
	var (
		failed  int
		last    time.Time
		longest time.Duration
	)
	for _, o := range all {
		if o.err != nil {
			failed++
			continue
		}
		if !last.IsZero() && o.at.Sub(last) > longest {
			longest = o.at.Sub(last)
		}
		last = o.at
	}
	t.Logf("%d writes, %d failed, longest stretch without a successful write %s", len(all), failed, longest)
	if len(all)-failed < 10 {
		t.Fatalf("only %d of %d writes succeeded", len(all)-failed, len(all))
	}
	if longest >= electionTimeout {
		t.Errorf("no write succeeded for %s during the leader's removal: an election's worth (%s), as if leadership had not been moved", longest, electionTimeout)
	}
	if now := e.cluster.Leader(t); now == etcdLeader {
		t.Fatalf("the removed member still leads")
	}
	if !e.agentLogsContain("Moving etcd leadership away from the leaving member") {
		t.Errorf("no agent logged moving etcd leadership before the removal")
	}
}

// etcdLeaderBesideAgentLeader returns etcd's leader, after moving etcd leadership away from the
// leading agent's member if it had it: the leading agent hands its own member over instead of
// removing it, and these tests are about a removal of etcd's leader.
func (e *env) etcdLeaderBesideAgentLeader() *framework.Member {
	e.t.Helper()
	agentLeader := e.leaderAgent()
	etcdLeader := e.cluster.Leader(e.t)
	if etcdLeader.Name != agentLeader {
		return etcdLeader
	}
	to := otherThan(e, agentLeader)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := etcdLeader.Client(e.t).MoveLeader(ctx, to.ID()); err != nil {
		e.t.Fatalf("move etcd leadership from %s to %s: %v", etcdLeader.Name, to.Name, err)
	}
	return e.cluster.Leader(e.t)
}
