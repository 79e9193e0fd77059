package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// TestFaultTolerance: healthy voters minus the quorum, learners not counted.
func TestFaultTolerance(t *testing.T) {
	members := []etcd.Member{{ID: 1, Name: "a"}, {ID: 2, Name: "b"}, {ID: 3, Name: "c"}, {ID: 4, Name: "l", IsLearner: true}}
	for _, tc := range []struct {
		name    string
		healthy map[uint64]bool
		want    float64
	}{
		{"all three voters healthy", map[uint64]bool{1: true, 2: true, 3: true, 4: true}, 1},
		{"one voter down: the next failure loses quorum", map[uint64]bool{1: true, 2: true, 3: false, 4: true}, 0},
		{"two voters down: quorum lost", map[uint64]bool{1: true, 2: false, 3: false, 4: true}, -1},
		{"a learner down changes nothing", map[uint64]bool{1: true, 2: true, 3: true, 4: false}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recordMembership(members, probesOf(tc.healthy))
			if got := testutil.ToFloat64(metrics.FaultTolerance); got != tc.want {
				t.Errorf("etcdmember_fault_tolerance = %v, want %v", got, tc.want)
			}
		})
	}
	forgetMembership()
	if n := testutil.CollectAndCount(metrics.FaultTolerance); n != 0 {
		t.Errorf("a leader stepping down still exports %d fault tolerance series", n)
	}
}

// TestLearnerEvictionSeriesStartsAtZero: a listed learner's eviction counter exists at 0 before
// any eviction, so the first one shows as an increase.
func TestLearnerEvictionSeriesStartsAtZero(t *testing.T) {
	recordMembership([]etcd.Member{{ID: 1, Name: "a"}, {ID: 0x2a, Name: "new", IsLearner: true}}, probesOf(map[uint64]bool{1: true}))
	defer forgetMembership()
	ch := make(chan prometheus.Metric, 100)
	metrics.LearnerEvictions.Collect(ch)
	close(ch)
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range out.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["member"] == "new" && labels["member_id"] == "2a" {
			if v := out.GetCounter().GetValue(); v != 0 {
				t.Errorf("the learner's eviction counter is %v before any eviction, want 0", v)
			}
			return
		}
	}
	t.Error("no eviction counter series for the listed learner new (2a)")
}

// TestPendingLeaves: a request counts until its Left condition turns True, and its age runs from
// the condition's lastTransitionTime, whatever reason it has moved through since.
func TestPendingLeaves(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	left := func(s metav1.ConditionStatus, reason string, ago time.Duration) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionLeft, Status: s, Reason: reason,
			LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
	}
	obj := func(name string, leave bool, conds []metav1.Condition) v1alpha1.EtcdMember {
		m := v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: name}}
		m.Spec.Leave = leave
		m.Status.MemberID = name + "1d"
		m.Status.Conditions = conds
		return m
	}
	recordObjects([]v1alpha1.EtcdMember{
		obj("refused", true, left(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, 20*time.Minute)),
		obj("failing", true, left(metav1.ConditionFalse, v1alpha1.ReasonEtcdError, 90*time.Second)),
		obj("fresh", true, nil),
		obj("done", true, left(metav1.ConditionTrue, v1alpha1.ReasonRemoved, time.Hour)),
		obj("cancelled", false, left(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, time.Hour)),
	}, now)
	if got := testutil.ToFloat64(metrics.LeavesPending); got != 3 {
		t.Errorf("etcdmember_leave_requests_pending = %v, want 3", got)
	}
	want := `
# HELP etcdmember_leave_pending_seconds Seconds since the leader first recorded the pending leave request (its Left condition's lastTransitionTime), by the reason it is pending.
# TYPE etcdmember_leave_pending_seconds gauge
etcdmember_leave_pending_seconds{member="failing",member_id="failing1d",reason="EtcdError"} 90
etcdmember_leave_pending_seconds{member="fresh",member_id="fresh1d",reason="Unobserved"} 0
etcdmember_leave_pending_seconds{member="refused",member_id="refused1d",reason="QuorumAtRisk"} 1200
`
	if err := testutil.CollectAndCompare(metrics.LeavePending, strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// Once the refused request completes, its series goes.
	recordObjects([]v1alpha1.EtcdMember{obj("refused", true, left(metav1.ConditionTrue, v1alpha1.ReasonRemoved, 0))}, now)
	if n := testutil.CollectAndCount(metrics.LeavePending); n != 0 {
		t.Errorf("%d pending-leave series after every request completed, want 0", n)
	}
	if got := testutil.ToFloat64(metrics.LeavesPending); got != 0 {
		t.Errorf("etcdmember_leave_requests_pending = %v, want 0", got)
	}
	forgetMembership()
}
