package controller

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// changeKind names the one membership change a reconcile makes.
type changeKind string

const (
	noChange changeKind = ""
	// removeMember removes a member asked to leave, after moving etcd's leadership away from it
	// when it leads (removal.go, leadermove.go).
	removeMember changeKind = "remove"
	// handOver hands the term to another agent: the leader never removes its own member.
	handOver changeKind = "hand over"
	// updatePeerURLs makes etcd record the peer URLs the member's node advertises (peerupdate.go).
	updatePeerURLs changeKind = "update peer URLs"
	// promoteLearner makes a learner that caught up a voter (promotion.go).
	promoteLearner changeKind = "promote"
	// evictLearner removes a learner that stalled (eviction.go).
	evictLearner changeKind = "evict"
	// askUnreachableLeave is the dead-member policy asking an unreachable voter to leave, once etcd's
	// leader confirms it hears nothing from it (unreachable.go).
	askUnreachableLeave changeKind = "ask to leave"
)

// next is what decide chose: one change, or none, and the changes the object calls for that
// wait, each with why. A change that goes ahead still meets the checks only the moment of the
// call can make (the fence; for a removal, the verdict once etcd's leadership moved; for the
// dead-member policy, etcd's own word on the silence): each change function makes them.
type next struct {
	change changeKind
	held   []hold
	// after is when to look again, for a change that waits; 0 when nothing waits on time.
	after time.Duration

	// guarded: a voter's leave was judged by the quorum guard on fresh probes (verdict); forced
	// tells whether the force-leave annotation overrides it.
	guarded bool
	verdict quorum.Verdict
	forced  bool
	// moveFirst: the member leaves while it leads etcd, so leadership moves away first.
	moveFirst bool
	// stallLeft is how long a learner has before it is evicted, the promotion's latest requeue.
	stallLeft time.Duration
	// outage names the unreachable voter's outage by when it stopped being healthy, and
	// leaveReason is the annotation the dead-member policy's request carries.
	outage, leaveReason string
}

// hold is a change the object calls for that is not made now, and why. The operator is told on
// the object's condition when there is one, in a Warning Event when warning (the peer-URL
// update has no condition), and otherwise only in the leader's log at V(1): a wait re-checked
// every few seconds is no news.
type hold struct {
	change    changeKind
	condition string
	warning   bool
	reason    string
	message   string
	// guardRefusal: the quorum guard refused a leave, which is counted (GuardRefusals) and
	// logged at Info.
	guardRefusal bool
}

// Reasons of holds told only in the log.
const (
	holdNoProbeYet        = "NoProbeYet"
	holdSettling          = "PeerURLUpdateSettling"
	holdMoveHeld          = "LeadershipMoveHeld"
	holdNotUnreachableYet = "NotUnreachableLongEnough"
	holdTooFewVoters      = "TooFewVoters"
	holdGuardWouldRefuse  = "GuardWouldRefuse"
	holdAlreadyAsked      = "AlreadyAsked"
)

// decide chooses, from the object and what observe saw, the next change, in this order of
// priority:
//  1. a leave request naming an earlier member of the object: refused, nothing changes;
//  2. a leave request for the leader's own member: the hand-over;
//  3. a leave request: the removal, if the quorum guard allows it on the fresh probes (or the
//     force-leave annotation overrides it, never for the last voter);
//  4. the peer-URL update the member's agent asks for; one that waits lets the next step be
//     decided, since it may wait for a while;
//  5. a learner's eviction once it stalled, or else its promotion;
//  6. a voter's leave request from the opt-in dead-member policy.
//
// It reads only the object, the view and the reconciler's settings: it changes nothing.
func (r *MembershipReconciler) decide(m *v1alpha1.EtcdMember, v view) next {
	switch {
	case m.Spec.Leave && !m.LeaveAsked():
		return next{held: []hold{{change: removeMember, condition: v1alpha1.ConditionLeft, reason: v1alpha1.ReasonMemberMismatch,
			message: fmt.Sprintf("spec.memberID asks for the removal of member %s, but this object now records member %s (its node re-joined); nothing is removed. Set spec.leave to false, or spec.memberID to %s to remove the new member.",
				m.Spec.MemberID, m.Status.MemberID, m.Status.MemberID)}}}
	case m.Spec.Leave && v.target.ID == v.local:
		return next{change: handOver}
	case m.Spec.Leave:
		return r.decideRemoval(m, v)
	}
	n := r.decidePeerURLs(m, v)
	if n.change != noChange {
		return n
	}
	var then next
	if v.target.IsLearner {
		then = r.decideLearner(m, v)
	} else {
		then = r.decideUnreachable(m, v)
	}
	then.held = append(n.held, then.held...)
	then.after = sooner(then.after, n.after)
	return then
}

