package v1alpha1

// Condition types of an EtcdMember.
const (
	// ConditionJoined is True while the member recorded in status.memberID is in etcd's member list.
	ConditionJoined = "Joined"

	// ConditionLeft reports a leave request: False while it is pending, refused or failing (the
	// reason says which), True once the member is out of etcd. Absent when no leave was asked for.
	ConditionLeft = "Left"
)

// Reasons of the Joined condition.
const (
	// ReasonInMemberList (Joined=True): etcd lists the member.
	ReasonInMemberList = "InMemberList"

	// ReasonRejoined (Joined=True): the node came back as a new member under the same name; the
	// object now tracks the new member ID and the earlier leave is complete.
	ReasonRejoined = "Rejoined"

	// ReasonRemoved (Joined=False, and Left=True): etcdmember removed the member on request.
	ReasonRemoved = "Removed"

	// ReasonNotFound (Joined=False, and Left=True when a leave was asked for): the member is gone
	// from etcd for another reason, e.g. someone ran etcdctl member remove.
	ReasonNotFound = "NotFound"

	// ReasonEvicted (Joined=False): etcdmember removed a learner that made no progress for
	// --learner-stall-timeout, so that it no longer blocks the next join.
	ReasonEvicted = "Evicted"
)

// Reasons of the Left condition while it is False.
const (
	// ReasonHandingOver: the leading agent runs on this member's own node, so it gives up
	// leadership for another agent to perform the removal.
	ReasonHandingOver = "HandingOver"

	// ReasonNoOtherAgent: no other agent took over leadership, so nobody can remove the member of
	// the node the only agent runs on. Start an agent on another etcd node.
	ReasonNoOtherAgent = "NoOtherAgent"

	// ReasonQuorumAtRisk: removing the member now would leave fewer healthy voters than the quorum
	// of the smaller cluster. The request is re-checked as member health changes.
	ReasonQuorumAtRisk = "QuorumAtRisk"

	// ReasonLastVoter: the member is the cluster's only voter; etcd cannot run without it.
	ReasonLastVoter = "LastVoter"

	// ReasonNoMemberID: the object records no member ID, so there is nothing safe to remove.
	ReasonNoMemberID = "NoMemberID"

	// ReasonMemberMismatch: spec.memberID names another member than the one the object records
	// now (the node re-joined after the request was made), so nothing is removed. Set spec.leave
	// to false, or spec.memberID to status.memberID to remove the new member.
	ReasonMemberMismatch = "MemberMismatch"

	// ReasonEtcdError: etcd refused or failed the removal; the request is retried with back-off.
	// The message is stable; etcd's error is in the Warning Event and the leading agent's log.
	ReasonEtcdError = "EtcdError"
)

// AnnotationForceLeave, set to "true" on an EtcdMember, makes the membership reconciler skip its
// quorum guard for that member. For disaster recovery only: removing a healthy voter while others
// are down can cost the cluster its quorum. etcd's own --strict-reconfig-check still applies, and
// every forced removal is recorded in a Warning Event.
const AnnotationForceLeave = "etcdmember.io/force-leave"

// ReasonForced is the Event reason of a removal that skipped the quorum guard, and the reason of
// ConditionGuardSkipped.
const ReasonForced = "ForcedLeave"

// ConditionGuardSkipped (True, reason ForcedLeave) records that the leader went past the quorum
// guard for the leave request of its observedGeneration, because of AnnotationForceLeave; its
// message quotes the guard's verdict at that moment. It is what says the ForcedLeave Warning was
// written: once per request, whatever the retries and leader changes. It goes at the next leave
// request that is not forced, and at a re-join.
const ConditionGuardSkipped = "GuardSkipped"

// ConditionRemovable is the pre-flight answer for a joined member: would removing it right now
// keep the cluster's quorum? Automation can check it before setting spec.leave. It follows the
// leader's periodic health probes; the leave itself is judged again on a fresh probe.
const ConditionRemovable = "Removable"

// Reasons of the Removable condition.
const (
	// ReasonQuorumKept (Removable=True): the healthy voters left would still make a quorum.
	ReasonQuorumKept = "QuorumKept"
	// ReasonLearner (Removable=True): the member is a learner; removing it costs no vote.
	ReasonLearner = "Learner"
	// ReasonQuorumAtRisk and ReasonLastVoter (Removable=False) mean what they mean for Left.
)

// FinalizerMember is held on an EtcdMember while its member is in etcd, so that deleting the
// object (allowed by the admission policy only once spec.leave is set) waits until the member is
// gone, and the object never disappears while its member still votes. An uninstall (the deletion of
// the CRD, CRDName) is the exception: the leading agent lets go of it, and the member stays.
const FinalizerMember = "etcdmember.io/member"

