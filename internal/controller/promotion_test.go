package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

func TestPromoteBackoffDoublesWithinBounds(t *testing.T) {
	r := &MembershipReconciler{}
	var got []time.Duration
	for range 8 {
		got = append(got, r.nextPromoteWait("uid"))
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second, 15 * time.Second, 15 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if r.nextPromoteWait("other") != promoteBackoffMin {
		t.Fatal("back-off is shared between learners")
	}
}

// TestMarkGoneAfterEviction: an agent from before the eviction intent that stopped between
// writing Evicting and the outcome leaves the next leader enough to report the eviction, not an
// unexplained disappearance.
func TestMarkGoneAfterEviction(t *testing.T) {
	m := member(false,
		cond(v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList),
		cond(v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonEvicting))
	r := &MembershipReconciler{Intents: etcdfake.New(etcdfake.Voters(1)...).Intents()}
	by, err := r.whoRemoved(context.Background(), m, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	markGone(m, by)
	if !status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonEvicted) ||
		!status.HasReason(m, v1alpha1.ConditionPromoted, v1alpha1.ReasonStalled) {
		t.Fatalf("after an interrupted eviction: %+v", m.Status.Conditions)
	}
}

func TestVotedElsewhereClosesPromoted(t *testing.T) {
	m := member(false, cond(v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonCatchingUp))
	votedElsewhere(m)
	if !status.HasReason(m, v1alpha1.ConditionPromoted, v1alpha1.ReasonVoter) || !status.IsTrue(m, v1alpha1.ConditionPromoted) {
		t.Fatalf("Promoted = %+v, want True/Voter", status.Get(m, v1alpha1.ConditionPromoted))
	}
	plain := member(false)
	votedElsewhere(plain)
	if status.Get(plain, v1alpha1.ConditionPromoted) != nil {
		t.Fatal("a member that never was a learner got a Promoted condition")
	}
}

// TestLearnerNotStartedWaitsForItsDeadline: a learner without client URLs is neither promoted nor
// evicted before its deadline, and the reconcile comes back at the deadline. No etcd call is made
// on this path, so the reconciler has none.
func TestLearnerNotStartedWaitsForItsDeadline(t *testing.T) {
	r := &MembershipReconciler{LearnerStallTimeout: time.Minute, RecheckInterval: time.Second}
	m := member(false)
	target := etcd.Member{ID: 2, IsLearner: true}
	res, err := actOn(r, m, view{target: target, members: []etcd.Member{{ID: 1}, target}, probes: Probes{}, probed: true})
	if err != nil {
		t.Fatal(err)
	}
	if !status.HasReason(m, v1alpha1.ConditionPromoted, v1alpha1.ReasonNotStarted) {
		t.Fatalf("Promoted = %+v, want NotStarted", status.Get(m, v1alpha1.ConditionPromoted))
	}
	if res.RequeueAfter <= 50*time.Second || res.RequeueAfter > time.Minute {
		t.Fatalf("requeue after %s, want about the stall timeout", res.RequeueAfter)
	}

	// A Stalled condition from an earlier member restarts the clock instead of evicting at once.
	old := member(false, cond(v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonStalled))
	status.Get(old, v1alpha1.ConditionPromoted).LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour))
	if _, err := actOn(r, old, view{target: target, members: []etcd.Member{{ID: 1}, target}, probes: Probes{}, probed: true}); err != nil {
		t.Fatal(err)
	}
	if c := status.Get(old, v1alpha1.ConditionPromoted); c.Reason != v1alpha1.ReasonNotStarted || time.Since(c.LastTransitionTime.Time) > time.Minute {
		t.Fatalf("Promoted after an earlier member's stall = %+v, want NotStarted with a fresh clock", c)
	}
}

