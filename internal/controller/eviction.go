package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// evict removes a learner that stalled. A learner has no vote, so its removal needs no guard.
func (r *MembershipReconciler) evict(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member) (ctrl.Result, error) {
	status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonEvicting,
		fmt.Sprintf("Removing learner %s: it made no progress for --learner-stall-timeout %s.", m.Status.MemberID, r.LearnerStallTimeout))
	// The intent tells the next leader, should this one stop after the removal, an eviction from a
	// removal by someone else.
	logf.FromContext(ctx).Info("Evicting stalled learner", "memberID", m.Status.MemberID, "peerURLs", target.PeerURLs)
	if err := r.makeChange(ctx, m, target, r.removing(target, "evicting", evictionRequest(m), anyState, nil, nil), nil); err != nil {
		return ctrl.Result{}, fmt.Errorf("evicting stalled learner %s: %w", m.Status.MemberID, err)
	}
	r.promoteBackoff().Forget(m.UID)
	r.timers.forget(target.ID)
	metrics.LearnerEvictions.WithLabelValues(m.Name, etcd.IDString(target.ID)).Inc()
	evicted(m)
	forgetHealth(m)
	return ctrl.Result{}, nil
}

// evicted records that the learner was removed for stalling.
func evicted(m *v1alpha1.EtcdMember) {
	status.Set(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonEvicted,
		fmt.Sprintf("Learner %s was removed from etcd because it had not caught up in time; the next join can proceed. Find out why it stalled (did etcd start on the node? can it reach the peers?) before joining it again.", m.Status.MemberID))
	status.Set(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonStalled,
		fmt.Sprintf("Learner %s did not catch up in time and was evicted.", m.Status.MemberID))
}