// decideRemoval judges a leave on the voters probed afresh: the quorum guard, then whether the
// member leads etcd. A learner has no vote: removing it needs no guard.
func (r *MembershipReconciler) decideRemoval(m *v1alpha1.EtcdMember, v view) next {
	if v.target.IsLearner {
		return next{change: removeMember}
	}
	n := next{guarded: true, verdict: checkRemoval(v.voters, v.target, m.Name),
		forced: m.Annotations[v1alpha1.AnnotationForceLeave] == "true"}
	if !n.verdict.Allowed && (!n.forced || n.verdict.LastVoter) {
		reason := v1alpha1.ReasonQuorumAtRisk
		if n.verdict.LastVoter {
			reason = v1alpha1.ReasonLastVoter
		}
		n.held = []hold{{change: removeMember, condition: v1alpha1.ConditionLeft, reason: reason, guardRefusal: true,
			message: fmt.Sprintf("Refused: %s. The request is re-checked every %s as member health changes; bring the unhealthy members back or remove them first.", n.verdict.Message, r.RecheckInterval)}}
		n.after = r.RecheckInterval
		return n
	}
	// The voters just probed say whom they follow; asking the target itself would cost a round
	// trip before every removal.
	for _, vt := range v.voters {
		if vt.Healthy && vt.ID != v.target.ID {
			n.moveFirst = vt.Leader == v.target.ID
			break
		}
	}
	if n.moveFirst && v.moveHeld && !n.forced {
		// The condition keeps the refusal that held the move.
		n.held = []hold{{change: removeMember, reason: holdMoveHeld,
			message: "etcd leadership was moved away from the member and handed back; not moved again yet"}}
		n.after = r.RecheckInterval
		return n
	}
	n.change = removeMember
	return n
}

// decidePeerURLs judges the peer-URL update the member's node advertises. A wrong URL cuts the
// member off its peers, so the update goes ahead only while losing the member would keep quorum,
// and the next one waits until a probe round after it has shown what it did.
func (r *MembershipReconciler) decidePeerURLs(m *v1alpha1.EtcdMember, v view) next {
	want := m.Status.AdvertisedPeerURLs
	if !peerUpdateWanted(m, v.target) {
		return next{}
	}
	fromTo := peerChange(v.target, want)
	wait := func(h hold) next { return next{held: []hold{h}, after: r.RecheckInterval} }
	if owner, ok := etcd.PeerURLHolder(v.members, v.target.ID, want); ok {
		return wait(hold{change: updatePeerURLs, warning: true, reason: v1alpha1.ReasonPeerURLsUpdateRefused, message: fmt.Sprintf(
			"Not updating the peer URLs of member %s (%s): member %s already has one of them. Fix --advertise-peer-urls on this member's node.",
			m.Status.MemberID, fromTo, etcd.IDString(owner.ID))})
	}
	if !v.probed {
		return wait(hold{change: updatePeerURLs, reason: holdNoProbeYet, message: "no probe round yet"})
	}
	if !v.settled {
		return wait(hold{change: updatePeerURLs, reason: holdSettling, message: "the last peer-URL update has not been probed a recheck interval since"})
	}
	if !v.target.IsLearner {
		if verdict := quorum.CheckRemoval(quorumVoters(v.members, v.probes), v.target.ID, m.Name); !verdict.Allowed {
			return wait(hold{change: updatePeerURLs, warning: true, reason: v1alpha1.ReasonPeerURLsUpdateRefused, message: fmt.Sprintf(
				"Not updating the peer URLs of member %s (%s) yet: should the new URLs not work, losing the member would cost quorum (%s). Re-checked every %s; bring the unhealthy members back.",
				m.Status.MemberID, fromTo, verdict.Message, r.RecheckInterval)})
		}
	}
	return next{change: updatePeerURLs}
}

// peerUpdateWanted tells whether the member's node advertises peer URLs etcd does not record.
func peerUpdateWanted(m *v1alpha1.EtcdMember, target etcd.Member) bool {
	want := m.Status.AdvertisedPeerURLs
	return len(want) > 0 && !peerurl.SameSet(target.PeerURLs, want)
}

// peerChange names a peer-URL update in messages, and the Warnings' dedup: "old -> new".
func peerChange(target etcd.Member, want []string) string {
	return fmt.Sprintf("%s -> %s", strings.Join(target.PeerURLs, ","), strings.Join(want, ","))
}

