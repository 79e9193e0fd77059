package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Bounds of the wait between promotion attempts etcd refused as not ready.
const (
	promoteBackoffMin = 500 * time.Millisecond
	promoteBackoffMax = 15 * time.Second
)

// learner moves a learner towards voting: it promotes it once etcd considers it in sync and the
// larger quorum is safe, and evicts it once it has made no progress for LearnerStallTimeout, so
// that it no longer blocks the next join (etcd allows one learner). A big learner that is still
// replicating is never evicted for the time that takes; see timers.stalledFor.
func (r *MembershipReconciler) learner(ctx context.Context, m *v1alpha1.EtcdMember, v view) (ctrl.Result, error) {
	if c := status.Get(m, v1alpha1.ConditionPromoted); c == nil || c.Status != metav1.ConditionFalse || c.Reason == v1alpha1.ReasonStalled {
		// Stalled belongs to an earlier member the object recorded.
		status.Remove(m, v1alpha1.ConditionPromoted)
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonCatchingUp, "The learner was seen for the first time.")
	}
	h, answered := v.probes.Members[v.target.ID]
	stalled := r.timers.stalledFor(v.target.ID, h.Status.RaftIndex, v.probed && answered && h.Reachable, highestVoterIndex(v.members, v.probes), r.now())
	if stalled >= r.LearnerStallTimeout {
		return r.evict(ctx, m, v.target)
	}
	// No deadline in the messages: it moves with every bit of progress, and each new message
	// would be a status write and an Event.
	eviction := fmt.Sprintf("It is removed if it makes no progress for --learner-stall-timeout %s.", r.LearnerStallTimeout)
	remaining := r.LearnerStallTimeout - stalled
	untilDeadline := ctrl.Result{RequeueAfter: remaining}
	if len(v.target.ClientURLs) == 0 {
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonNotStarted,
			"The learner has not started: start etcd on its node with the settings `etcdmember join` printed. "+eviction)
		return untilDeadline, nil
	}
	if !v.probed {
		return ctrl.Result{RequeueAfter: min(r.RecheckInterval, remaining)}, nil
	}
	verdict := quorum.CheckPromotion(quorumVoters(v.members, v.probes), v.probes.Healthy(v.target.ID), m.Name)
	if !verdict.Allowed {
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk,
			fmt.Sprintf("Not promoting: %s. Re-checked every %s; bring the unhealthy members back. %s", verdict.Message, r.RecheckInterval, eviction))
		return ctrl.Result{RequeueAfter: min(r.RecheckInterval, remaining)}, nil
	}
	err := r.makeChange(ctx, m, v.target, change{verb: "promoting", wanted: anyState,
		call: func(ctx context.Context) error { return r.Etcd.MemberPromote(ctx, v.target.ID) }}, nil)
	if errors.Is(err, ErrFenced) {
		return ctrl.Result{}, err
	}
	if errors.Is(err, etcd.ErrLearnerNotReady) {
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonCatchingUp,
			"The learner is replicating the log; etcd promotes it only once it is close to the leader's, and the leader retries with back-off. "+eviction)
		return ctrl.Result{RequeueAfter: min(r.nextPromoteWait(m.UID), remaining)}, nil
	}
	if err != nil {
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonEtcdError,
			"etcd did not promote the learner; the leader retries with back-off. etcd's error is in the EtcdError Event and the leading agent's log; check the health of the etcd cluster. "+eviction)
		return ctrl.Result{}, err
	}
	logf.FromContext(ctx).Info("Promoted learner to voter", "memberID", m.Status.MemberID)
	r.promoteBackoff().Forget(m.UID)
	r.timers.forget(v.target.ID)
	metrics.LearnerPromotions.Inc()
	m.Status.IsLearner = false
	status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionTrue, v1alpha1.ReasonPromoted,
		fmt.Sprintf("Learner %s caught up and was promoted to voter.", m.Status.MemberID))
	return ctrl.Result{}, nil
}

// highestVoterIndex is the highest raft index a voter answered with in the latest probes: what a
// learner has to catch up with.
func highestVoterIndex(members []etcd.Member, probes Probes) uint64 {
	var lead uint64
	for _, mem := range members {
		if h, ok := probes.Members[mem.ID]; ok && !mem.IsLearner && h.Reachable {
			lead = max(lead, h.Status.RaftIndex)
		}
	}
	return lead
}

// nextPromoteWait doubles the wait after each refusal, within bounds, per learner.
func (r *MembershipReconciler) nextPromoteWait(uid types.UID) time.Duration {
	return r.promoteBackoff().When(uid)
}

// promoteBackoff is the term's back-off between promotions etcd refused as not ready.
func (r *MembershipReconciler) promoteBackoff() workqueue.TypedRateLimiter[types.UID] {
	if r.promoteRefusals == nil {
		r.promoteRefusals = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](promoteBackoffMin, promoteBackoffMax)
	}
	return r.promoteRefusals
}

// votedElsewhere closes the Promoted condition of a learner that became a voter by other means
// (etcdctl, or a leader that promoted it and stopped before writing status).
func votedElsewhere(m *v1alpha1.EtcdMember) {
	if c := status.Get(m, v1alpha1.ConditionPromoted); c != nil && c.Status == metav1.ConditionFalse {
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionTrue, v1alpha1.ReasonVoter,
			fmt.Sprintf("Member %s is a voter.", m.Status.MemberID))
	}
}
