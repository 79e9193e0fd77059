package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/status"
)

func member(leave bool, conds ...metav1.Condition) *v1alpha1.EtcdMember {
	m := &v1alpha1.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: "node-2", Generation: 2},
		Spec:       v1alpha1.EtcdMemberSpec{Leave: leave},
		Status:     v1alpha1.EtcdMemberStatus{MemberID: "2c9ac577d3e7c665"},
	}
	for _, c := range conds {
		status.Set(m, c.Type, c.Status, c.Reason, c.Message)
	}
	return m
}

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: "m"}
}

func TestMarkGone(t *testing.T) {
	joined := cond(v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	cases := []struct {
		name       string
		in         *v1alpha1.EtcdMember
		joined     string
		leftStatus metav1.ConditionStatus
		leftReason string
	}{
		{"vanished without a request", member(false, joined), v1alpha1.ReasonNotFound, "", ""},
		{"already gone when asked to leave", member(true, joined), v1alpha1.ReasonNotFound, metav1.ConditionTrue, v1alpha1.ReasonNotFound},
		{"leader stopped between removing and writing status", member(true, joined,
			cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonRemoving)),
			v1alpha1.ReasonRemoved, metav1.ConditionTrue, v1alpha1.ReasonRemoved},
		{"removed earlier stays removed", member(true,
			cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved),
			cond(v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)),
			v1alpha1.ReasonRemoved, metav1.ConditionTrue, v1alpha1.ReasonRemoved},
		{"refused request whose member then vanished", member(true, joined,
			cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)),
			v1alpha1.ReasonNotFound, metav1.ConditionTrue, v1alpha1.ReasonNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			markGone(tc.in)
			j := status.Get(tc.in, v1alpha1.ConditionJoined)
			if j.Status != metav1.ConditionFalse || j.Reason != tc.joined {
				t.Errorf("Joined = %s/%s, want False/%s", j.Status, j.Reason, tc.joined)
			}
			if j.ObservedGeneration != 2 {
				t.Errorf("Joined.observedGeneration = %d", j.ObservedGeneration)
			}
			l := status.Get(tc.in, v1alpha1.ConditionLeft)
			switch {
			case tc.leftReason == "" && l != nil:
				t.Errorf("Left set without a request: %+v", l)
			case tc.leftReason != "" && (l == nil || l.Status != tc.leftStatus || l.Reason != tc.leftReason):
				t.Errorf("Left = %+v, want %s/%s", l, tc.leftStatus, tc.leftReason)
			}
		})
	}
}

func TestChangedAnnouncesEachStateOnce(t *testing.T) {
	before := member(true, cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk))
	same := before.DeepCopy()
	if c := changed(before, same, v1alpha1.ConditionLeft); c != nil {
		t.Errorf("an unchanged condition was announced: %+v", c)
	}
	after := before.DeepCopy()
	removed(after)
	c := changed(before, after, v1alpha1.ConditionLeft)
	if c == nil || c.Reason != v1alpha1.ReasonRemoved {
		t.Errorf("the transition to Removed was not announced: %+v", c)
	}
	fresh := member(true)
	if c := changed(fresh, fresh.DeepCopy(), v1alpha1.ConditionLeft); c != nil {
		t.Errorf("an absent condition was announced: %+v", c)
	}
}
