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
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// moveLeaderAway hands etcd's leadership from target, which holds it (decideRemoval saw so), to a
// healthy voter, so that its removal costs no election, and judges the removal again on the
// cluster that follows the new leader. It tells whether the removal may go ahead; when not, the
// Left condition says why.
//
// Why judge again: the guard counts a voter healthy when it serves through etcd's leader, which is
// the target here. Two voters that stay may serve through it while they cannot reach each other
// (a cut between two followers, which no etcd metric shows promptly); removing the leader would
// then leave them unable to elect one, and the cluster without quorum. A voter that stays but does
// not serve through the new leader within a probe timeout counts unhealthy for this verdict, as
// it would for the next probe round. When that verdict refuses, leadership goes back to the
// target, which every voter reached, and is not moved again for HandOverRetry (decide holds the
// leave meanwhile): each move costs a short write pause. For the same reason a move that fails
// is not followed by the removal: the others would have to elect a leader among themselves. A
// forced leave skips both verdicts.
func (r *MembershipReconciler) moveLeaderAway(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, voters []voter, forced bool) bool {
	log := logf.FromContext(ctx)
	var failed []string
	for _, v := range voters {
		if v.ID == target.ID || !v.Healthy {
			continue
		}
		log.Info("Moving etcd leadership away from the leaving member", "to", v.Name)
		move := change{verb: "moving etcd leadership away from", wanted: stillLeaving,
			call: func(ctx context.Context) error { return r.Peers.MoveLeader(ctx, target, v.ID) }}
		err := r.makeChange(ctx, m, target, move, nil)
		if errors.Is(err, ErrFenced) {
			// The removal's own fence gives the change up too.
			log.Info("Not moving etcd leadership", "reason", err.Error())
			return true
		}
		if err != nil {
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
		return r.judgeAfterMove(ctx, m, target, v, voters, forced)
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
func (r *MembershipReconciler) awaitLeader(ctx context.Context, leader, leaving uint64, voters []voter) []etcd.Member {
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

// judgeAfterMove judges the removal again once etcd's leadership moved from target to v: every
// healthy voter that stays must serve through v within a probe timeout. When one does not and
// the verdict refuses, leadership goes back to target, and is not moved again for HandOverRetry.
func (r *MembershipReconciler) judgeAfterMove(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, v voter, voters []voter, forced bool) bool {
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
	log := logf.FromContext(ctx)
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
