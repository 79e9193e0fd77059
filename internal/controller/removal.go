package controller

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// removal says who removed a member that is no longer in etcd.
type removal int

const (
	// removedElsewhere: nobody etcdmember knows of (etcdctl, another tool), or a request since
	// cancelled.
	removedElsewhere removal = iota
	removedOnRequest
	evictedStalled
)

// whoRemoved tells whether a leader removed member id before this reconcile: the object already
// records the outcome, or etcd holds an intent naming the object's current leave request or its
// eviction. An intent this reconcile's head start stored proves nothing; one it found already
// stored does. An intent of an earlier request, since cancelled, proves nothing either: a removal
// by someone else after the cancel is not ours.
func (r *MembershipReconciler) whoRemoved(ctx context.Context, m *v1alpha1.EtcdMember, id uint64, head *headStart) (removal, error) {
	switch {
	case status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved):
		return removedOnRequest, nil
	case status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonEvicted),
		// Agents before the eviction intent wrote Evicting before the removal instead.
		status.HasReason(m, v1alpha1.ConditionPromoted, v1alpha1.ReasonEvicting):
		return evictedStalled, nil
	case m.RecordedGone():
		return removedElsewhere, nil
	}
	prior, err := head.intentBefore(ctx, r.Intents, id)
	switch {
	case err != nil:
		return removedElsewhere, err
	case m.Spec.Leave && prior == leaveRequest(m):
		return removedOnRequest, nil
	case prior != "" && prior == unconfirmedRemoval(m):
		return removedOnRequest, nil
	case prior == evictionRequest(m):
		return evictedStalled, nil
	}
	return removedElsewhere, nil
}

// leaveRequest names the object's current leave request in its intent: any change of spec, a
// cancel or a new request, moves the generation on.
func leaveRequest(m *v1alpha1.EtcdMember) string {
	return leaveRequestAt(m, m.Generation)
}

func leaveRequestAt(m *v1alpha1.EtcdMember, generation int64) string {
	return fmt.Sprintf("%s uid=%s generation=%d", m.Name, m.UID, generation)
}

// unconfirmedRemoval names the request whose removal this object last recorded as answered by an
// error (Left=False/EtcdError), or "". etcd may have applied it all the same, and a cancel that
// came before any leader saw the outcome (make chaos, seed 853098367, scenario 87: the apiserver
// restarting in between) must not turn our removal into one "etcdmember did not make". Its intent
// still stored proves the member was listed at no look since the cancel: such a look withdraws it
// (clearCancelled). Only a removal by someone else between the cancel and the leader's next
// look, a few milliseconds as a rule, would be reported as ours.
func unconfirmedRemoval(m *v1alpha1.EtcdMember) string {
	c := status.Get(m, v1alpha1.ConditionLeft)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonEtcdError {
		return ""
	}
	return leaveRequestAt(m, c.ObservedGeneration)
}

// evictionRequest names the eviction of the learner the object records.
func evictionRequest(m *v1alpha1.EtcdMember) string {
	return fmt.Sprintf("evict %s uid=%s member=%s", m.Name, m.UID, m.Status.MemberID)
}

// markGone records that the member is no longer in etcd, and who removed it: a leader that
// stopped mid-removal still has it reported as its own.
func markGone(m *v1alpha1.EtcdMember, by removal) {
	switch by {
	case evictedStalled:
		evicted(m)
		return
	case removedOnRequest:
		removed(m)
		return
	}
	if !status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonNotFound) {
		status.Set(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound,
			fmt.Sprintf("Member %s is no longer in etcd's member list and etcdmember did not remove it. If the node is gone, delete this object; if it re-joins, its agent takes the object over.", m.Status.MemberID))
	}
	if m.Spec.Leave && !status.IsTrue(m, v1alpha1.ConditionLeft) {
		status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonNotFound,
			fmt.Sprintf("Member %s was already gone from etcd; nothing was removed.", m.Status.MemberID))
	}
}

func removed(m *v1alpha1.EtcdMember) {
	msg := fmt.Sprintf("Member %s was removed from etcd on request.", m.Status.MemberID)
	status.Set(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, msg)
	status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, msg)
}

