package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// The in-process tier: the reconciler's decisions on a modelled cluster, one table per concern.
// What these prove about real etcd, test/e2e proves again on real processes; these cover every
// refusal reason and crash point, which the e2e tier cannot afford to.

// TestLeaveOutcomes: every way a leave request ends, with what it did to the cluster.
func TestLeaveOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []etcdfake.Member
		setup   func(w *world)
		leave   string
		// reconciles of leave before the check; 1 unless a retry is part of the case.
		rounds int
		left   metav1.ConditionStatus
		reason string
		// message, when set, must be part of the Left condition's message.
		message string
		removed []uint64
		changes []etcdfake.Change
		// intent: an intent is still stored afterwards.
		intent bool
	}{
		{name: "healthy voter removed", members: etcdfake.Voters(3), leave: "node-2",
			left: metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true},
		{name: "a peer down: quorum at risk", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true }) },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk, message: "would leave 1 healthy voter of 2"},
		{name: "a peer answered by another member counts unhealthy", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.Set(3, func(m *etcdfake.Member) { m.AnsweredBy = 1 }) },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk, message: "was answered by member 1"},
		{name: "a peer without a leader counts unhealthy", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.Set(3, func(m *etcdfake.Member) { m.NoLeader = true }) },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk},
		{name: "last voter", members: etcdfake.Voters(1), leave: "node-1",
			left: metav1.ConditionFalse, reason: v1alpha1.ReasonLastVoter},
		{name: "forced past the guard, etcd's own check still refuses", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) {
				w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true })
				w.edit("node-2", func(m *v1alpha1.EtcdMember) {
					m.Annotations = map[string]string{v1alpha1.AnnotationForceLeave: "true"}
				})
			},
			left: metav1.ConditionFalse, reason: v1alpha1.ReasonEtcdError, intent: true},
		// The guard's probe finds every peer serving; etcd does not count one yet (kubeadm's
		// upgrade of its etcd, seen in the kubeadm tier). Nothing removed, no intent left behind.
		{name: "etcd's own check refuses while a peer has just come back", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.Set(3, func(m *etcdfake.Member) { m.Recent = true }) },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk, message: "Refused by etcd"},
		{name: "forced removal of a healthy cluster's voter", members: etcdfake.Voters(2), leave: "node-2",
			setup: func(w *world) {
				w.etcd.Set(1, func(m *etcdfake.Member) { m.NoLeader = false })
				w.edit("node-2", func(m *v1alpha1.EtcdMember) {
					m.Annotations = map[string]string{v1alpha1.AnnotationForceLeave: "true"}
				})
			},
			left: metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true},
		{name: "forced last voter is still refused", members: etcdfake.Voters(1), leave: "node-1",
			setup: func(w *world) {
				w.edit("node-1", func(m *v1alpha1.EtcdMember) {
					m.Annotations = map[string]string{v1alpha1.AnnotationForceLeave: "true"}
				})
			},
			left: metav1.ConditionFalse, reason: v1alpha1.ReasonLastVoter},
		{name: "the leader's own member is handed over", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.term.local = 2 },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonHandingOver},
		{name: "no other agent to hand over to", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.term.local, w.term.canHand = 2, false },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonNoOtherAgent},
		{name: "the etcd leader hands etcd leadership on first", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.SetLeader(2) },
			left:  metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true,
			changes: []etcdfake.Change{{Op: etcdfake.OpMoveLeader, ID: 2, To: 1}, {Op: etcdfake.OpMemberRemove, ID: 2}}},
		// Both followers serve through node-2 but cannot reach each other: removed, node-2 would
		// leave two voters unable to elect a leader. Judged again once node-1 leads, node-3 does
		// not serve through it, so nothing is removed and etcd keeps its quorum.
		{name: "the etcd leader, while the other two cannot reach each other", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.SetLeader(2); w.etcd.Cut(1, 3, true) },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk,
			message: "would leave 1 healthy voter of 2; quorum of 2 needs 2, once etcd leadership moved to node-1: node-3 (3) did not serve through it",
			// Handed back: node-2 is heard by both, so all three serve again while the request waits.
			changes: []etcdfake.Change{{Op: etcdfake.OpMoveLeader, ID: 2, To: 1}, {Op: etcdfake.OpMoveLeader, ID: 1, To: 2}}},
		{name: "the etcd leader, when moving leadership to one voter fails", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.SetLeader(2); w.etcd.Fail(etcdfake.OpMoveLeader, etcdfake.ErrInjected) },
			left:  metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true,
			changes: []etcdfake.Change{{Op: etcdfake.OpMoveLeader, ID: 2, To: 3}, {Op: etcdfake.OpMemberRemove, ID: 2}}},
		{name: "the etcd leader, when moving leadership fails", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) {
				w.etcd.SetLeader(2)
				w.etcd.Fail(etcdfake.OpMoveLeader, etcdfake.ErrInjected)
				w.etcd.Fail(etcdfake.OpMoveLeader, etcdfake.ErrInjected)
			},
			left: metav1.ConditionFalse, reason: v1alpha1.ReasonEtcdError, message: "moving leadership to node-1 and to node-3 failed, so it is not removed"},
		{name: "a forced leave of the etcd leader, when moving leadership fails", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) {
				w.etcd.SetLeader(2)
				w.etcd.Fail(etcdfake.OpMoveLeader, etcdfake.ErrInjected)
				w.etcd.Fail(etcdfake.OpMoveLeader, etcdfake.ErrInjected)
				w.edit("node-2", func(m *v1alpha1.EtcdMember) {
					m.Annotations = map[string]string{v1alpha1.AnnotationForceLeave: "true"}
				})
			},
			left: metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true},
		{name: "a learner needs no guard", members: append(etcdfake.Voters(1), etcdfake.Learner(2, false)), leave: "node-2",
			left: metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true},
		{name: "no member ID recorded", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) {
				m := w.get("node-2")
				m.Status.MemberID = ""
				if err := w.api.Status().Update(t.Context(), m); err != nil {
					t.Fatal(err)
				}
			},
			left: metav1.ConditionFalse, reason: v1alpha1.ReasonNoMemberID},
		{name: "spec.memberID names an earlier member", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.MemberID = "99" }) },
			left:  metav1.ConditionFalse, reason: v1alpha1.ReasonMemberMismatch},
		{name: "already gone from etcd", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) {
				if err := w.etcdctlRemove(2); err != nil {
					t.Fatal(err)
				}
			},
			// The head start stored an intent before the fresh list showed the member gone. It
			// can mislabel nothing: etcd never gives a removed member's ID to another, and it
			// expires with its lease.
			left: metav1.ConditionTrue, reason: v1alpha1.ReasonNotFound, removed: []uint64{2}, intent: true},
		{name: "etcd fails the removal, the retry succeeds", members: etcdfake.Voters(3), leave: "node-2", rounds: 2,
			setup: func(w *world) { w.etcd.Fail(etcdfake.OpMemberRemove, etcdfake.ErrInjected) },
			left:  metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true},
		// The member being removed answers for its own removal and stops as it applies it.
		{name: "the removal's answer is lost, the member list shows it done", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.LoseAnswer(etcdfake.OpMemberRemove) },
			left:  metav1.ConditionTrue, reason: v1alpha1.ReasonRemoved, removed: []uint64{2}, intent: true},
		{name: "the intent cannot be stored: nothing is removed", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.etcd.Fail(etcdfake.OpIntentPut, etcdfake.ErrInjected) }},
		// A leader whose term ended writes nothing more, not even the intent's withdrawal: the next
		// leader finds the request still pending and goes ahead.
		{name: "the term is lost: nothing is removed or written", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) { w.term.lost = errTermLost }, intent: true},
		// The head start's fence reads race with a cancel this close to the change; a reconcile
		// that stalled past their freshness (the fake clock moved on) reads again, and that read
		// sees the cancel.
		{name: "cancelled between the decision and the change", members: etcdfake.Voters(3), leave: "node-2",
			setup: func(w *world) {
				w.etcd.Hook(etcdfake.OpIntentPut, etcdfake.After, func() {
					w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = false })
					w.clock.SetTime(w.clock.Now().Add(2 * fenceFreshness))
				})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.members...)
			if tc.setup != nil {
				tc.setup(w)
			}
			w.askLeave(tc.leave)
			for range max(tc.rounds, 1) {
				_, _ = w.reconcile(tc.leave)
			}
			s, reason := w.condition(tc.leave, v1alpha1.ConditionLeft)
			if s != tc.left || reason != tc.reason {
				t.Errorf("Left = %q/%q, want %q/%q (%+v)", s, reason, tc.left, tc.reason, status.Get(w.get(tc.leave), v1alpha1.ConditionLeft))
			}
			if c := status.Get(w.get(tc.leave), v1alpha1.ConditionLeft); tc.message != "" && (c == nil || !strings.Contains(c.Message, tc.message)) {
				t.Errorf("Left message %+v does not say %q", c, tc.message)
			}
			if got := w.removals(); !slices.Equal(got, tc.removed) {
				t.Errorf("removed %v, want %v", got, tc.removed)
			}
			if tc.changes != nil && !slices.EqualFunc(w.etcd.Changes(), tc.changes, sameChange) {
				t.Errorf("changes %+v, want %+v", w.etcd.Changes(), tc.changes)
			}
			id := uint64(0)
			for _, m := range tc.members {
				if m.Name == tc.leave {
					id = m.ID
				}
			}
			if _, stored := w.etcd.Intent(id); stored != tc.intent {
				t.Errorf("intent stored afterwards: %t, want %t", stored, tc.intent)
			}
		})
	}
}

