package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// advertisement is what a sync writes to status.advertisedPeerURLs, from which the leading agent
// updates etcd's record. The agent never updates etcd itself: a peer-URL change is a membership
// change, and a wrong one cuts the member off its peers, so the leader makes it under its change
// lock and quorum check, one at a time.
type advertisement struct {
	// urls replaces the field unless keep is set; nil empties it.
	urls []string
	// keep leaves the field as it is: the URLs failed the check, and whatever was published
	// before is still the best that was verified.
	keep bool
	// warning is the note of a PeerURLsUnverified Warning; empty when the check passed.
	warning string
}

// advertise checks every URL of --advertise-peer-urls: none may be another member's peer URL,
// and the local etcd must answer on each as a member of this cluster. Only URLs that all pass
// are published; a URL nothing listens on, or another member's, would otherwise be applied by
// the leader and cost this member its peers. Without the flag the field is emptied, so that a
// flag taken away stops the leader from acting on it.
func (r *Registrar) advertise(ctx context.Context, view localView) advertisement {
	if len(r.PeerURLs) == 0 {
		return advertisement{}
	}
	problems := r.checkPeerURLs(ctx, view)
	if len(problems) == 0 {
		return advertisement{urls: slices.Clone(r.PeerURLs)}
	}
	details := make([]string, 0, len(problems))
	for _, p := range problems {
		details = append(details, p.Error())
	}
	logf.FromContext(ctx).Info("Not publishing the advertised peer URLs: they failed the check; checking again at the next sync",
		"memberID", etcd.IDString(view.self.ID), "advertisePeerURLs", r.PeerURLs, "problems", details)
	return advertisement{keep: true, warning: unverifiedNote(r.PeerURLs, problems)}
}

// checkPeerURLs returns what is wrong with each advertised URL; none when all pass.
func (r *Registrar) checkPeerURLs(ctx context.Context, view localView) []*etcd.PeerURLError {
	var problems []*etcd.PeerURLError
	for _, u := range r.PeerURLs {
		if owner, taken := etcd.PeerURLHolder(view.members, view.self.ID, []string{u}); taken {
			problems = append(problems, &etcd.PeerURLError{URL: u,
				Problem: fmt.Sprintf("is the peer URL of member %s (%s) in etcd's member list", etcd.IDString(owner.ID), owner.Name)})
			continue
		}
		err := r.Etcd.CheckPeerURL(ctx, u, view.clusterID)
		var pe *etcd.PeerURLError
		switch {
		case err == nil:
		case errors.As(err, &pe):
			problems = append(problems, pe)
		default:
			problems = append(problems, &etcd.PeerURLError{URL: u, Problem: "could not be checked", Err: err})
		}
	}
	return problems
}

// unverifiedNote is the Warning's note. It names each URL with its problem but not the error
// behind it (addresses, ports, timings), so that it stays the same while the cause does and one
// cause gives one Event; the detail is in the agent's log.
func unverifiedNote(urls []string, problems []*etcd.PeerURLError) string {
	parts := make([]string, 0, len(problems))
	for _, p := range problems {
		parts = append(parts, p.URL+" "+p.Problem)
	}
	return fmt.Sprintf("Not publishing --advertise-peer-urls %s, so etcd's record is not changed: %s. "+
		"Make the local etcd listen on every advertised URL (--listen-peer-urls, and set --initial-advertise-peer-urls "+
		"from the same source as --advertise-peer-urls), or correct --advertise-peer-urls; the agent's log has the errors.",
		strings.Join(urls, ","), strings.Join(parts, "; "))
}

// apply writes the advertisement to the object's status.
func (a advertisement) apply(obj *v1alpha1.EtcdMember) {
	if !a.keep {
		obj.Status.AdvertisedPeerURLs = a.urls
	}
}

// recordAdvertisement writes the Warning about obj once per distinct failure: a node whose URLs fail for an
// hour leaves one Event, not one per sync. A passing check forgets the last failure, so that its
// return is reported again.
func (r *Registrar) recordAdvertisement(ctx context.Context, obj *v1alpha1.EtcdMember, a advertisement) {
	if a.warning == r.peerWarned {
		return
	}
	r.peerWarned = a.warning
	if a.warning != "" {
		r.Events.Warning(ctx, obj, v1alpha1.ReasonPeerURLsUnverified, "CheckPeerURLs", a.warning)
	}
}
