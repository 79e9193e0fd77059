package controller

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// recordMembership exports the member list and the members' health as the leader last saw them.
func recordMembership(members []etcd.Member, probes Probes) {
	resetMemberGauges()
	metrics.EtcdMembers.WithLabelValues("voter").Set(0)
	metrics.EtcdMembers.WithLabelValues("learner").Set(0)
	for _, m := range members {
		id := etcd.IDString(m.ID)
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		metrics.EtcdMembers.WithLabelValues(role).Inc()
		metrics.MemberLearner.WithLabelValues(m.Name, id).Set(boolValue(m.IsLearner))
		if m.IsLearner {
			// Creates the learner's series at 0 (see LearnerEvictions), never resets it.
			metrics.LearnerEvictions.WithLabelValues(m.Name, id)
		}
		h, probed := probes.Members[m.ID]
		if !probed {
			continue
		}
		alarms := probes.Alarms[m.ID]
		metrics.MemberHealthy.WithLabelValues(m.Name, id).Set(boolValue(h.Serving && len(alarms) == 0))
		for _, a := range alarms {
			metrics.MemberAlarm.WithLabelValues(m.Name, id, a).Set(1)
		}
		if h.Reachable {
			metrics.MemberDBSize.WithLabelValues(m.Name, id).Set(float64(h.Status.DBSize))
		}
	}
	metrics.FaultTolerance.WithLabelValues().Set(float64(faultTolerance(quorumVoters(members, probes))))
}

// faultTolerance is how many more voters may fail before the healthy ones no longer make a
// quorum: 0 means the next failure stops every write, below 0 that quorum is lost already.
func faultTolerance(voters []quorum.Voter) int {
	healthy := 0
	for _, v := range voters {
		if v.Healthy {
			healthy++
		}
	}
	return healthy - quorum.Of(len(voters))
}

// recordObjects exports the objects by the state of their Joined condition, and the leave
// requests still pending with their age at now.
func recordObjects(objects []v1alpha1.EtcdMember, now time.Time) {
	recordPendingLeaves(objects, now)
	counts := map[string]float64{"joined": 0, "removed": 0, "not_found": 0, "unknown": 0}
	for i := range objects {
		c := status.Get(&objects[i], v1alpha1.ConditionJoined)
		switch {
		case c == nil:
			counts["unknown"]++
		case status.IsTrue(&objects[i], v1alpha1.ConditionJoined):
			counts["joined"]++
		case c.Reason == v1alpha1.ReasonRemoved:
			counts["removed"]++
		default:
			counts["not_found"]++
		}
	}
	for state, n := range counts {
		metrics.Objects.WithLabelValues(state).Set(n)
	}
}

// recordPendingLeaves exports the leave requests not complete yet. A request's age counts from
// its Left condition's lastTransitionTime, which every leader reads alike: the first leader that
// saw the request set it, and it stays while the condition stays False whatever its reason.
func recordPendingLeaves(objects []v1alpha1.EtcdMember, now time.Time) {
	metrics.LeavePending.Reset()
	pending := 0
	for i := range objects {
		m := &objects[i]
		left := status.Get(m, v1alpha1.ConditionLeft)
		if !m.Spec.Leave || (left != nil && left.Status == metav1.ConditionTrue) {
			continue
		}
		pending++
		// Not recorded by a leader yet: it is being looked at now.
		reason, age := reasonUnobserved, 0.0
		if left != nil {
			reason, age = left.Reason, max(now.Sub(left.LastTransitionTime.Time).Seconds(), 0)
		}
		metrics.LeavePending.WithLabelValues(m.Name, m.Status.MemberID, reason).Set(age)
	}
	metrics.LeavesPending.WithLabelValues().Set(float64(pending))
}

// reasonUnobserved labels a pending leave whose Left condition no leader has written yet.
const reasonUnobserved = "Unobserved"

// forgetMembership drops the leader-only gauges when a leadership term ends, so a former leader
// does not keep exporting a stale view.
func forgetMembership() {
	resetMemberGauges()
	metrics.Objects.Reset()
	metrics.LeavesPending.Reset()
	metrics.LeavePending.Reset()
}

// resetMemberGauges drops every per-member series, so members that left stop being exported.
func resetMemberGauges() {
	metrics.EtcdMembers.Reset()
	metrics.MemberHealthy.Reset()
	metrics.MemberLearner.Reset()
	metrics.MemberAlarm.Reset()
	metrics.MemberDBSize.Reset()
	metrics.FaultTolerance.Reset()
}

// leaveOutcome maps a Left condition reason to the outcome label of LeaveRequests.
func leaveOutcome(reason string) string {
	switch reason {
	case v1alpha1.ReasonRemoved:
		return "removed"
	case v1alpha1.ReasonNotFound:
		return "not_found"
	case v1alpha1.ReasonEtcdError:
		return "failed"
	case v1alpha1.ReasonQuorumAtRisk, v1alpha1.ReasonLastVoter, v1alpha1.ReasonNoOtherAgent, v1alpha1.ReasonNoMemberID:
		return "refused"
	}
	return ""
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