// TestEtcdRefusalHeld: a removal the guard allowed and etcd's own check refused, because a peer
// has just come back, waits as a refusal: QuorumAtRisk with a Warning Event, no error for the
// controller's error log, no intent left, a re-check after the interval. Once etcd counts the peer,
// the re-check removes.
func TestEtcdRefusalHeld(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.etcd.Set(3, func(m *etcdfake.Member) { m.Recent = true })
	w.askLeave("node-2")
	res, err := w.reconcile("node-2")
	if err != nil || res.RequeueAfter != 5*time.Second {
		t.Fatalf("reconcile = %+v, %v; want a re-check after 5s and no error", res, err)
	}
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "refused by etcd")
	if ev := w.events("node-2", v1alpha1.ReasonQuorumAtRisk); len(ev) != 1 {
		t.Errorf("QuorumAtRisk Events %v, want one", ev)
	}
	if _, stored := w.etcd.Intent(2); stored {
		t.Errorf("an intent is stored for a removal etcd refused")
	}
	if got := w.removals(); len(got) != 0 {
		t.Fatalf("removed %v although etcd refused", got)
	}

	w.etcd.Set(3, func(m *etcdfake.Member) { m.Recent = false })
	if _, err := w.reconcile("node-2"); err != nil {
		t.Fatal(err)
	}
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "removed once etcd counts the peer")
}

