package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cond(condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason}
}

func member(spec EtcdMemberSpec, memberID string, conds ...metav1.Condition) *EtcdMember {
	return &EtcdMember{Spec: spec, Status: EtcdMemberStatus{MemberID: memberID, Conditions: conds}}
}

func TestLeaveAsked(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *EtcdMember
		want bool
	}{
		{"no request", member(EtcdMemberSpec{}, "a1"), false},
		{"leave without memberID", member(EtcdMemberSpec{Leave: true}, "a1"), true},
		{"leave for the recorded member", member(EtcdMemberSpec{Leave: true, MemberID: "a1"}, "a1"), true},
		{"leave for an earlier member", member(EtcdMemberSpec{Leave: true, MemberID: "a1"}, "b2"), false},
		{"memberID alone", member(EtcdMemberSpec{MemberID: "a1"}, "a1"), false},
	} {
		if got := tc.m.LeaveAsked(); got != tc.want {
			t.Errorf("%s: LeaveAsked() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLeavePending(t *testing.T) {
	asked := EtcdMemberSpec{Leave: true, MemberID: "a1"}
	for _, tc := range []struct {
		name string
		m    *EtcdMember
		want bool
	}{
		{"no request", member(EtcdMemberSpec{}, "a1"), false},
		{"not judged yet", member(asked, "a1"), true},
		{"refused", member(asked, "a1", cond(ConditionLeft, metav1.ConditionFalse, ReasonQuorumAtRisk)), true},
		{"failing", member(asked, "a1", cond(ConditionLeft, metav1.ConditionFalse, ReasonEtcdError)), true},
		{"handing over", member(asked, "a1", cond(ConditionLeft, metav1.ConditionFalse, ReasonHandingOver)), true},
		{"left unknown", member(asked, "a1", cond(ConditionLeft, metav1.ConditionUnknown, ReasonEtcdError)), true},
		{"removed", member(asked, "a1",
			cond(ConditionJoined, metav1.ConditionFalse, ReasonRemoved), cond(ConditionLeft, metav1.ConditionTrue, ReasonRemoved)), false},
		{"gone by other means", member(asked, "a1", cond(ConditionLeft, metav1.ConditionTrue, ReasonNotFound)), false},
		{"asked for an earlier member", member(asked, "b2"), false},
		{"cancelled, refusal still shown", member(EtcdMemberSpec{MemberID: "a1"}, "a1",
			cond(ConditionLeft, metav1.ConditionFalse, ReasonQuorumAtRisk)), false},
	} {
		if got := tc.m.LeavePending(); got != tc.want {
			t.Errorf("%s: LeavePending() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRecordedGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *EtcdMember
		want bool
	}{
		{"never observed", member(EtcdMemberSpec{}, ""), false},
		{"joined", member(EtcdMemberSpec{}, "a1", cond(ConditionJoined, metav1.ConditionTrue, ReasonInMemberList)), false},
		{"re-joined", member(EtcdMemberSpec{}, "a1", cond(ConditionJoined, metav1.ConditionTrue, ReasonRejoined)), false},
		{"joined unknown", member(EtcdMemberSpec{}, "a1", cond(ConditionJoined, metav1.ConditionUnknown, ReasonInMemberList)), false},
		{"removed", member(EtcdMemberSpec{Leave: true}, "a1", cond(ConditionJoined, metav1.ConditionFalse, ReasonRemoved)), true},
		{"not found", member(EtcdMemberSpec{}, "a1", cond(ConditionJoined, metav1.ConditionFalse, ReasonNotFound)), true},
		{"evicted", member(EtcdMemberSpec{}, "a1", cond(ConditionJoined, metav1.ConditionFalse, ReasonEvicted)), true},
		{"only Left=True", member(EtcdMemberSpec{Leave: true}, "a1", cond(ConditionLeft, metav1.ConditionTrue, ReasonRemoved)), false},
	} {
		if got := tc.m.RecordedGone(); got != tc.want {
			t.Errorf("%s: RecordedGone() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFindByMemberID(t *testing.T) {
	list := &EtcdMemberList{Items: []EtcdMember{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: EtcdMemberStatus{MemberID: "a1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Status: EtcdMemberStatus{MemberID: "b2"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-2-dup"}, Status: EtcdMemberStatus{MemberID: "b2"}},
	}}
	for _, tc := range []struct {
		id   string
		want string // object name, "" for none
	}{
		{"a1", "node-1"},
		{"b2", "node-2"},
		{"c3", ""},
		{"A1", ""},
		{"", ""},
	} {
		got := list.FindByMemberID(tc.id)
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("FindByMemberID(%q) = %s, want none", tc.id, got.Name)
		case tc.want != "" && got == nil:
			t.Errorf("FindByMemberID(%q) found none, want %s", tc.id, tc.want)
		case tc.want != "" && got.Name != tc.want:
			t.Errorf("FindByMemberID(%q) = %s, want %s", tc.id, got.Name, tc.want)
		}
	}

	// The result points into the list, so that a caller can update the object it found.
	list.FindByMemberID("a1").Spec.Leave = true
	if !list.Items[1].Spec.Leave {
		t.Errorf("FindByMemberID returned a copy, not the list's item")
	}
	if (&EtcdMemberList{}).FindByMemberID("a1") != nil {
		t.Errorf("FindByMemberID on an empty list found an object")
	}
}