// TestUnreachablePolicyHoldsBack: the dead-member policy does not act before the member has been
// unreachable long enough on the leader's clock, below the voter floor, or when the guard would
// refuse. None of these paths writes, so the reconciler has no client.
func TestUnreachablePolicyHoldsBack(t *testing.T) {
	members := []etcd.Member{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}
	probes := probesOf(map[uint64]bool{1: true, 2: true, 3: true})
	// The condition says False since an hour; only the leader's own clock counts.
	unreachable := func() *v1alpha1.EtcdMember {
		m := member(false, cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable))
		status.Get(m, v1alpha1.ConditionHealthy).LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour))
		return m
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	r := &MembershipReconciler{RemoveUnreachableAfter: time.Minute, MinVoters: 3, Clock: clk}
	res, err := actOn(r, unreachable(), view{target: members[3], members: members, probes: probes, probed: true})
	if err != nil || res.RequeueAfter != time.Minute {
		t.Fatalf("first seen unreachable: %+v %v, want a requeue after --remove-unreachable-after", res, err)
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	res, err = actOn(r, unreachable(), view{target: members[3], members: members, probes: probes, probed: true})
	if err != nil || res.RequeueAfter != 50*time.Second {
		t.Fatalf("not yet due: %+v %v, want a requeue at the due time", res, err)
	}

	// Past due: each of these holds back for its own reason.
	due := func(r *MembershipReconciler, probes Probes) *v1alpha1.EtcdMember {
		clk := clocktesting.NewFakePassiveClock(time.Now())
		r.Clock = clk
		m := unreachable()
		if _, err := actOn(r, m, view{target: members[3], members: members, probes: probes, probed: true}); err != nil {
			t.Fatal(err)
		}
		clk.SetTime(clk.Now().Add(time.Hour))
		if _, err := actOn(r, m, view{target: members[3], members: members, probes: probes, probed: true}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := due(&MembershipReconciler{RemoveUnreachableAfter: time.Minute, MinVoters: 4}, probes); m.Spec.Leave {
		t.Fatal("asked to leave below --min-voters")
	}
	// Only member 1 answers: the three that would remain have one healthy voter, short of 2.
	if m := due(&MembershipReconciler{RemoveUnreachableAfter: time.Minute, MinVoters: 3}, probesOf(map[uint64]bool{1: true})); m.Spec.Leave {
		t.Fatal("asked to leave although the quorum guard would refuse")
	}
	if m := due(&MembershipReconciler{MinVoters: 3}, probes); m.Spec.Leave {
		t.Fatal("asked to leave with the policy off")
	}
}

// TestUnreachablePolicyRespectsCancel: an operator who sets spec.leave back to false after the
// policy asked is not overruled for the same outage.
func TestUnreachablePolicyRespectsCancel(t *testing.T) {
	members := []etcd.Member{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}
	probes := probesOf(map[uint64]bool{1: true, 2: true, 3: true})
	m := member(false, cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable))
	since := time.Now().Add(-time.Hour).Truncate(time.Second)
	status.Get(m, v1alpha1.ConditionHealthy).LastTransitionTime = metav1.NewTime(since)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	r := &MembershipReconciler{RemoveUnreachableAfter: time.Minute, MinVoters: 3, Clock: clk}
	m.Annotations = map[string]string{v1alpha1.AnnotationLeaveReason: fmt.Sprintf(
		"unhealthy since %s and unreachable for longer than --remove-unreachable-after %s", since.UTC().Format(time.RFC3339), time.Minute)}
	if _, err := actOn(r, m, view{target: members[3], members: members, probes: probes, probed: true}); err != nil || m.Spec.Leave {
		t.Fatalf("first sighting: leave=%v err=%v", m.Spec.Leave, err)
	}
	clk.SetTime(clk.Now().Add(time.Hour))
	if _, err := actOn(r, m, view{target: members[3], members: members, probes: probes, probed: true}); err != nil || m.Spec.Leave {
		t.Fatalf("cancelled request asked again: leave=%v err=%v", m.Spec.Leave, err)
	}
}
