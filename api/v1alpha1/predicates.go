package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
)

// What an EtcdMember says, read the same way by the agents, the plugin and the tests. These are
// part of the API: a client that reads the objects itself should apply the same tests.

// LeaveAsked tells whether spec asks for the removal of the member the object records: spec.leave
// is set and spec.memberID, when given, names status.memberID.
func (m *EtcdMember) LeaveAsked() bool {
	return m.Spec.Leave && (m.Spec.MemberID == "" || m.Spec.MemberID == m.Status.MemberID)
}

// LeavePending tells whether a leave asked for the recorded member (LeaveAsked) has not completed:
// Left is not True yet. A refused or failing request (Left=False) is still pending; the
// controller re-checks it until it completes or is cancelled.
func (m *EtcdMember) LeavePending() bool {
	return m.LeaveAsked() && !meta.IsStatusConditionTrue(m.Status.Conditions, ConditionLeft)
}

// RecordedGone tells whether the object records that its member is out of etcd: Joined is False,
// whatever the reason (removed on request, evicted, or gone by other means). etcd never gives a
// removed member's ID to another member, so only a takeover by a new member (Joined=True with
// the new ID) changes such an object again. An object without a Joined condition records
// nothing yet, and is not gone.
func (m *EtcdMember) RecordedGone() bool {
	return meta.IsStatusConditionFalse(m.Status.Conditions, ConditionJoined)
}

// BoundNode is the Kubernetes Node the member is bound to: spec.nodeName, set by an operator,
// or else status.nodeName, published by the agent on the member's node. "" binds no Node.
func (m *EtcdMember) BoundNode() string {
	if m.Spec.NodeName != "" {
		return m.Spec.NodeName
	}
	return m.Status.NodeName
}

// FindByMemberID returns the object that records member id (status.memberID, lowercase hex), or
// nil. The agents and the leader keep one object per member, so the first match is the one.
func (l *EtcdMemberList) FindByMemberID(id string) *EtcdMember {
	if id == "" {
		return nil
	}
	for i := range l.Items {
		if l.Items[i].Status.MemberID == id {
			return &l.Items[i]
		}
	}
	return nil
}
