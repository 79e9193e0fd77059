package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// guard clears a removal with the quorum rule and, when the target leads etcd, moves leadership
// away first. A refusal is recorded in the Left condition and the caller re-checks later. A
// learner has no vote: removing it needs no guard. voters are members' voters probed in this
// reconcile, or nil to probe them now.
func (r *LeaveReconciler) guard(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, members []etcd.Member, voters []voter) bool {
	if target.IsLearner {
		return true
	}
	log := logf.FromContext(ctx)
	if voters == nil {
		voters = probeVoters(ctx, r.Peers, members, target.ID, r.ProbeTimeout)
	}
	verdict := checkRemoval(voters, target, m.Name)
	// The pre-flight answer the same status write carries follows the fresh probes too: from the
	// periodic round it could still say removable while the guard refuses, the round being older
	// than the failure that the refusal sees.
	setRemovableFrom(m, verdict)
	forced := m.Annotations[v1alpha1.AnnotationForceLeave] == "true"
	// Not even force removes the last voter.
	recordForced(m, forced && !verdict.LastVoter, verdict)
	if !verdict.Allowed && (!forced || verdict.LastVoter) {
		reason := v1alpha1.ReasonQuorumAtRisk
		if verdict.LastVoter {
			reason = v1alpha1.ReasonLastVoter
		}
		log.Info("Refusing leave", "reason", reason, "detail", verdict.Message)
		metrics.GuardRefusals.WithLabelValues(reason).Inc()
		status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, reason,
			fmt.Sprintf("Refused: %s. The request is re-checked every %s as member health changes; bring the unhealthy members back or remove them first.", verdict.Message, r.RecheckInterval))
		return false
	}
	if forced {
		log.Info("Forced leave: skipping the quorum guard", "verdict", verdict.Message)
	}
	return r.moveLeaderAway(ctx, m, target, voters, forced)
}

// recordForced sets GuardSkipped the first time the guard is skipped for the current request,
// which writes the ForcedLeave Warning (recordTransition), and keeps it as it is on every retry,
// by this leader or the next, so that the Warning is written once per request. An earlier
// request's record goes once a request is judged by the guard again.
func recordForced(m *v1alpha1.EtcdMember, forced bool, verdict quorum.Verdict) {
	c := status.Get(m, v1alpha1.ConditionGuardSkipped)
	switch {
	case !forced:
		status.Remove(m, v1alpha1.ConditionGuardSkipped)
	case c == nil || c.ObservedGeneration != m.Generation:
		status.Set(m, v1alpha1.ConditionGuardSkipped, metav1.ConditionTrue, v1alpha1.ReasonForced,
			fmt.Sprintf("Removing member %s without the quorum guard (annotation %s; the guard said: %s). etcd's own reconfiguration check still applies.",
				m.Status.MemberID, v1alpha1.AnnotationForceLeave, verdict.Message))
	}
}

// setRemovable answers the pre-flight question for a listed member from the latest periodic
// probe: would removing it now keep quorum?
func setRemovable(m *v1alpha1.EtcdMember, target etcd.Member, members []etcd.Member, probes Probes, probed bool) {
	if target.IsLearner {
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonLearner,
			"The member is a learner: removing it does not change the quorum.")
		return
	}
	if !probed {
		return
	}
	setRemovableFrom(m, quorum.CheckRemoval(quorumVoters(members, probes), target.ID, m.Name))
}

// setRemovableFrom writes a voter's Removable condition from a verdict of the quorum guard.
func setRemovableFrom(m *v1alpha1.EtcdMember, verdict quorum.Verdict) {
	switch {
	case verdict.Allowed:
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept, verdict.Message+".")
	case verdict.LastVoter:
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonLastVoter,
			verdict.Message+". Add another member before removing this one.")
	default:
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk,
			verdict.Message+". Bring the unhealthy members back, or remove them first.")
	}
}

// quorumVoters lists the voting members with their health from the periodic probes.
func quorumVoters(members []etcd.Member, probes Probes) []quorum.Voter {
	var voters []quorum.Voter
	for _, mem := range members {
		if !mem.IsLearner {
			voters = append(voters, quorum.Voter{ID: mem.ID, Name: mem.Name, Healthy: probes.Healthy(mem.ID)})
		}
	}
	return voters
}