// TestFenceReadsOverlapTheLeave: on the fast path the fence's reads are the head start's, made
// alongside the member list: one Lease check per leave, not one more round trip before the
// removal.
func TestFenceReadsOverlapTheLeave(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.askLeave("node-2")
	w.mustReconcile("node-2")
	if got := w.removals(); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("removed %v, want member 2", got)
	}
	if w.term.checks != 1 {
		t.Errorf("%d Lease checks for one leave, want 1", w.term.checks)
	}

	// A reconcile that stalled past the reads' freshness reads again.
	w = newWorld(t, etcdfake.Voters(3)...)
	w.askLeave("node-2")
	w.etcd.Hook(etcdfake.OpIntentPut, etcdfake.After, func() { w.clock.SetTime(w.clock.Now().Add(time.Second)) })
	w.mustReconcile("node-2")
	if w.term.checks != 2 {
		t.Errorf("%d Lease checks after a stall, want 2", w.term.checks)
	}
}

func sameChange(a, b etcdfake.Change) bool {
	return a.Op == b.Op && a.ID == b.ID && a.To == b.To && slices.Equal(a.PeerURLs, b.PeerURLs)
}

// TestCrashPoints: the agent dies at each point of a leave; a new leader takes over and the leave
// ends exactly once, with the report it deserves.
func TestCrashPoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   etcdfake.Op
		when etcdfake.When
		// leader makes node-2 lead etcd, so the leave moves leadership first.
		leader bool
	}{
		{"before the intent", etcdfake.OpIntentPut, etcdfake.Before, false},
		{"after the intent", etcdfake.OpIntentPut, etcdfake.After, false},
		{"after moving etcd leadership", etcdfake.OpMoveLeader, etcdfake.After, true},
		{"right before the removal", etcdfake.OpMemberRemove, etcdfake.Before, false},
		{"after the removal, before the status write", etcdfake.OpMemberRemove, etcdfake.After, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, etcdfake.Voters(3)...)
			if tc.leader {
				w.etcd.SetLeader(2)
			}
			w.askLeave("node-2")
			w.crashThenNewTerm("node-2", tc.op, tc.when)
			w.mustReconcile("node-2")
			w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "after the new leader")
			w.expect("node-2", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, "after the new leader")
			if got := w.removals(); !slices.Equal(got, []uint64{2}) {
				t.Errorf("removed %v, want member 2 exactly once", got)
			}
		})
	}
}

