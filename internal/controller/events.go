package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// recordTransition writes an Event when a condition changed its verdict, so each state is
// announced once however often it is re-checked. Conditions carry stable messages; the error
// behind a failure (actErr, or the latest probe's) varies from one attempt to the next, so it goes
// into the Event that announces the failure, and into the log, never into the condition.
func (r *MembershipReconciler) recordTransition(ctx context.Context, before, after *v1alpha1.EtcdMember, actErr error) {
	withErr := func(c *metav1.Condition) string {
		if c.Reason == v1alpha1.ReasonEtcdError && actErr != nil {
			return c.Message + " etcd said: " + actErr.Error()
		}
		return c.Message
	}
	if c := changed(before, after, v1alpha1.ConditionLeft); c != nil {
		if outcome := leaveOutcome(c.Reason); outcome != "" {
			metrics.LeaveRequests.WithLabelValues(outcome).Inc()
		}
		switch {
		case c.Status == metav1.ConditionTrue:
			r.Events.Normal(ctx, after, c.Reason, "Leave", c.Message)
		case c.Reason == v1alpha1.ReasonHandingOver:
			r.Events.Normal(ctx, after, c.Reason, "Leave", c.Message)
		default:
			r.Events.Warning(ctx, after, c.Reason, "Leave", withErr(c))
		}
	}
	if c := status.Get(after, v1alpha1.ConditionGuardSkipped); c != nil {
		if b := status.Get(before, v1alpha1.ConditionGuardSkipped); b == nil || b.ObservedGeneration != c.ObservedGeneration {
			r.Events.Warning(ctx, after, v1alpha1.ReasonForced, "Leave", c.Message)
		}
	}
	if c := changed(before, after, v1alpha1.ConditionJoined); c != nil && (c.Reason == v1alpha1.ReasonNotFound || c.Reason == v1alpha1.ReasonEvicted) {
		r.Events.Warning(ctx, after, c.Reason, "Observe", c.Message)
	}
	if c := changed(before, after, v1alpha1.ConditionPromoted); c != nil {
		switch c.Reason {
		case v1alpha1.ReasonPromoted, v1alpha1.ReasonCatchingUp, v1alpha1.ReasonNotStarted, v1alpha1.ReasonEvicting:
			r.Events.Normal(ctx, after, c.Reason, "Promote", c.Message)
		case v1alpha1.ReasonQuorumAtRisk, v1alpha1.ReasonEtcdError:
			r.Events.Warning(ctx, after, c.Reason, "Promote", withErr(c))
		}
	}
	// Health is announced when its verdict changes, not when only the error text does, and not at
	// the first probe of a healthy member.
	b, a := status.Get(before, v1alpha1.ConditionHealthy), status.Get(after, v1alpha1.ConditionHealthy)
	if a != nil && (b == nil || b.Reason != a.Reason) && (b != nil || a.Status != metav1.ConditionTrue) {
		if a.Status == metav1.ConditionTrue {
			r.Events.Normal(ctx, after, a.Reason, "Probe", a.Message)
		} else {
			r.Events.Warning(ctx, after, a.Reason, "Probe", a.Message+r.probeError(after))
		}
	}
}

// probeError is the error of the member's latest probe, as a sentence to append, or "".
func (r *MembershipReconciler) probeError(m *v1alpha1.EtcdMember) string {
	id, err := etcd.ParseID(m.Status.MemberID)
	if err != nil {
		return ""
	}
	probes, ok := r.Probes()
	if h := probes.Members[id]; ok && h.Err != nil {
		return " The probe said: " + h.Err.Error()
	}
	return ""
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