// remove removes a member asked to leave, which decide cleared: etcd's leadership moves away
// from it first when it leads (leadermove.go), then makeChange stores the intent, fences and
// removes, using what head started.
func (r *MembershipReconciler) remove(ctx context.Context, m *v1alpha1.EtcdMember, v view, n next, head *headStart) (ctrl.Result, error) {
	log := logf.FromContext(ctx).WithValues("memberID", m.Status.MemberID)
	target := v.target
	if n.moveFirst && !r.moveLeaderAway(ctx, m, target, v.voters, n.forced) {
		if err := head.withdrawIntent(ctx, r.Intents, target.ID); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.RecheckInterval}, nil
	}
	log.Info("Removing member from etcd", "peerURLs", target.PeerURLs)
	if err := r.makeChange(ctx, m, target, r.removing(target, "removing", leaveRequest(m), stillLeaving, v.voters, head), head); err != nil {
		if errors.Is(err, errNotWanted) {
			// Cancelled after the intent was stored: withdrawn, so a later removal by someone
			// else is not reported as ours. A leader whose term ended leaves that to the next.
			return ctrl.Result{}, errors.Join(err, r.Intents.Delete(ctx, target.ID))
		}
		if errors.Is(err, ErrFenced) || errors.Is(err, errNoIntent) {
			return ctrl.Result{}, err
		}
		if errors.Is(err, rpctypes.ErrUnhealthy) && !n.forced {
			return r.refusedByEtcd(ctx, m, target)
		}
		status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonEtcdError,
			fmt.Sprintf("etcd did not remove member %s; the leader retries with back-off. etcd's error is in the EtcdError Event and the leading agent's log; check the health of the etcd cluster.", m.Status.MemberID))
		return ctrl.Result{}, err
	}
	removed(m)
	log.Info("Removed member from etcd", "stepsMs", head.timings().millis())
	metrics.LeaveDuration.Observe(r.now().Sub(r.leaveSeen[m.UID]).Seconds())
	delete(r.leaveSeen, m.UID)
	return ctrl.Result{}, nil
}

// refusedByEtcd holds a leave that the guard allowed and etcd's own check refused
// (--strict-reconfig-check, on by default): etcd counts a voter active only once it has been
// connected to etcd's leader for 5 s, so a member that has just come back (its etcd restarted, or
// upgraded by kubeadm) answers the guard's probe before etcd counts it. Nothing was removed: the
// intent goes, and the request waits as the guard's own refusals do, without an error. A forced
// leave, which skipped the guard, keeps EtcdError: there etcd's check is the only one.
func (r *MembershipReconciler) refusedByEtcd(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member) (ctrl.Result, error) {
	logf.FromContext(ctx).Info("Refusing leave: etcd refused the removal", "memberID", m.Status.MemberID,
		"detail", rpctypes.ErrUnhealthy.Error())
	status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk,
		fmt.Sprintf("Refused by etcd (%q): without member %s, etcd does not count enough voters active to keep its quorum. A member that has just restarted counts only once connected for 5 s; the request is re-checked every %s. If it stays refused, check the members with `etcdctl endpoint health --cluster`.",
			rpctypes.ErrUnhealthy.Error(), m.Status.MemberID, r.RecheckInterval))
	return ctrl.Result{RequeueAfter: r.RecheckInterval}, r.Intents.Delete(ctx, target.ID)
}

// handOver deals with a leave for the leader's own member.
func (r *MembershipReconciler) handOver(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member) ctrl.Result {
	if r.Leadership.HandOver(target.ID) {
		logf.FromContext(ctx).Info("Handing leadership over to remove own member", "memberID", m.Status.MemberID)
		// Once nobody took over, keep saying so while retrying rather than flapping.
		if !status.HasReason(m, v1alpha1.ConditionLeft, v1alpha1.ReasonNoOtherAgent) {
			status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonHandingOver,
				"The leading agent runs on this member's node and never removes its own member; it is handing leadership to another agent, which will remove it.")
		}
		return ctrl.Result{}
	}
	status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonNoOtherAgent,
		// No interval in the message: it grows with every attempt, and each new message would be a
		// status write and a Warning Event.
		"No other etcdmember agent took over leadership, and the agent on this member's node cannot remove its own member. Start the agent on another etcd node (the hand-over is retried with back-off), or remove the member with etcdctl.")
	return ctrl.Result{RequeueAfter: r.HandOverRetry}
}