// TestCancelAfterCrashLeavesNoIntent: a leader dies after storing the intent, the operator
// cancels, and the member is later removed by hand: that removal is not reported as ours.
func TestCancelAfterCrashLeavesNoIntent(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.askLeave("node-2")
	w.crashThenNewTerm("node-2", etcdfake.OpIntentPut, etcdfake.After)
	if _, stored := w.etcd.Intent(2); !stored {
		t.Fatal("the crash point was passed without the intent stored")
	}
	w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = false })
	w.mustReconcile("node-2")
	if err := w.etcdctlRemove(2); err != nil {
		t.Fatal(err)
	}
	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound, "the removal by hand was not ours")
}

// TestLeavesJudgedOneAfterAnother is the clarified serialization rule: four voters with one dead,
// two healthy members asked to leave at once; the second is judged on the cluster the first left.
func TestLeavesJudgedOneAfterAnother(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(4)...)
	w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true })
	w.askLeave("node-2")
	w.askLeave("node-3")
	w.mustReconcile("node-2")
	w.mustReconcile("node-3")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "first leave")
	w.expect("node-3", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "second leave")
	if got := w.removals(); !slices.Equal(got, []uint64{2}) {
		t.Errorf("removed %v, want only member 2", got)
	}
}

// TestLearnerOutcomes: promotion and eviction, on the leader's clock.
func TestLearnerOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		learner etcdfake.Member
		setup   func(w *world)
		// wait advances the clock between the first and the second reconcile.
		wait     time.Duration
		reason   string
		promoted metav1.ConditionStatus
		changes  []etcdfake.Change
	}{
		{name: "caught up: promoted", learner: etcdfake.Learner(4, true),
			promoted: metav1.ConditionTrue, reason: v1alpha1.ReasonPromoted,
			changes: []etcdfake.Change{{Op: etcdfake.OpMemberPromote, ID: 4}}},
		{name: "etcd says not ready: catching up", learner: etcdfake.Learner(4, false),
			promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonCatchingUp},
		{name: "the learner does not answer: promotion would raise the quorum for nothing", learner: etcdfake.Learner(4, true),
			setup:    func(w *world) { w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true }) },
			promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk},
		{name: "voters counted unhealthy: promotion would risk quorum", learner: etcdfake.Learner(4, true),
			setup: func(w *world) {
				w.etcd.Set(2, func(m *etcdfake.Member) { m.Down = true })
				w.etcd.Set(3, func(m *etcdfake.Member) { m.AnsweredBy = 1 })
			},
			promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonQuorumAtRisk},
		{name: "etcd fails the promotion", learner: etcdfake.Learner(4, true),
			setup:    func(w *world) { w.etcd.Fail(etcdfake.OpMemberPromote, etcdfake.ErrInjected) },
			promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonEtcdError},
		{name: "not started", learner: func() etcdfake.Member {
			m := etcdfake.Learner(4, false)
			m.ClientURLs = nil
			return m
		}(), promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonNotStarted},
		{name: "stalled past --learner-stall-timeout: evicted", learner: etcdfake.Learner(4, false),
			wait: 11 * time.Minute, promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonStalled,
			changes: []etcdfake.Change{{Op: etcdfake.OpMemberRemove, ID: 4}}},
		{name: "progressing for longer than the stall timeout: kept", learner: etcdfake.Learner(4, false),
			setup: func(w *world) {
				w.clock.SetTime(w.clock.Now().Add(9 * time.Minute))
				w.etcd.Set(4, func(m *etcdfake.Member) { m.RaftIndex = 50 })
				w.mustReconcile("node-4")
			},
			wait: 9 * time.Minute, promoted: metav1.ConditionFalse, reason: v1alpha1.ReasonCatchingUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Ready only once the case is set up: the world's first reconcile would promote it.
			l := tc.learner
			l.Ready = false
			w := newWorld(t, append(etcdfake.Voters(3), l)...)
			if tc.setup != nil {
				tc.setup(w)
			}
			w.etcd.Set(4, func(m *etcdfake.Member) { m.Ready = tc.learner.Ready })
			// A failed promotion is the reconcile's error, retried with back-off.
			_, _ = w.reconcile("node-4")
			if tc.wait > 0 {
				w.clock.SetTime(w.clock.Now().Add(tc.wait))
				w.mustReconcile("node-4")
			}
			if s, reason := w.condition("node-4", v1alpha1.ConditionPromoted); s != tc.promoted || reason != tc.reason {
				t.Errorf("Promoted = %s/%s, want %s/%s", s, reason, tc.promoted, tc.reason)
			}
			if !slices.EqualFunc(w.etcd.Changes(), tc.changes, sameChange) {
				t.Errorf("changes %+v, want %+v", w.etcd.Changes(), tc.changes)
			}
		})
	}
}