// decideLearner moves a learner towards voting: its eviction once it made no progress for
// LearnerStallTimeout, so that it no longer blocks the next join (etcd allows one learner), or
// its promotion once it runs and the larger quorum is safe. etcd itself says whether it is in
// sync (promotion.go). A big learner that is still replicating is never evicted for the time
// that takes; see timers.stalledFor.
func (r *MembershipReconciler) decideLearner(m *v1alpha1.EtcdMember, v view) next {
	if v.stalled >= r.LearnerStallTimeout {
		return next{change: evictLearner}
	}
	// No deadline in the messages: it moves with every bit of progress, and each new message
	// would be a status write and an Event.
	eviction := r.evictionNote()
	left := r.LearnerStallTimeout - v.stalled
	if len(v.target.ClientURLs) == 0 {
		return next{after: left, held: []hold{{change: promoteLearner, condition: v1alpha1.ConditionPromoted, reason: v1alpha1.ReasonNotStarted,
			message: "The learner has not started: start etcd on its node with the settings `etcdmember join` printed. " + eviction}}}
	}
	if !v.probed {
		return next{after: min(r.RecheckInterval, left), held: []hold{{change: promoteLearner, reason: holdNoProbeYet, message: "no probe round yet"}}}
	}
	if verdict := quorum.CheckPromotion(quorumVoters(v.members, v.probes), v.probes.Healthy(v.target.ID), m.Name); !verdict.Allowed {
		return next{after: min(r.RecheckInterval, left), held: []hold{{change: promoteLearner, condition: v1alpha1.ConditionPromoted, reason: v1alpha1.ReasonQuorumAtRisk,
			message: fmt.Sprintf("Not promoting: %s. Re-checked every %s; bring the unhealthy members back. %s", verdict.Message, r.RecheckInterval, eviction)}}}
	}
	return next{change: promoteLearner, stallLeft: left}
}

// decideUnreachable is the opt-in dead-member policy: a voter unreachable for longer than
// RemoveUnreachableAfter is asked to leave, as an operator would ask, so the request then goes
// through the full quorum guard and is recorded like any other. It never asks when the cluster
// would be left with fewer than MinVoters voters, nor when the pre-flight check already says the
// removal would be refused, nor again for an outage it asked about (an operator cancelled), and
// the change itself asks only once etcd confirms the member down (askPeers): the leader's probes
// only say that the leader cannot reach it.
func (r *MembershipReconciler) decideUnreachable(m *v1alpha1.EtcdMember, v view) next {
	if r.RemoveUnreachableAfter <= 0 || !v.probed || !v.unreachable {
		return next{}
	}
	held := func(reason, message string) next {
		return next{held: []hold{{change: askUnreachableLeave, reason: reason, message: message}}}
	}
	if wait := r.RemoveUnreachableAfter - v.down; wait > 0 {
		n := held(holdNotUnreachableYet, fmt.Sprintf("unreachable for %s of --remove-unreachable-after %s", v.down, r.RemoveUnreachableAfter))
		n.after = wait
		return n
	}
	voters := quorumVoters(v.members, v.probes)
	if len(voters)-1 < r.MinVoters {
		return held(holdTooFewVoters, fmt.Sprintf("%d voters, --min-voters %d", len(voters), r.MinVoters))
	}
	if verdict := quorum.CheckRemoval(voters, v.target.ID, m.Name); !verdict.Allowed {
		return held(holdGuardWouldRefuse, verdict.Message)
	}
	// The outage is named by when the member stopped being healthy, which every leader reads
	// alike; the time it has been unreachable is this leader's own measure.
	since := status.Get(m, v1alpha1.ConditionHealthy).LastTransitionTime.UTC().Format(time.RFC3339)
	why := fmt.Sprintf("unhealthy since %s and unreachable for longer than --remove-unreachable-after %s", since, r.RemoveUnreachableAfter)
	if m.Annotations[v1alpha1.AnnotationLeaveReason] == why {
		// spec.leave is false again: an operator cancelled. The next outage starts a new
		// lastTransitionTime and is judged afresh.
		return held(holdAlreadyAsked, "asked for this outage already, and the request was cancelled")
	}
	return next{change: askUnreachableLeave, outage: since, leaveReason: why}
}

// unreachableNow tells whether the latest probe round found the member unreachable.
func unreachableNow(m *v1alpha1.EtcdMember) bool {
	c := status.Get(m, v1alpha1.ConditionHealthy)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonUnreachable
}

// evictionNote ends a learner's Promoted messages with when it is evicted.
func (r *MembershipReconciler) evictionNote() string {
	return fmt.Sprintf("It is removed if it makes no progress for --learner-stall-timeout %s.", r.LearnerStallTimeout)
}
