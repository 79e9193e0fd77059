// Endpoint identity: the local etcd endpoint must keep answering as the member this node
// registered; one that starts answering as another node's member (a VIP, a shared configuration)
// is refused, never followed.

package agent

import (
	"context"
	"fmt"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// identityError means the local etcd endpoint answers as another member than the one this node
// registered (pinned), and the pinned member is still in etcd: the endpoint is a VIP or load
// balancer that now lands on another node, or two nodes share a configuration. Taking the answer
// would make this agent act for another node's member: a leader could remove its own member
// thinking it another's, and --on-removed-exec could run on the wrong node.
type identityError struct {
	object           string
	endpoint         string
	pinned, answered uint64
}

func (e identityError) Error() string {
	return fmt.Sprintf("the local etcd endpoint %s answers as member %s, but this node's member %s (EtcdMember %s) is still in etcd's member list",
		e.endpoint, etcd.IDString(e.answered), etcd.IDString(e.pinned), e.object)
}

// note is the Warning's note: what happened, what the agent does about it, what to fix.
func (e identityError) note() string {
	return fmt.Sprintf("The local etcd endpoint %s answers as member %s, but this node's member %s is still in etcd's member list. "+
		"The agent keeps member %s, is not ready and does not lead until the endpoint answers as %s again. "+
		"--etcd-endpoints must name this node's own etcd, not a VIP or load balancer; if the node was rebuilt, remove member %s from etcd.",
		e.endpoint, etcd.IDString(e.answered), etcd.IDString(e.pinned), etcd.IDString(e.pinned), etcd.IDString(e.pinned), etcd.IDString(e.pinned))
}

// identityHolds tells whether the local endpoint answering as member answered is consistent with
// the member pinned earlier (0: none yet). Another member is accepted only once the pinned one is
// gone from etcd: the node was rebuilt and re-joined under a new ID.
func identityHolds(pinned, answered uint64, members []etcd.Member) bool {
	if pinned == 0 || answered == pinned {
		return true
	}
	_, present := etcd.FindMember(members, pinned)
	return !present
}

// pinnedBy returns the member ID obj pins this node to across agent restarts: the object named by
// --name was registered by this node's agent (the leader did not discover it), so the member it
// records is this node's for as long as it is in etcd. Without --name the object's name comes
// from whichever member answers, and pins nothing.
func pinnedBy(obj *v1alpha1.EtcdMember, name string) (uint64, bool) {
	if name == "" || obj.Labels[v1alpha1.LabelDiscovered] == "true" {
		return 0, false
	}
	id, err := etcd.ParseID(obj.Status.MemberID)
	return id, err == nil
}

// warnIdentity writes the LocalMemberChanged Warning about obj, or about e.object when obj is nil,
// once per distinct mismatch.
func (r *Registrar) warnIdentity(ctx context.Context, obj *v1alpha1.EtcdMember, e identityError) {
	note := e.note()
	if note == r.identityWarned {
		return
	}
	if obj == nil {
		obj = &v1alpha1.EtcdMember{}
		if err := r.get(ctx, e.object, obj); err != nil {
			logf.FromContext(ctx).Error(err, "Reading the object to warn about a changed local member failed; warning at the next sync", "object", e.object)
			return
		}
	}
	r.Events.Warning(ctx, obj, v1alpha1.ReasonLocalMemberChanged, "Register", note)
	r.identityWarned = note
}
