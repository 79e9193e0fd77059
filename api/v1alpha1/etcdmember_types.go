package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdMemberSpec is what an operator asks of a member.
type EtcdMemberSpec struct {
	// leave asks for this member's removal from etcd. The membership reconciler removes the member
	// recorded in status.memberID (never a member found by name) and reports progress and outcome in
	// the Left condition. Setting it back to false cancels a request that has not completed yet.
	// +kubebuilder:default=false
	// +optional
	Leave bool `json:"leave"`

	// memberID, when set, is the member the leave request is for, in lowercase hex as
	// status.memberID records it. The controller removes a member only while status.memberID still
	// names it: a request re-applied after the node re-joined (a late automation patch, a GitOps
	// tool) then answers Left=False/MemberMismatch and removes nothing. kubectl etcdmember leave
	// always sets it; taking the object over for a re-joined node clears it with spec.leave.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{1,16}$`
	// +optional
	MemberID string `json:"memberID,omitempty"`

	// nodeName binds the member to a Kubernetes Node by the operator, for a member no agent
	// binds (a discovered object, or etcd run where no agent has --node-name). When set it wins
	// over status.nodeName. With the agents' --leave-on-node-delete, deleting that Node asks this
	// member to leave. Nothing is ever bound by etcd name, hostname or address.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// EtcdMemberStatus is what etcdmember observed of the member. Only the agents write it: the
// agent on the member's node advertisedPeerURLs and nodeName, the leading agent everything else, once the
// object records a member; binding it to a member (memberID) sets the whole status.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.memberID) || has(self.memberID)",message="memberID cannot be unset once recorded"
type EtcdMemberStatus struct {
	// memberID is the etcd member ID in lowercase hex, as etcdctl prints it.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{1,16}$`
	// +optional
	MemberID string `json:"memberID,omitempty"`

	// name is the member's name in etcd. It differs from the object's name only when the etcd
	// name is not a valid object name.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Name string `json:"name,omitempty"`

	// peerURLs are the URLs the other members reach this member on, as etcd records them.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.all(u, isURL(u) && url(u).getScheme() in ['http', 'https', 'unix', 'unixs'])",message="peerURLs must be http(s) or unix(s) URLs"
	// +listType=atomic
	// +optional
	PeerURLs []string `json:"peerURLs,omitempty"`

	// clientURLs are the URLs clients reach this member on. Empty while the member has never
	// started.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.all(u, isURL(u) && url(u).getScheme() in ['http', 'https', 'unix', 'unixs'])",message="clientURLs must be http(s) or unix(s) URLs"
	// +listType=atomic
	// +optional
	ClientURLs []string `json:"clientURLs,omitempty"`

	// advertisedPeerURLs are the peer URLs the agent on the member's node advertises
	// (--advertise-peer-urls), normalized, written only once that agent found an etcd of this
	// cluster answering on each of them and none of them recorded for another member. When they differ from peerURLs, the leading agent
	// updates etcd's record, one membership change at a time and only while losing the member
	// would keep quorum. Empty when the node advertises nothing.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.all(u, isURL(u) && url(u).getScheme() in ['http', 'https'])",message="advertisedPeerURLs must be http(s) URLs"
	// +listType=atomic
	// +optional
	AdvertisedPeerURLs []string `json:"advertisedPeerURLs,omitempty"`

	// nodeName is the Kubernetes Node the agent on the member's node runs on (its --node-name, by
	// default the NODE_NAME environment variable), written by that agent only. Empty when the
	// agent names no Node. spec.nodeName, when set, wins over it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// isLearner is true while the member is a non-voting learner.
	// +optional
	IsLearner bool `json:"isLearner"`

	// health is the leading agent's latest probe of the member. It is rewritten when something an
	// operator acts on changes (reachability, leadership, raft term, alarms, learner state) and
	// otherwise refreshed at most every --health-refresh-interval, so raftIndex and dbSizeBytes
	// may lag by that much. Absent until the first probe, and once the member has left etcd.
	// +optional
	Health *MemberHealth `json:"health,omitempty"`

	// observedGeneration is the metadata.generation the status was last computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Joined (is the member in etcd?), Healthy (does it answer and serve?), Promoted
	// (how is a learner's way to voter going?), Removable (would removing it keep quorum?) and Left
	// (how is the leave request going?).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MemberHealth is what a probe of the member's client URLs found.
type MemberHealth struct {
	// reachable is true when the member answered a status request within the probe timeout.
	Reachable bool `json:"reachable"`

	// leader is true when the member leads etcd's raft group.
	Leader bool `json:"leader"`

	// raftTerm is the member's raft term; a term that keeps rising means repeated elections.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RaftTerm int64 `json:"raftTerm,omitempty"`

	// raftIndex is the member's committed raft index; compare members to see one falling behind.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RaftIndex int64 `json:"raftIndex,omitempty"`

	// dbSizeBytes is the size of the member's backend database file.
	// +kubebuilder:validation:Minimum=0
	// +optional
	DBSizeBytes int64 `json:"dbSizeBytes,omitempty"`

	// alarms are the alarms active for this member: NOSPACE (the backend quota is exhausted and
	// etcd refuses writes) or CORRUPT (the member's data disagrees with the others').
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Enum=NOSPACE;CORRUPT
	// +listType=set
	// +optional
	Alarms []string `json:"alarms,omitempty"`

	// lastProbeTime is when the probe these figures come from was made.
	LastProbeTime metav1.Time `json:"lastProbeTime"`
}

// EtcdMember is one etcd member, registered by the agent on its node. Setting spec.leave asks the
// leader-elected controller to remove the member from etcd; the object then stays as history until
// it is deleted, and is taken over again if the node re-joins under the same name.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=em,categories=etcd
// +kubebuilder:printcolumn:name="Member ID",type=string,JSONPath=`.status.memberID`
// +kubebuilder:printcolumn:name="Peer URLs",type=string,JSONPath=`.status.peerURLs`
// +kubebuilder:printcolumn:name="Learner",type=boolean,JSONPath=`.status.isLearner`
// +kubebuilder:printcolumn:name="Joined",type=string,JSONPath=`.status.conditions[?(@.type=="Joined")].status`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Leader",type=boolean,JSONPath=`.status.health.leader`
// +kubebuilder:printcolumn:name="Leave",type=boolean,JSONPath=`.spec.leave`
// +kubebuilder:printcolumn:name="Left",type=string,JSONPath=`.status.conditions[?(@.type=="Left")].reason`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdMember struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec EtcdMemberSpec `json:"spec,omitempty"`
	// +optional
	Status EtcdMemberStatus `json:"status,omitempty"`
}

// EtcdMemberList is a list of EtcdMember.
// +kubebuilder:object:root=true
type EtcdMemberList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdMember `json:"items"`
}