// TestEvictionCrash: the leader dies after evicting a stalled learner; the next one reports the
// eviction, not a removal by somebody else.
func TestEvictionCrash(t *testing.T) {
	w := newWorld(t, append(etcdfake.Voters(3), etcdfake.Learner(4, false))...)
	w.clock.SetTime(w.clock.Now().Add(11 * time.Minute))
	w.crashThenNewTerm("node-4", etcdfake.OpMemberRemove, etcdfake.After)
	if got := w.removals(); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("removed %v before the crash, want the learner", got)
	}
	w.mustReconcile("node-4")
	w.expect("node-4", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonEvicted, "after the new leader")
	if got := w.removals(); !slices.Equal(got, []uint64{4}) {
		t.Errorf("removed %v, want the learner once", got)
	}
}

// TestPromotionCrash: the leader dies after etcd promoted the learner; the next one records a
// voter.
func TestPromotionCrash(t *testing.T) {
	w := newWorld(t, append(etcdfake.Voters(3), etcdfake.Learner(4, false))...)
	w.etcd.Set(4, func(m *etcdfake.Member) { m.Ready = true })
	w.crashThenNewTerm("node-4", etcdfake.OpMemberPromote, etcdfake.After)
	if w.etcd.IsLearner(4) {
		t.Fatal("the crash point was passed without the promotion")
	}
	w.mustReconcile("node-4")
	m := w.get("node-4")
	if m.Status.IsLearner || !status.IsTrue(m, v1alpha1.ConditionPromoted) {
		t.Errorf("after the new leader: isLearner=%t, Promoted=%+v; want a voter", m.Status.IsLearner, status.Get(m, v1alpha1.ConditionPromoted))
	}
}

