package status

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

func TestSetTransitions(t *testing.T) {
	m := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	Set(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList, "in")
	first := Get(m, v1alpha1.ConditionJoined)
	if first == nil || first.ObservedGeneration != 1 || first.LastTransitionTime.IsZero() {
		t.Fatalf("condition not set with generation and time: %+v", first)
	}
	joinedAt := first.LastTransitionTime
	// Pretend time passed so a wrongly moved timestamp would show.
	m.Status.Conditions[0].LastTransitionTime = metav1.NewTime(joinedAt.Add(-time.Hour))
	joinedAt = m.Status.Conditions[0].LastTransitionTime

	m.Generation = 2
	Set(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonRejoined, "again")
	c := Get(m, v1alpha1.ConditionJoined)
	if !c.LastTransitionTime.Equal(&joinedAt) {
		t.Errorf("same status must keep lastTransitionTime: %v != %v", c.LastTransitionTime, joinedAt)
	}
	if c.Reason != v1alpha1.ReasonRejoined || c.ObservedGeneration != 2 || c.Message != "again" {
		t.Errorf("reason, message and generation must follow: %+v", c)
	}

	Set(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, "gone")
	c = Get(m, v1alpha1.ConditionJoined)
	if c.LastTransitionTime.Equal(&joinedAt) {
		t.Errorf("a status change must move lastTransitionTime")
	}
	if IsTrue(m, v1alpha1.ConditionJoined) || !HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved) {
		t.Errorf("IsTrue/HasReason disagree with %+v", c)
	}

	Set(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "done")
	Remove(m, v1alpha1.ConditionLeft)
	if Get(m, v1alpha1.ConditionLeft) != nil || len(m.Status.Conditions) != 1 {
		t.Errorf("Remove left %+v", m.Status.Conditions)
	}
}

// TestClearLeaveDropsForce: taking an object over for a re-joined node ends the earlier request
// with everything that came with it, the force annotation included.
func TestClearLeaveDropsForce(t *testing.T) {
	cases := []struct {
		name        string
		leave       bool
		annotations map[string]string
		changed     bool
	}{
		{"nothing to clear", false, map[string]string{"other": "kept"}, false},
		{"a request", true, nil, true},
		{"the controller's request", true, map[string]string{v1alpha1.AnnotationLeaveReason: "unreachable"}, true},
		{"a forced request", true, map[string]string{v1alpha1.AnnotationForceLeave: "true", "other": "kept"}, true},
		{"force left over from a completed removal", false, map[string]string{v1alpha1.AnnotationForceLeave: "true"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}, Spec: v1alpha1.EtcdMemberSpec{Leave: tc.leave}}
			if got := ClearLeave(m); got != tc.changed {
				t.Errorf("ClearLeave = %t, want %t", got, tc.changed)
			}
			_, force := m.Annotations[v1alpha1.AnnotationForceLeave]
			_, reason := m.Annotations[v1alpha1.AnnotationLeaveReason]
			if m.Spec.Leave || force || reason {
				t.Errorf("after ClearLeave: leave=%t force=%t reason=%t, want none", m.Spec.Leave, force, reason)
			}
			if tc.annotations["other"] != "" && m.Annotations["other"] != "kept" {
				t.Errorf("an unrelated annotation went: %v", m.Annotations)
			}
		})
	}
}
