package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// fenceBlock is how long the leader is held between its guard and MemberRemove. The test keeps
// the leader frozen for longer, so that the block is over the instant it resumes: the removal
// then races only the fence, not the leader's own discovery (up to a renew deadline) that it
// lost the Lease.
const fenceBlock = 8 * time.Second

// frozenLeaderChangesNothing: the leader clears a leave with the quorum guard and is frozen
// (SIGSTOP, as a GC pause or a VM stall would) before MemberRemove. Meanwhile the operator cancels
// the leave and another agent takes the Lease and records the cancellation. When the old leader
// resumes, its verdict is stale: it must remove nothing.
func frozenLeaderChangesNothing(t *testing.T) {
	e := newEnv(t, envConfig{size: 3})
	// Any agent may lead; each holds the first removal it reaches for fenceBlock.
	for _, a := range e.agents {
		a.Stop(t)
		a.SetEnv(t, failpoint.EnvVar+"="+failpoint.LeaveBeforeRemove+":block="+fenceBlock.String())
	}
	for _, a := range e.agents {
		a.Start(t)
	}
	target := e.notLeading(1)[0]
	e.waitFor(target.Name, "Removable=True", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, "True", v1alpha1.ReasonQuorumKept)
	})

	e.leave(target.Name)
	// The agent that reached the removal is the one to freeze: the Lease may have changed hands
	// since the agents started (a renewal late on a loaded machine), so it is found by its log,
	// not by the Lease read before the leave.
	old := e.agentLogging(failpoint.BlockingMarker, settle)
	leader := e.agents[old]
	leader.Pause(t)
	frozen := time.Now()
	// Cancelled at once, so the next leader never sees the request.
	e.kubectl("patch", "etcdmembers.etcdmember.io", target.Name, "--type", "merge", "-p", `{"spec":{"leave":false}}`)
	var next string
	err := framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		next = e.leaderAgent()
		return next != old && next != "", nil
	})
	if err != nil {
		t.Fatalf("no other agent took the Lease while %s was frozen", old)
	}
	e.waitFor(target.Name, "the cancellation recorded by the new leader "+next, func(m *v1alpha1.EtcdMember) bool {
		return !m.Spec.Leave && m.Status.ObservedGeneration == m.Generation
	})
	time.Sleep(time.Until(frozen.Add(fenceBlock + time.Second)))
	leader.Resume(t)

	e.holds(target.Name, "still a member after the frozen leader resumed", 5*time.Second, func(m *v1alpha1.EtcdMember) bool {
		return joined(m) && condition(m, v1alpha1.ConditionLeft) == nil
	})
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("the frozen leader %s removed %s after it resumed, although the leave was cancelled and %s leads", old, target.Name, next)
	}
	// The fence, not luck, stopped it: the old leader reached the change and gave it up.
	waitLog(t, leader.LogFile(), "Membership change given up", settle)
	// Its term ended on the lost Lease, which it says as such, not as an error with a stack trace.
	waitLog(t, leader.LogFile(), "Leadership term ended: the leader Lease was not renewed in time", settle)
}

// agentLogging waits until one agent's log has the text and returns that agent's name.
func (e *env) agentLogging(text string, timeout time.Duration) string {
	e.t.Helper()
	var found string
	err := framework.Poll(timeout, retryEvery, func(context.Context) (bool, error) {
		var err error
		found, err = e.agentWhoseLogHas(text)
		return found != "", err
	})
	if err != nil {
		e.t.Fatalf("no agent's log says %q after %s: %v", text, timeout, err)
	}
	return found
}

// waitLog waits until the log file has the text.
func waitLog(t *testing.T, path, text string, timeout time.Duration) {
	t.Helper()
	err := framework.Poll(timeout, retryEvery, func(context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		return strings.Contains(string(data), text), nil
	})
	if err != nil {
		t.Fatalf("%s does not say %q after %s", path, text, timeout)
	}
}