// voter is a voting member with the outcome of a direct probe.
type voter struct {
	etcd.Member
	Healthy bool
	// Leader is the leader the member follows, as it answered the probe; 0 when it did not.
	Leader uint64
	// AnsweredBy is the other member that answered on this voter's client URLs, if one did.
	AnsweredBy uint64
}

// probeVoters probes every voting member except skip, each over its pooled connection and in
// parallel, so the whole check costs one probe timeout at most. The target's own health does not
// change the verdict: it is leaving either way.
func probeVoters(ctx context.Context, peers Peers, members []etcd.Member, skip uint64, timeout time.Duration) []voter {
	var (
		voters []voter
		wg     sync.WaitGroup
	)
	for _, m := range members {
		if !m.IsLearner {
			voters = append(voters, voter{Member: m})
		}
	}
	for i := range voters {
		if voters[i].ID == skip {
			continue
		}
		wg.Go(func() {
			h := peers.Probe(ctx, voters[i].Member, timeout)
			voters[i].Healthy, voters[i].Leader, voters[i].AnsweredBy = h.Serving, h.Status.Leader, h.AnsweredBy
			if h.Err != nil {
				logf.FromContext(ctx).V(1).Info("Voter unhealthy", "member", voters[i].Name, "error", h.Err.Error())
			}
		})
	}
	wg.Wait()
	return voters
}

// checkRemoval runs the quorum guard on the probed voters. A voter whose client URLs another
// member answered counts as unhealthy, and the verdict names it, so that an operator sees why a
// member that looks up elsewhere was not counted.
func checkRemoval(voters []voter, target etcd.Member, name string) quorum.Verdict {
	qv := make([]quorum.Voter, 0, len(voters))
	var answeredByOther []string
	for _, v := range voters {
		qv = append(qv, quorum.Voter{ID: v.ID, Name: v.Name, Healthy: v.Healthy})
		if v.AnsweredBy != 0 && v.ID != target.ID {
			answeredByOther = append(answeredByOther, fmt.Sprintf("%s (%s) was answered by member %s",
				etcd.IDString(v.ID), strings.Join(v.ClientURLs, ","), etcd.IDString(v.AnsweredBy)))
		}
	}
	verdict := quorum.CheckRemoval(qv, target.ID, name)
	if len(answeredByOther) > 0 {
		verdict.Message += "; counted unhealthy: " + strings.Join(answeredByOther, ", ")
	}
	return verdict
}

