package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
)

// Event reasons of --advertise-peer-urls. They live here rather than in api/v1alpha1 because
// only the agent on the member's own node writes them.
const (
	ReasonPeerURLsUpdated      = "PeerURLsUpdated"
	ReasonPeerURLsUpdateFailed = "PeerURLsUpdateFailed"
)

// advertise makes etcd record the peer URLs this node advertises now. etcd never updates its
// record by itself: after an address change the other members keep dialling the old address. It
// runs before the object is read, so that fixing etcd does not wait for the API server, and
// returns self as etcd records it afterwards, with the Event to write about the object. A failure
// is logged and retried at the next sync; its Warning is written only when etcd's error changes,
// so a node that cannot update for an hour leaves one Event, not one per sync.
func (r *Registrar) advertise(ctx context.Context, self etcd.Member) (etcd.Member, peerURLEvent) {
	if len(r.PeerURLs) == 0 || peerurl.SameSet(self.PeerURLs, r.PeerURLs) {
		return self, peerURLEvent{}
	}
	id := etcd.IDString(self.ID)
	log := logf.FromContext(ctx).WithValues("memberID", id, "from", self.PeerURLs, "to", r.PeerURLs)
	change := fmt.Sprintf("%s -> %s", strings.Join(self.PeerURLs, ","), strings.Join(r.PeerURLs, ","))
	if err := r.Etcd.MemberUpdate(ctx, self.ID, r.PeerURLs); err != nil {
		log.Error(err, "Updating the local member's peer URLs failed; retrying at the next sync")
		if msg := err.Error(); msg != r.peerUpdateErr {
			r.peerUpdateErr = msg
			return self, peerURLEvent{warning: true, reason: ReasonPeerURLsUpdateFailed,
				note: fmt.Sprintf("Updating the peer URLs of member %s (%s) failed: %v", id, change, err)}
		}
		return self, peerURLEvent{}
	}
	r.peerUpdateErr = ""
	log.Info("Updated the local member's peer URLs")
	self.PeerURLs = slices.Clone(r.PeerURLs)
	return self, peerURLEvent{reason: ReasonPeerURLsUpdated,
		note: fmt.Sprintf("Updated the peer URLs of member %s: %s", id, change)}
}

// peerURLEvent is an Event advertise has to write once the object is known; no reason, no Event.
type peerURLEvent struct {
	warning      bool
	reason, note string
}

func (e peerURLEvent) record(ctx context.Context, rec *events.Recorder, obj *v1alpha1.EtcdMember) {
	switch {
	case e.reason == "":
	case e.warning:
		rec.Warning(ctx, obj, e.reason, "UpdatePeerURLs", e.note)
	default:
		rec.Normal(ctx, obj, e.reason, "UpdatePeerURLs", e.note)
	}
}
