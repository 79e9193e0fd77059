package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/metrics"
	"github.com/etcdmember/etcdmember/internal/status"
)

// recordTransition writes an Event when the Joined or Left condition changed its reason or
// message, so each state is announced once however often it is re-checked.
func (r *LeaveReconciler) recordTransition(ctx context.Context, before, after *v1alpha1.EtcdMember) {
	if c := changed(before, after, v1alpha1.ConditionLeft); c != nil {
		if outcome := leaveOutcome(c.Reason); outcome != "" {
			metrics.LeaveRequests.WithLabelValues(outcome).Inc()
		}
		switch {
		case c.Status == metav1.ConditionTrue:
			r.Events.Normal(ctx, after, c.Reason, "Leave", c.Message)
		case c.Reason == v1alpha1.ReasonRemoving, c.Reason == v1alpha1.ReasonHandingOver:
			r.Events.Normal(ctx, after, c.Reason, "Leave", c.Message)
		default:
			r.Events.Warning(ctx, after, c.Reason, "Leave", c.Message)
		}
	}
	if c := changed(before, after, v1alpha1.ConditionJoined); c != nil && c.Reason == v1alpha1.ReasonNotFound {
		r.Events.Warning(ctx, after, c.Reason, "Observe", c.Message)
	}
}

// changed returns the condition of that type in after when it differs from before in status,
// reason or message.
func changed(before, after *v1alpha1.EtcdMember, condType string) *metav1.Condition {
	b, a := status.Get(before, condType), status.Get(after, condType)
	if a == nil {
		return nil
	}
	if b != nil && b.Status == a.Status && b.Reason == a.Reason && b.Message == a.Message {
		return nil
	}
	return a
}
