package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// removeIfUnreachable is the opt-in dead-member policy: a voter unreachable for longer than
// RemoveUnreachableAfter is asked to leave, as an operator would ask, so the request then goes
// through the full quorum guard and is recorded like any other. It never asks when the cluster
// would be left with fewer than MinVoters voters, nor when the pre-flight check already says the
// removal would be refused.
func (r *LeaveReconciler) removeIfUnreachable(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, members []etcd.Member, probes Probes, probed bool) (ctrl.Result, error) {
	if r.RemoveUnreachableAfter <= 0 || !probed {
		return ctrl.Result{}, nil
	}
	c := status.Get(m, v1alpha1.ConditionHealthy)
	unreachable := c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonUnreachable
	down := r.timers.unreachableFor(target.ID, unreachable, r.now())
	if !unreachable {
		return ctrl.Result{}, nil
	}
	if wait := r.RemoveUnreachableAfter - down; wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	log := logf.FromContext(ctx).WithValues("memberID", m.Status.MemberID)
	voters := quorumVoters(members, probes)
	if len(voters)-1 < r.MinVoters {
		log.V(1).Info("Not asking an unreachable member to leave: too few voters would remain", "voters", len(voters), "minVoters", r.MinVoters)
		return ctrl.Result{}, nil
	}
	if verdict := quorum.CheckRemoval(voters, target.ID, m.Name); !verdict.Allowed {
		log.V(1).Info("Not asking an unreachable member to leave: the quorum guard would refuse", "verdict", verdict.Message)
		return ctrl.Result{}, nil
	}
	// The outage is named by when the member stopped being healthy, which every leader reads
	// alike; the time it has been unreachable is this leader's own measure.
	since := c.LastTransitionTime.UTC().Format(time.RFC3339)
	why := fmt.Sprintf("unhealthy since %s and unreachable for longer than --remove-unreachable-after %s", since, r.RemoveUnreachableAfter)
	if m.Annotations[v1alpha1.AnnotationLeaveReason] == why {
		// Already asked for this outage, and spec.leave is false again: an operator cancelled.
		// The next outage starts a new lastTransitionTime and is judged afresh.
		return ctrl.Result{}, nil
	}
	if err := r.requestLeave(ctx, m, why); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Asked an unreachable member to leave", "unhealthySince", since, "unreachableFor", down.Round(time.Second))
	metrics.UnreachableLeaves.Inc()
	r.Events.Warning(ctx, m, v1alpha1.ReasonUnreachableMember, "Leave",
		fmt.Sprintf("Member %s has been %s; asking it to leave. The quorum guard still applies; set spec.leave to false to cancel.", m.Status.MemberID, why))
	return ctrl.Result{}, nil
}

// requestLeave sets spec.leave and the reason annotation by updating a copy, so the status
// computed on m so far is kept for the reconcile's one status write (an update returns the
// stored status); the watch on the changed object starts the leave. An update, not a patch: the
// agents' RBAC grants no patch, and the resourceVersion makes it fail rather than act on an
// object someone changed meanwhile.
func (r *LeaveReconciler) requestLeave(ctx context.Context, m *v1alpha1.EtcdMember, why string) error {
	updated := m.DeepCopy()
	updated.Spec.Leave, updated.Spec.MemberID = true, m.Status.MemberID
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[v1alpha1.AnnotationLeaveReason] = why
	if err := r.Client.Update(ctx, updated); err != nil {
		return fmt.Errorf("asking %s to leave: %w", m.Name, err)
	}
	m.ObjectMeta, m.Spec = updated.ObjectMeta, updated.Spec
	return nil
}