// moveLeaderAway hands etcd leadership to a healthy voter when the target leads, so its removal
// costs no election, and judges the removal again on the cluster that follows the new leader. It
// tells whether the removal may go ahead; when not, the Left condition says why.
//
// Why judge again: the guard counts a voter healthy when it serves through etcd's leader, which is
// the target here. Two voters that stay may serve through it while they cannot reach each other
// (a cut between two followers, which no etcd metric shows promptly); removing the leader would
// then leave them unable to elect one, and the cluster without quorum. A voter that stays but does
// not serve through the new leader within a probe timeout counts unhealthy for this verdict, as
// it would for the next probe round. When that verdict refuses, leadership goes back to the
// target, which every voter reached, and is not moved again for HandOverRetry: each move costs a
// short write pause. For the same reason a move that fails is not followed by the removal: the
// others would have to elect a leader among themselves. A forced leave skips both verdicts.
func (r *LeaveReconciler) moveLeaderAway(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, voters []voter, forced bool) bool {
	log := logf.FromContext(ctx)
	// The voters just probed say whom they follow; asking the target itself would cost a round
	// trip before every removal.
	leads := false
	for _, v := range voters {
		if v.Healthy && v.ID != target.ID {
			leads = v.Leader == target.ID
			break
		}
	}
	if !leads {
		return true
	}
	if until, held := r.timers.movesHeld[target.ID]; held && !forced && r.now().Before(until) {
		log.V(1).Info("Not moving etcd leadership again yet", "until", until)
		return false
	}
	var failed []string
	for _, v := range voters {
		if v.ID == target.ID || !v.Healthy {
			continue
		}
		if err := r.fence(ctx, m, "moving etcd leadership away from", stillLeaving); err != nil {
			// The removal's own fence gives the change up too.
			log.Info("Not moving etcd leadership", "reason", err.Error())
			return true
		}
		log.Info("Moving etcd leadership away from the leaving member", "to", v.Name)
		if err := r.Peers.MoveLeader(ctx, target, v.ID); err != nil {
			if errors.Is(err, rpctypes.ErrNotLeader) {
				// Leadership moved on its own since the probes: what they said is out of date.
				log.Info("The leaving member no longer leads etcd; judging the removal again", "error", err.Error())
				return false
			}
			log.Error(err, "Moving etcd leadership failed", "to", v.Name)
			failed = append(failed, v.Name)
			continue
		}
		delete(r.timers.movesHeld, target.ID)
		lagging := r.awaitLeader(ctx, v.ID, target.ID, voters)
		if len(lagging) == 0 || forced {
			return true
		}
		after := slices.Clone(voters)
		for i := range after {
			if slices.ContainsFunc(lagging, func(l etcd.Member) bool { return l.ID == after[i].ID }) {
				after[i].Healthy = false
			}
		}
		verdict := checkRemoval(after, target, m.Name)
		if verdict.Allowed {
			return true
		}
		log.Info("Refusing leave after moving etcd leadership", "to", v.Name, "notFollowing", names(lagging), "detail", verdict.Message)
		if err := r.Peers.MoveLeader(ctx, v.Member, target.ID); err != nil {
			log.Error(err, "Handing etcd leadership back to the member asked to leave failed", "from", v.Name)
		}
		if r.timers.movesHeld == nil {
			r.timers.movesHeld = map[uint64]time.Time{}
		}
		r.timers.movesHeld[target.ID] = r.now().Add(r.HandOverRetry)
		metrics.GuardRefusals.WithLabelValues(v1alpha1.ReasonQuorumAtRisk).Inc()
		status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk,
			fmt.Sprintf("Refused: %s, once etcd leadership moved to %s: %s did not serve through it within %s (a network cut between the members that stay?). Leadership was handed back, and is moved again to re-check after %s; restore the links between the members that stay.",
				verdict.Message, v.Name, strings.Join(names(lagging), ", "), r.ProbeTimeout, r.HandOverRetry))
		return false
	}
	if forced || len(failed) == 0 {
		return true
	}
	status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonEtcdError,
		fmt.Sprintf("Member %s leads etcd, and moving leadership to %s failed, so it is not removed: the others would have to elect a leader among themselves, which a network cut between them can prevent. The errors are in the leading agent's log; re-checked every %s.",
			m.Status.MemberID, strings.Join(failed, " and to "), r.RecheckInterval))
	return false
}

// awaitLeader waits, up to one probe timeout, until every healthy voter that stays follows the
// new leader and serves through it, and returns those that did not. MoveLeader
// returns once the old leader has stepped down; a follower that has not heard from the new leader
// yet still forwards writes to the old one, and removing that member at once loses them ("request
// timed out, possibly due to previous leader failure"), which the e2e test of this path caught.
// The voters are waited for side by side, so the wait costs one probe timeout at most.
func (r *LeaveReconciler) awaitLeader(ctx context.Context, leader, leaving uint64, voters []voter) []etcd.Member {
	deadline := time.Now().Add(r.ProbeTimeout)
	var (
		mu      sync.Mutex
		lagging []etcd.Member
		wg      sync.WaitGroup
	)
	for _, v := range voters {
		if v.ID == leaving || !v.Healthy {
			continue
		}
		wg.Go(func() {
			follows := func(ctx context.Context) (bool, error) {
				h := r.Peers.Probe(ctx, v.Member, time.Until(deadline))
				return h.Serving && h.Status.Leader == leader, nil
			}
			if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Until(deadline), true, follows); err != nil {
				mu.Lock()
				defer mu.Unlock()
				lagging = append(lagging, v.Member)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(lagging, func(a, b etcd.Member) int { return cmp.Compare(a.ID, b.ID) })
	return lagging
}
