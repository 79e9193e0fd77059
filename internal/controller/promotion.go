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
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Bounds of the wait between promotion attempts etcd refused as not ready.
const (
	promoteBackoffMin = 500 * time.Millisecond
	promoteBackoffMax = 15 * time.Second
)

// seenLearner opens the Promoted condition of a learner seen for the first time; a Stalled one
// belongs to an earlier member the object recorded.
func seenLearner(m *v1alpha1.EtcdMember) {
	if c := status.Get(m, v1alpha1.ConditionPromoted); c == nil || c.Status != metav1.ConditionFalse || c.Reason == v1alpha1.ReasonStalled {
		status.Remove(m, v1alpha1.ConditionPromoted)
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonCatchingUp, "The learner was seen for the first time.")
	}
}

// promote asks etcd to promote a learner decide cleared. etcd refuses one that is not yet close
// to the leader's log: the promotion is then retried with back-off, never later than the
// learner's stall deadline (stallLeft from now).
func (r *MembershipReconciler) promote(ctx context.Context, m *v1alpha1.EtcdMember, v view, stallLeft time.Duration) (ctrl.Result, error) {
	eviction := r.evictionNote()
	err := r.makeChange(ctx, m, v.target, change{verb: "promoting", wanted: anyState,
		call: func(ctx context.Context) error { return r.Etcd.MemberPromote(ctx, v.target.ID) }}, nil)
	if errors.Is(err, ErrFenced) {
		return ctrl.Result{}, err
	}
	if errors.Is(err, etcd.ErrLearnerNotReady) {
		status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonCatchingUp,
			"The learner is replicating the log; etcd promotes it only once it is close to the leader's, and the leader retries with back-off. "+eviction)
		return ctrl.Result{RequeueAfter: min(r.nextPromoteWait(m.UID), stallLeft)}, nil
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