// FinalizerNode is held by the leading agent, under --leave-on-node-delete, on every Node bound
// to a member that etcd lists (status.nodeName or spec.nodeName), so that deleting the Node asks
// the member to leave and waits until it has left, or for --node-delete-hold at most.
const FinalizerNode = "etcdmember.io/etcd-member"

// Event reasons of the Node lifecycle (--leave-on-node-delete).
const (
	// ReasonNodeDeleted (Normal): the Node bound to the member is being deleted, so the leader
	// asked the member to leave, as kubectl etcdmember leave would.
	ReasonNodeDeleted = "NodeDeleted"
	// ReasonNodeReleasedLeavePending (Warning): the Node's deletion waited --node-delete-hold for
	// the member to leave; the leader let the Node go. The leave stays pending and completes by
	// itself once the quorum guard allows it.
	ReasonNodeReleasedLeavePending = "NodeReleasedLeavePending"
	// ReasonNodeReleasedLeaveCancelled (Normal): the leave asked for the Node's deletion was
	// cancelled (spec.leave set back to false), so the member stays and the Node goes.
	ReasonNodeReleasedLeaveCancelled = "NodeReleasedLeaveCancelled"
)

// LabelDiscovered marks an object the leader created for a member no agent had registered: added
// by hand, left over after an IP change or a wipe, never started, or sharing its name with another.
const LabelDiscovered = "etcdmember.io/discovered"

// ConditionHealthy reports the leading agent's latest probe of the member's client URLs, made
// every --probe-interval. Absent until the first probe and once the member has left etcd.
const ConditionHealthy = "Healthy"

// Reasons of the Healthy condition.
const (
	// ReasonServing (Healthy=True): the member answered, and a voter also served a linearizable
	// read, which needs a leader with quorum.
	ReasonServing = "Serving"

	// ReasonUnreachable (Healthy=False): the member did not answer on its client URLs within the
	// probe timeout: its process is down, stopped, or cut off from the leading agent.
	ReasonUnreachable = "Unreachable"

	// ReasonAnsweredByOther (Healthy=False): another member answered on the member's client URLs
	// (a VIP or load balancer, a shared or reused address), so the member itself is not known to
	// be up; it counts as unhealthy, for the quorum guard too. Give every member client URLs of
	// its own (--advertise-client-urls).
	ReasonAnsweredByOther = "AnsweredByOther"

	// ReasonNotServing (Healthy=False): the member answered but could not serve a linearizable
	// read: it has no leader, or its leader has lost quorum.
	ReasonNotServing = "NotServing"

	// ReasonAlarm (Healthy=False): an alarm (NOSPACE, CORRUPT) is active for the member.
	ReasonAlarm = "Alarm"

	// ReasonNotStarted (Healthy=False; also Promoted=False): the member was added to etcd but has
	// never started, so it has no client URLs to probe.
	ReasonNotStarted = "NotStarted"
)

// ConditionPromoted follows a learner's way to voter. It appears when the leading agent first sees
// the member as a learner: False while it catches up, True once etcdmember promoted it. A learner
// that makes no progress for --learner-stall-timeout is evicted (Joined=False, reason Evicted).
const ConditionPromoted = "Promoted"

// Reasons of the Promoted condition. ReasonNotStarted and ReasonQuorumAtRisk apply too.
const (
	// ReasonCatchingUp (Promoted=False): the learner runs and replicates the log; etcd refuses the
	// promotion until it is close enough to the leader, and the leader retries with back-off.
	ReasonCatchingUp = "CatchingUp"

	// ReasonPromoted (Promoted=True): etcdmember made the learner a voter.
	ReasonPromoted = "Promoted"

	// ReasonVoter (Promoted=True): the member became a voter by other means (etcdctl, another tool).
	ReasonVoter = "Voter"

	// ReasonEvicting (Promoted=False): the learner stalled and is being removed. Seen after a
	// crash, it tells the next leader that the removal may already have happened.
	ReasonEvicting = "Evicting"

	// ReasonStalled (Promoted=False): the learner was evicted for making no progress.
	ReasonStalled = "Stalled"
)

// AnnotationLeaveReason records why the controller itself set spec.leave, under one of the
// opt-in policies --remove-unreachable-after and --leave-on-node-delete. Operators' own requests
// carry no such annotation.
const AnnotationLeaveReason = "etcdmember.io/leave-reason"

