package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// observeHealth copies the member's latest probe into status.health and the Healthy condition.
// Raft index, raft term and DB size move on their own, so they are written only together with a
// change that matters (reachability, leadership, alarms) or once the recorded probe is
// older than HealthRefresh: a quiet cluster then costs almost no API writes.
func (r *MembershipReconciler) observeHealth(m *v1alpha1.EtcdMember, target etcd.Member, probes Probes) {
	h, ok := probes.Members[target.ID]
	if !ok {
		return
	}
	alarms := probes.Alarms[target.ID]
	next := &v1alpha1.MemberHealth{
		Reachable:     h.Reachable,
		Leader:        h.Reachable && h.Status.Leader == target.ID,
		RaftTerm:      int64(h.Status.RaftTerm),
		RaftIndex:     int64(h.Status.RaftIndex),
		DBSizeBytes:   h.Status.DBSize,
		Alarms:        slices.Clone(alarms),
		LastProbeTime: metav1.NewTime(h.At),
	}
	cur := m.Status.Health
	if cur == nil || notable(cur, next) || next.LastProbeTime.Sub(cur.LastProbeTime.Time) >= r.HealthRefresh {
		m.Status.Health = next
	}
	cond, reason, message := healthCondition(target, h, alarms, r.ProbeTimeout)
	if reason == v1alpha1.ReasonNotServing && !probes.notServingAgain(target.ID) && status.IsTrue(m, v1alpha1.ConditionHealthy) {
		// A member that answers but serves no linearizable read has no leader: most often for the
		// length of one election (a leadership move, a membership change, a delayed heartbeat).
		// Healthy turns False once the next round finds it so too, so that an election does not
		// flip the verdict and its Events back and forth. The guard judges each round as it is.
		return
	}
	status.Set(m, v1alpha1.ConditionHealthy, cond, reason, message)
}

// notable tells whether two probes differ in what an operator acts on. A raft term change alone
// is not: every election moves it, and which member leads is recorded on its own.
func notable(a, b *v1alpha1.MemberHealth) bool {
	return a.Reachable != b.Reachable || a.Leader != b.Leader || !slices.Equal(a.Alarms, b.Alarms)
}

// healthCondition judges one probe. An alarm outranks serving: a NOSPACE member answers reads
// but the cluster refuses writes.
func healthCondition(target etcd.Member, h etcd.Health, alarms []string, timeout time.Duration) (metav1.ConditionStatus, string, string) {
	id := etcd.IDString(target.ID)
	switch {
	case len(target.ClientURLs) == 0:
		return metav1.ConditionFalse, v1alpha1.ReasonNotStarted,
			fmt.Sprintf("Member %s is in etcd's member list but has never started, so it has no client URLs to probe. Start etcd on its node with the settings `etcdmember join` printed, or ask it to leave.", id)
	case h.AnsweredBy != 0:
		return metav1.ConditionFalse, v1alpha1.ReasonAnsweredByOther,
			fmt.Sprintf("Member %s's client URLs %s are answered by member %s, so member %s itself is not known to be up and counts as unhealthy. Give every member client URLs of its own (--advertise-client-urls), not a shared address or a VIP.",
				id, strings.Join(target.ClientURLs, ","), etcd.IDString(h.AnsweredBy), id)
	case !h.Reachable:
		return metav1.ConditionFalse, v1alpha1.ReasonUnreachable,
			fmt.Sprintf("Member %s did not answer on %s within %s. Check that etcd runs on its node and that the leading agent can reach its client URLs; the probe's error is in the Unreachable Event and the leading agent's log.",
				id, strings.Join(target.ClientURLs, ","), timeout)
	case len(alarms) > 0:
		return metav1.ConditionFalse, v1alpha1.ReasonAlarm,
			fmt.Sprintf("Alarm %s active for member %s. NOSPACE: the backend quota is exhausted and etcd refuses writes; compact and defragment, then run etcdctl alarm disarm. CORRUPT: the member's data disagrees with the others'; replace the member.",
				strings.Join(alarms, ","), id)
	case !h.Serving:
		return metav1.ConditionFalse, v1alpha1.ReasonNotServing,
			fmt.Sprintf("Member %s answered but could not serve a linearizable read. It has no leader, or its leader lost quorum; check the other members. The probe's error is in the NotServing Event and the leading agent's log.", id)
	case target.IsLearner:
		return metav1.ConditionTrue, v1alpha1.ReasonServing,
			fmt.Sprintf("Learner %s answers on its client URLs (learners serve no linearizable reads).", id)
	}
	return metav1.ConditionTrue, v1alpha1.ReasonServing,
		fmt.Sprintf("Member %s answers on its client URLs and serves linearizable reads.", id)
}

// forgetHealth drops what only a member in etcd has: its health, whether removing it is safe, and
// the dead-member policy's hold of its leave.
func forgetHealth(m *v1alpha1.EtcdMember) {
	m.Status.Health = nil
	status.Remove(m, v1alpha1.ConditionHealthy)
	status.Remove(m, v1alpha1.ConditionRemovable)
	status.Remove(m, v1alpha1.ConditionUnreachableLeaveHeld)
}