// TestUnreachablePolicyOnModel: the dead-member policy asks only once the member has been
// unreachable for --remove-unreachable-after on the leader's clock, never below --min-voters, and
// the request then goes through the guard like an operator's.
func TestUnreachablePolicyOnModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		voters int
		down   []uint64
		// answered: members another member answers for, up for etcd but unhealthy to probes.
		answered  []uint64
		wait      time.Duration
		wantAsked bool
	}{
		{"not yet due", 4, []uint64{4}, nil, 30 * time.Second, false},
		{"due", 4, []uint64{4}, nil, 61 * time.Second, true},
		{"due, but below --min-voters", 3, []uint64{3}, nil, time.Hour, false},
		{"due, but the guard would refuse", 5, []uint64{4, 5}, []uint64{3}, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, etcdfake.Voters(tc.voters)...)
			w.r.RemoveUnreachableAfter = time.Minute
			target := etcdfake.Voters(tc.voters)[tc.down[len(tc.down)-1]-1].Name
			for _, id := range tc.down {
				w.etcd.Set(id, func(m *etcdfake.Member) { m.Down = true })
			}
			for _, id := range tc.answered {
				w.etcd.Set(id, func(m *etcdfake.Member) { m.AnsweredBy = 1 })
			}
			w.mustReconcile(target)
			w.clock.SetTime(w.clock.Now().Add(tc.wait))
			if res := w.mustReconcile(target); res.RequeueAfter == silenceWindow {
				// The first read of etcd's leader's metrics starts the measure of its silence.
				w.clock.SetTime(w.clock.Now().Add(silenceWindow))
				w.mustReconcile(target)
			}
			m := w.get(target)
			if m.Spec.Leave != tc.wantAsked {
				t.Fatalf("spec.leave = %t, want %t", m.Spec.Leave, tc.wantAsked)
			}
			if !tc.wantAsked {
				if len(w.removals()) != 0 {
					t.Errorf("removed %v without a request", w.removals())
				}
				return
			}
			if !strings.Contains(m.Annotations[v1alpha1.AnnotationLeaveReason], "--remove-unreachable-after 1m0s") {
				t.Errorf("leave reason %q does not name the policy", m.Annotations[v1alpha1.AnnotationLeaveReason])
			}
			w.mustReconcile(target)
			if got := w.removals(); !slices.Equal(got, tc.down) {
				t.Errorf("removed %v, want the unreachable member", got)
			}
		})
	}
}

// TestPeerURLUpdateOnModel: the leader applies the peer URLs an agent verified, and refuses URLs
// another member has.
func TestPeerURLUpdateOnModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		urls    []string
		changed bool
	}{
		{"new address", []string{"https://127.0.0.22:2380"}, true},
		{"another member's address", []string{"https://127.0.0.1:2380"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, etcdfake.Voters(3)...)
			m := w.get("node-2")
			m.Status.AdvertisedPeerURLs = tc.urls
			if err := w.api.Status().Update(t.Context(), m); err != nil {
				t.Fatal(err)
			}
			w.mustReconcile("node-2")
			var updates []etcdfake.Change
			for _, c := range w.etcd.Changes() {
				if c.Op == etcdfake.OpMemberUpdate {
					updates = append(updates, c)
				}
			}
			if tc.changed != (len(updates) == 1 && slices.Equal(updates[0].PeerURLs, tc.urls)) {
				t.Errorf("updates %+v, want changed=%t to %v", updates, tc.changed, tc.urls)
			}
			if got := sets.New(w.get("node-2").Status.PeerURLs...); tc.changed && !got.Has(tc.urls[0]) {
				t.Errorf("status.peerURLs = %v, want %v", w.get("node-2").Status.PeerURLs, tc.urls)
			}
		})
	}
}

