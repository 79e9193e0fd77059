package chaos

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// The health invariant (issue #30): a member the injector has kept down for longer than a bound
// is not shown Healthy=True on its object. TestTimingSensitive/LeadersOwnMemberFails (test/e2e/ownmember_test.go)
// times the same promise for the leading agent's own member, the case the planner aims member
// faults at (step.leadingNode).

// healthTimings returns the health invariant's bound, from the flags the agents run with: two
// probe intervals (the round after the fault may start up to one interval later, and its verdict
// needs the probe timeout) and a lease duration (a reconcile that went to the failed member before
// the round saw it waits out its call there, or the term changes hands meanwhile), the bound of
// TestTimingSensitive/LeadersOwnMemberFails. With the tests' timings (probe interval 2 s, lease 4 s) that is 8 s.
func healthTimings(args []string) (time.Duration, error) {
	probe, err1 := agentDuration(args, "probe-interval", 0)
	lease, err2 := agentDuration(args, "leader-elect-lease-duration", 0)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	if probe == 0 || lease == 0 {
		return 0, fmt.Errorf("the agents' args set no --probe-interval or lease duration: %v", args)
	}
	return 2*probe + lease, nil
}

// healthDeadline is when a member down since down must no longer show Healthy=True at the latest:
// bound after the later of down and the end of the last disruption of the leading agent's term
// plus slack (the Terminating invariant's, nodeTimings): a disruption may hand the Lease to
// another agent, which takes up to slack to act, and its probe rounds then take the bound.
func healthDeadline(down, disrupted time.Time, slack, bound time.Duration) time.Time {
	from := down
	if after := disrupted.Add(slack); !disrupted.IsZero() && after.After(from) {
		from = after
	}
	return from.Add(bound)
}

// noteHolderLocked records the agent the Lease names (holder, if ok: read before the lock). A
// change of holder ends a term, so it is a disruption to the health invariant, even where nothing
// the injector did counts as one: a kill of an etcd member, which that invariant does not count
// (setMember), may stall the apiserver's requests, a Lease renewal among them, past the renew
// deadline. The monitor sees the change only once the next agent holds the Lease, after the gap.
func (r *run) noteHolderLocked(holder int, ok bool) {
	if !ok {
		return
	}
	if r.holderSeen && holder != r.holder {
		r.termDisruptedAt = time.Now()
		r.termDisruption = fmt.Sprintf("the Lease moved from agent %s to %s", nodeName(r.holder), nodeName(holder))
	}
	r.holder, r.holderSeen = holder, true
}

// checkHealthLocked checks, on a read of the objects that started at read, that no object shows
// Healthy=True for a member that has been down since before its deadline (healthDeadline). Down
// is SIGKILLed or SIGSTOPped, the faults that stop a member serving whoever leads etcd: none of
// the network faults here cuts a member off from everything, and whether one cut from a single
// peer serves depends on which member leads etcd at each moment. A frozen member is a disruption
// for as long as it lasts (nodeDisruptionLocked: the apiserver's requests that land on it, the
// leader's status writes among them, wait out a timeout), so only a killed member's deadline
// comes while it is down. The count starts anew each time the injector takes the member down;
// only the member the object records (by ID) is judged, and only while etcd lists it: a removed
// member's object loses its Healthy condition, a re-joined node's records its new member.
func (r *run) checkHealthLocked(objs []v1alpha1.EtcdMember, read time.Time) {
	if r.healthBound == 0 {
		return
	}
	for k := range objs {
		obj := &objs[k]
		id := idOf(obj)
		i := r.w.memberIndex(id)
		if id == 0 || i < 0 || r.w.members[i].Name != obj.Name || (r.member[i] != killed && r.member[i] != paused) || !r.list.has(id) {
			continue
		}
		deadline := healthDeadline(r.downSince[i], r.termDisruptedAt, r.slack, r.healthBound)
		if !read.After(deadline) {
			continue
		}
		if !r.healthJudged[i].Equal(r.downSince[i]) {
			r.healthJudged[i] = r.downSince[i]
			r.c.healthJudged++
		}
		if !status.IsTrue(obj, v1alpha1.ConditionHealthy) {
			continue
		}
		since := "none this run"
		if !r.termDisruptedAt.IsZero() {
			since = fmt.Sprintf("%s at %s", r.termDisruption, r.termDisruptedAt.Sub(r.start).Truncate(100*time.Millisecond))
		}
		lease := "not read yet"
		if r.holderSeen {
			lease = "agent " + nodeName(r.holder)
		}
		c := status.Get(obj, v1alpha1.ConditionHealthy)
		r.violateLocked("healthy "+obj.Status.MemberID, "%s: Healthy=True (since %s: %q) for member %s, %s by the injector since %s, longer than two probe intervals and a lease duration (%s) after the later of that and the slack %s after the last disruption (%s); the Lease last named %s: %s",
			obj.Name, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message, obj.Status.MemberID, faultNames[r.member[i]],
			r.downSince[i].Sub(r.start).Truncate(100*time.Millisecond), r.healthBound, r.slack, since, lease, describe(obj))
	}
}

// TestHealthTimings pins the bound down for the tests' timings, and shows that CHAOS_AGENT_ARGS
// move it.
func TestHealthTimings(t *testing.T) {
	bound, err := healthTimings(nodeArgs)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 8*time.Second {
		t.Errorf("bound %s, want 8s", bound)
	}
	bound, err = healthTimings(append(slices.Clone(nodeArgs), "--probe-interval=5s", "--leader-elect-lease-duration=15s"))
	if err != nil {
		t.Fatal(err)
	}
	if bound != 25*time.Second {
		t.Errorf("probe interval 5s, lease 15s: bound %s, want 25s", bound)
	}
}

// TestHealthDeadline: the bound counts from the member going down, or from the slack after a later
// disruption.
func TestHealthDeadline(t *testing.T) {
	down := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const slack, bound = 17 * time.Second, 8 * time.Second
	for _, tc := range []struct {
		name      string
		disrupted time.Time
		want      time.Time
	}{
		{"no disruption", time.Time{}, down.Add(bound)},
		{"a disruption long before", down.Add(-time.Minute), down.Add(bound)},
		{"a disruption just before", down.Add(-time.Second), down.Add(-time.Second + slack + bound)},
		{"a disruption after", down.Add(time.Minute), down.Add(time.Minute + slack + bound)},
	} {
		if got := healthDeadline(down, tc.disrupted, slack, bound); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
