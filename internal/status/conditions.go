// Package status holds the status helpers shared by the agent and the membership reconciler.
package status

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Set records a condition with the object's current generation. lastTransitionTime moves only
// when the condition's status changes, so it tells when the member last joined or left.
func Set(m *v1alpha1.EtcdMember, condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: m.Generation,
	})
}

// Get returns the condition of that type, or nil.
func Get(m *v1alpha1.EtcdMember, condType string) *metav1.Condition {
	return meta.FindStatusCondition(m.Status.Conditions, condType)
}

// HasReason tells whether the condition exists with that reason.
func HasReason(m *v1alpha1.EtcdMember, condType, reason string) bool {
	c := Get(m, condType)
	return c != nil && c.Reason == reason
}

// IsTrue tells whether the condition exists and is True.
func IsTrue(m *v1alpha1.EtcdMember, condType string) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, condType)
}

// Remove drops the condition of that type.
func Remove(m *v1alpha1.EtcdMember, condType string) {
	meta.RemoveStatusCondition(&m.Status.Conditions, condType)
}

// Observe copies what etcd's member list says of a listed member into status and marks it
// Joined. status.name is kept only where the etcd name differs from the object's name.
func Observe(m *v1alpha1.EtcdMember, member etcd.Member) {
	m.Status.MemberID = etcd.IDString(member.ID)
	m.Status.Name = ""
	if member.Name != m.Name {
		m.Status.Name = member.Name
	}
	m.Status.PeerURLs = member.PeerURLs
	m.Status.ClientURLs = member.ClientURLs
	m.Status.IsLearner = member.IsLearner
	if !IsTrue(m, v1alpha1.ConditionJoined) {
		Set(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList,
			fmt.Sprintf("Member %s is in etcd's member list.", m.Status.MemberID))
	}
}

// ClearLeave drops a completed leave request from an object that is being taken over for a new
// member: spec.leave and spec.memberID, the controller's reason annotation and the force
// annotation. Force is for
// the one removal it was set for: kept, every later leave of the re-joined node would skip the
// quorum guard. It tells whether spec or metadata changed, which then needs an update of its own
// before the status write.
func ClearLeave(m *v1alpha1.EtcdMember) bool {
	_, auto := m.Annotations[v1alpha1.AnnotationLeaveReason]
	_, forced := m.Annotations[v1alpha1.AnnotationForceLeave]
	if !m.Spec.Leave && m.Spec.MemberID == "" && !auto && !forced {
		return false
	}
	m.Spec.Leave, m.Spec.MemberID = false, ""
	delete(m.Annotations, v1alpha1.AnnotationLeaveReason)
	delete(m.Annotations, v1alpha1.AnnotationForceLeave)
	return true
}

// Rejoin records that the node of an object came back as a new member: the object now tracks
// member, and what was recorded of the earlier member (its leave, health, promotion, the peer
// URLs its agent advertised) goes. It returns the message of the Joined condition, for an Event.
//
// The advertisement goes with the rest because the leader makes etcd record advertised peer URLs:
// kept, a node rebuilt at a new address would be moved back to its old one by whoever took the
// object over before its new agent published its own. The Node name goes for the same reason: the
// new member's agent publishes its own, and until then no Node's deletion removes the new member.
func Rejoin(m *v1alpha1.EtcdMember, member etcd.Member) string {
	previous := m.Status.MemberID
	Observe(m, member)
	m.Status.ObservedGeneration = m.Generation
	for _, c := range []string{v1alpha1.ConditionLeft, v1alpha1.ConditionPromoted, v1alpha1.ConditionHealthy, v1alpha1.ConditionRemovable, v1alpha1.ConditionGuardSkipped,
		v1alpha1.ConditionUnreachableLeaveHeld} {
		Remove(m, c)
	}
	m.Status.Health = nil
	m.Status.AdvertisedPeerURLs, m.Status.NodeName = nil, ""
	msg := fmt.Sprintf("Re-joined as member %s; the earlier member %s is gone from etcd.", m.Status.MemberID, previous)
	Set(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonRejoined, msg)
	return msg
}