// TestDiscoveryOnModel: the reconciler gives a member without an object one once it has gone
// without for the grace, and a re-joined member the object its name maps to.
func TestDiscoveryOnModel(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	added := etcdfake.Voters(4)[3]
	w.etcd.Add(added)
	res := w.mustReconcile(discoveryRequest)
	if res.RequeueAfter != time.Second {
		t.Fatalf("within the grace: %+v, want a look again after one poll interval", res)
	}
	var list v1alpha1.EtcdMemberList
	if err := w.api.List(t.Context(), &list); err != nil || len(list.Items) != 3 {
		t.Fatalf("within the grace: %d objects (%v), want 3", len(list.Items), err)
	}
	w.clock.SetTime(w.clock.Now().Add(DiscoveryGrace(time.Second)))
	if res := w.mustReconcile(discoveryRequest); res.RequeueAfter != 0 {
		t.Fatalf("after the grace: %+v, want nothing left waiting", res)
	}
	m := w.get("node-4")
	if m.Labels[v1alpha1.LabelDiscovered] != "true" || m.Status.MemberID != "4" {
		t.Fatalf("discovered object: labels %v, memberID %q", m.Labels, m.Status.MemberID)
	}

	// node-2's member is removed by hand, and the node re-joins as a new member.
	if err := w.etcdctlRemove(2); err != nil {
		t.Fatal(err)
	}
	w.mustReconcile("node-2")
	rejoined := etcdfake.Voters(2)[1]
	rejoined.ID = 0x12
	w.etcd.Add(rejoined)
	w.mustReconcile(discoveryRequest)
	w.clock.SetTime(w.clock.Now().Add(DiscoveryGrace(time.Second)))
	w.mustReconcile(discoveryRequest)
	if got := w.get("node-2").Status.MemberID; got != "12" {
		t.Fatalf("node-2 records member %q, want the re-joined 12", got)
	}
	if err := w.api.List(t.Context(), &list); err != nil || len(list.Items) != 4 {
		t.Fatalf("%d objects (%v), want 4: the re-joined member takes its object over", len(list.Items), err)
	}
}

// TestTakeOverForgetsTheEarlierAdvertisement: a node rebuilt at a new address re-joins under its
// old name before its agent runs. The peer URLs its earlier agent advertised describe the earlier
// member; the leader taking the object over must not make etcd move the new member back to them.
func TestTakeOverForgetsTheEarlierAdvertisement(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	m := w.get("node-2")
	m.Status.AdvertisedPeerURLs = m.Status.PeerURLs
	if err := w.api.Status().Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	w.mustReconcile("node-2")
	if err := w.etcdctlRemove(2); err != nil {
		t.Fatal(err)
	}
	w.mustReconcile("node-2")
	rebuilt := etcdfake.Voters(2)[1]
	rebuilt.ID = 0x12
	rebuilt.PeerURLs = []string{"https://127.0.0.22:2380"}
	rebuilt.ClientURLs = []string{"https://127.0.0.22:2379"}
	w.etcd.Add(rebuilt)
	w.mustReconcile(discoveryRequest)
	w.clock.SetTime(w.clock.Now().Add(DiscoveryGrace(time.Second)))
	w.mustReconcile(discoveryRequest)
	w.mustReconcile("node-2")

	got := w.get("node-2")
	if got.Status.MemberID != "12" {
		t.Fatalf("node-2 records member %q, want the re-joined 12", got.Status.MemberID)
	}
	if len(got.Status.AdvertisedPeerURLs) != 0 {
		t.Errorf("status.advertisedPeerURLs = %v after the take-over, want none until the new member's agent publishes its own", got.Status.AdvertisedPeerURLs)
	}
	for _, c := range w.etcd.Changes() {
		if c.Op == etcdfake.OpMemberUpdate {
			t.Errorf("the leader updated member %x's peer URLs to %v, the earlier member's", c.ID, c.PeerURLs)
		}
	}
}