// ReasonUnreachableMember is the Event reason of a leave the controller asked for because a
// voter stayed unreachable longer than --remove-unreachable-after.
const ReasonUnreachableMember = "UnreachableMember"

// ConditionUnreachableLeaveHeld is True while --remove-unreachable-after holds back the leave of
// a voter unreachable that long, because etcd's own view does not confirm it down; its reason is
// one of the two below, and the Warning Event of that reason was written when it was set, so a
// new leader does not write it again. It goes once the voter is reachable again or asked to leave.
const ConditionUnreachableLeaveHeld = "UnreachableLeaveHeld"

// Event reasons of a voter that --remove-unreachable-after does not ask to leave although it has
// been unreachable that long, because etcd's own view does not confirm it down, and reasons of
// ConditionUnreachableLeaveHeld. Before asking, the leader reads what every other voter it
// reaches has received from the member; each is written once per outage, across leader changes,
// and the check is repeated every --recheck-interval.
const (
	// ReasonUnreachableFromLeader (Warning): another member's etcd still has an active raft
	// connection to the member, so etcd hears from it and only the path from the leading agent's
	// node to its client URLs is broken. The quorum guard still counts it unhealthy.
	ReasonUnreachableFromLeader = "UnreachableFromLeader"
	// ReasonUnreachableUnconfirmed (Warning): no other voter's metrics could be read, so nothing
	// confirms that etcd no longer hears from the member.
	ReasonUnreachableUnconfirmed = "UnreachableUnconfirmed"
)

// Event reasons of peer-URL updates. The agent on a member's node checks the peer URLs it
// advertises and publishes them in status.advertisedPeerURLs; the leading agent updates etcd's
// record, as one more membership change.
const (
	// ReasonPeerURLsUnverified (agent, Warning): an advertised peer URL is another member's, or no
	// etcd of this cluster answered on it, so the URLs were not published.
	ReasonPeerURLsUnverified = "PeerURLsUnverified"
	// ReasonPeerURLsUpdated (leader, Normal): etcd now records the advertised peer URLs.
	ReasonPeerURLsUpdated = "PeerURLsUpdated"
	// ReasonPeerURLsUpdateRefused (leader, Warning): the update waits, because losing the member
	// to a wrong URL would cost quorum, or because another member already has one of the URLs.
	ReasonPeerURLsUpdateRefused = "PeerURLsUpdateRefused"
	// ReasonPeerURLsUpdateFailed (leader, Warning): etcd refused or failed the update.
	ReasonPeerURLsUpdateFailed = "PeerURLsUpdateFailed"
)

// Event reasons the agent on a member's own node writes.
const (
	// ReasonLocalMemberChanged (agent, Warning): the local etcd endpoint answers as another member
	// while the member this node registered is still in etcd (a VIP or load balancer now landing
	// on another node, or two nodes sharing a configuration). The agent keeps its member, is not
	// ready and does not lead until the endpoint answers as that member again.
	ReasonLocalMemberChanged = "LocalMemberChanged"
	// ReasonOnRemovedExecSucceeded (agent, Normal): the --on-removed-exec command ran and exited 0
	// after the local member was removed on request.
	ReasonOnRemovedExecSucceeded = "OnRemovedExecSucceeded"
	// ReasonOnRemovedExecFailed (agent, Warning): the --on-removed-exec command failed, timed out
	// or could not start. It is not run again for the same member.
	ReasonOnRemovedExecFailed = "OnRemovedExecFailed"
)

// AnnotationOnRemovedRan records on an EtcdMember the member ID the agent's --on-removed-exec
// command was started for. The agent on the member's node writes it before the command starts,
// so the command runs at most once per member whatever the agent restarts or crashes through.
const AnnotationOnRemovedRan = "etcdmember.io/on-removed-ran"

// LeaseName is the Lease in the agents' leader-election namespace (kube-system by default) the
// agents elect their leader with. The agents' RBAC lets them get and update only this Lease.
const LeaseName = "etcdmember-leader"

// Field managers of the agents' writes, as metadata.managedFields records them. Every agent
// writes as FieldManagerAgent about its own member, and the elected leader as FieldManagerLeader
// about every member, so `kubectl get --show-managed-fields` tells the two apart.
//
// Once an object records a member, the two own disjoint fields of its status: the agent
// status.advertisedPeerURLs, the leader everything else. Either may bind an object to a member
// (create it, or take it over for a re-joined node): that write sets the whole status, and is
// made only on an object that records no member still in etcd, re-checked on a fresh read with
// its resourceVersion.
const (
	FieldManagerAgent  = "etcdmember-agent"
	FieldManagerLeader = "etcdmember-leader"
)
