package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// act decides (decide.go), tells the operator about the changes that wait, settles what the
// request leaves behind, and makes the one change decided.
func (r *MembershipReconciler) act(ctx context.Context, m *v1alpha1.EtcdMember, v view, head *headStart) (ctrl.Result, error) {
	n := r.decide(m, v)
	if !m.Spec.Leave {
		if err := r.clearCancelled(ctx, m, v.target); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.tell(ctx, m, v, n)
	if m.LeaveAsked() {
		if err := r.settleLeave(ctx, m, v.target, n, head); err != nil {
			return ctrl.Result{}, err
		}
	}
	result, err := r.makeNext(ctx, m, v, n, head)
	return soonest(result, ctrl.Result{RequeueAfter: n.after}), err
}

// clearCancelled withdraws a cancelled request's intent, so that a later removal by someone else
// does not look like ours, and its Left condition: a cancelled request leaves nothing to report.
func (r *MembershipReconciler) clearCancelled(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member) error {
	if c := status.Get(m, v1alpha1.ConditionLeft); c != nil && c.Status == metav1.ConditionFalse {
		// A failed removal, or a leader that stopped, may have left the intent behind.
		if err := r.Intents.Delete(ctx, target.ID); err != nil {
			return err
		}
	}
	status.Remove(m, v1alpha1.ConditionLeft)
	delete(r.leaveSeen, m.UID)
	return nil
}

// settleLeave keeps a leave request's records true to the decision: nothing is held back by the
// dead-member policy any more, GuardSkipped says whether force overrode the guard, and a leave
// the guard held gives up the intent the head start may have stored.
func (r *MembershipReconciler) settleLeave(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, n next, head *headStart) error {
	status.Remove(m, v1alpha1.ConditionUnreachableLeaveHeld)
	if n.guarded {
		// Not even force removes the last voter.
		recordForced(m, n.forced && !n.verdict.LastVoter, n.verdict)
	}
	if n.change == noChange {
		return head.withdrawIntent(ctx, r.Intents, target.ID)
	}
	return nil
}

// tell records each change that waits where its hold says (see hold).
func (r *MembershipReconciler) tell(ctx context.Context, m *v1alpha1.EtcdMember, v view, n next) {
	log := logf.FromContext(ctx).WithValues("memberID", m.Status.MemberID)
	if n.forced && n.change == removeMember {
		log.Info("Forced leave: skipping the quorum guard", "verdict", n.verdict.Message)
	}
	for _, h := range n.held {
		switch {
		case h.condition != "":
			status.Set(m, h.condition, metav1.ConditionFalse, h.reason, h.message)
		case h.warning:
			r.peerNotices.warn(ctx, r, m, h.reason, peerChange(v.target, m.Status.AdvertisedPeerURLs), h.message)
		default:
			log.V(1).Info("Change waits", "change", h.change, "reason", h.reason, "detail", h.message)
		}
		if h.guardRefusal {
			log.Info("Refusing leave", "reason", h.reason, "detail", n.verdict.Message)
			metrics.GuardRefusals.WithLabelValues(h.reason).Inc()
		}
	}
}

// makeNext makes the change decided, through its own function, which records its outcome. Each
// change of etcd's membership goes through makeChange (change.go); the hand-over changes the
// term, and the dead-member policy's request the object.
func (r *MembershipReconciler) makeNext(ctx context.Context, m *v1alpha1.EtcdMember, v view, n next, head *headStart) (ctrl.Result, error) {
	switch n.change {
	case removeMember:
		return r.remove(ctx, m, v, n, head)
	case handOver:
		return r.handOver(ctx, m, v.target), nil
	case updatePeerURLs:
		return r.updatePeerURLs(ctx, m, v)
	case promoteLearner:
		return r.promote(ctx, m, v, n.stallLeft)
	case evictLearner:
		return r.evict(ctx, m, v.target)
	case askUnreachableLeave:
		return r.askUnreachableToLeave(ctx, m, v, n.outage, n.leaveReason)
	}
	return ctrl.Result{}, nil
}