// TestNotServingReachesTheObject: a member that answers but has lost its leader turns
// Healthy=False/NotServing at the watcher's second probe round, through what the watcher
// enqueues, although that round's probe says what the first one did.
func TestNotServingReachesTheObject(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.etcd.Set(3, func(m *etcdfake.Member) { m.NoLeader = true })
	var state pollState
	w.pollRound(&state)
	w.expect("node-3", v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing, "first round without a leader")
	w.pollRound(&state)
	w.expect("node-3", v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonNotServing, "second round without a leader")
}

// TestFollowersCutThenHealed: refused once etcd leadership moved, the leave of etcd's leader does
// not move leadership at every re-check, only after the hand-over retry; once the cut is gone, that
// move finds both followers serving and the member is removed.
func TestFollowersCutThenHealed(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.etcd.SetLeader(2)
	w.etcd.Cut(1, 3, true)
	w.askLeave("node-2")
	moves := func() int { return w.etcd.Calls(etcdfake.OpMoveLeader) }

	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "refused once leadership moved")
	if w.etcd.Leader() != 2 || moves() != 2 {
		t.Fatalf("leader %d after %d moves, want leadership handed back to 2 after 2", w.etcd.Leader(), moves())
	}
	w.mustReconcile("node-2")
	if moves() != 2 {
		t.Fatalf("%d moves at a re-check within the hand-over retry, want none more", moves())
	}
	w.etcd.Cut(1, 3, false)
	w.clock.SetTime(w.clock.Now().Add(w.r.HandOverRetry))
	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "healed")
	if got := w.removals(); !slices.Equal(got, []uint64{2}) {
		t.Errorf("removed %v, want [2]", got)
	}
}

// removalUnconfirmed fails the first member list after each removal: with LoseAnswer on the
// removal, etcd applies it and the leader cannot see that it did.
type removalUnconfirmed struct {
	*etcdfake.Cluster
	removed bool
}

func (c *removalUnconfirmed) MemberRemove(ctx context.Context, via etcd.Member, id uint64) error {
	c.removed = true
	return c.Cluster.MemberRemove(ctx, via, id)
}

func (c *removalUnconfirmed) MemberList(ctx context.Context) ([]etcd.Member, error) {
	if c.removed {
		c.removed = false
		return nil, etcdfake.ErrInjected
	}
	return c.Cluster.MemberList(ctx)
}

// TestCancelAfterAnUnconfirmedRemoval (make chaos, seed 853098367, scenario 87): etcd applied a
// removal whose answer was an error, the member list that would have shown it done failed too,
// and the request was cancelled before the leader looked again. The removal was ours, and the
// object says so. When the removal did fail, the look at the cancel withdraws the intent, and a
// removal by hand afterwards is not reported as ours.
func TestCancelAfterAnUnconfirmedRemoval(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			w := newWorld(t, etcdfake.Voters(3)...)
			if applied {
				unconfirmed := &removalUnconfirmed{Cluster: w.etcd}
				w.r.Etcd, w.r.Peers = unconfirmed, unconfirmed
				w.etcd.LoseAnswer(etcdfake.OpMemberRemove)
			} else {
				w.etcd.Fail(etcdfake.OpMemberRemove, etcdfake.ErrInjected)
			}
			w.askLeave("node-2")
			_, _ = w.reconcile("node-2")
			w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonEtcdError, "the removal answered with an error")
			w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = false })
			if applied {
				w.mustReconcile("node-2")
				w.expect("node-2", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, "the removal before the cancel was ours")
				return
			}
			w.mustReconcile("node-2")
			if err := w.etcdctlRemove(2); err != nil {
				t.Fatal(err)
			}
			w.mustReconcile("node-2")
			w.expect("node-2", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound, "the removal by hand after the cancel was not ours")
		})
	}
}
