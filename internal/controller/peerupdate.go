package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
)

// updatePeerURLs makes etcd record the peer URLs the member's node advertises
// (status.advertisedPeerURLs, written by that node's agent once its own etcd answered on them).
// It is a membership change like any other: one at a time, fenced, and judged on the cluster as
// it stands. A wrong URL cuts the member off its peers, so the update goes ahead only while losing
// the member would keep quorum, and the next one waits until a probe round after it has shown
// what it did. It tells whether it changed etcd (the reconcile then ends, one change being
// enough), and when to look again at an update that waits.
func (r *MembershipReconciler) updatePeerURLs(ctx context.Context, m *v1alpha1.EtcdMember, v view) (bool, ctrl.Result, error) {
	want := m.Status.AdvertisedPeerURLs
	if len(want) == 0 || peerurl.SameSet(v.target.PeerURLs, want) {
		r.peerNotices.forget(m.UID)
		return false, ctrl.Result{}, nil
	}
	fromTo := fmt.Sprintf("%s -> %s", strings.Join(v.target.PeerURLs, ","), strings.Join(want, ","))
	recheck := ctrl.Result{RequeueAfter: r.RecheckInterval}
	if owner, ok := etcd.PeerURLHolder(v.members, v.target.ID, want); ok {
		r.peerNotices.warn(ctx, r, m, v1alpha1.ReasonPeerURLsUpdateRefused, fromTo, fmt.Sprintf(
			"Not updating the peer URLs of member %s (%s): member %s already has one of them. Fix --advertise-peer-urls on this member's node.",
			m.Status.MemberID, fromTo, etcd.IDString(owner.ID)))
		return false, recheck, nil
	}
	if !v.probed || !r.settledSince(v.probes, v.members, r.lastPeerUpdate) {
		return false, recheck, nil
	}
	if !v.target.IsLearner {
		if verdict := quorum.CheckRemoval(quorumVoters(v.members, v.probes), v.target.ID, m.Name); !verdict.Allowed {
			r.peerNotices.warn(ctx, r, m, v1alpha1.ReasonPeerURLsUpdateRefused, fromTo, fmt.Sprintf(
				"Not updating the peer URLs of member %s (%s) yet: should the new URLs not work, losing the member would cost quorum (%s). Re-checked every %s; bring the unhealthy members back.",
				m.Status.MemberID, fromTo, verdict.Message, r.RecheckInterval))
			return false, recheck, nil
		}
	}
	stillAdvertised := func(fresh *v1alpha1.EtcdMember) bool {
		return peerurl.SameSet(fresh.Status.AdvertisedPeerURLs, want)
	}
	update := change{verb: "updating the peer URLs of", wanted: stillAdvertised,
		call: func(ctx context.Context) error { return r.Etcd.MemberUpdate(ctx, v.target.ID, want) }}
	err := r.makeChange(ctx, m, v.target, update, nil)
	if errors.Is(err, ErrFenced) {
		return false, ctrl.Result{}, err
	}
	if err != nil {
		r.peerNotices.warn(ctx, r, m, v1alpha1.ReasonPeerURLsUpdateFailed, fromTo, fmt.Sprintf(
			"etcd did not update the peer URLs of member %s (%s); retrying with back-off. etcd said: %v", m.Status.MemberID, fromTo, err))
		return false, ctrl.Result{}, err
	}
	// Compared with the probes' start times, which are wall-clock.
	r.lastPeerUpdate = time.Now()
	logf.FromContext(ctx).Info("Updated peer URLs", "memberID", m.Status.MemberID, "from", v.target.PeerURLs, "to", want)
	r.Events.Normal(ctx, m, v1alpha1.ReasonPeerURLsUpdated, "UpdatePeerURLs",
		fmt.Sprintf("Updated the peer URLs of member %s: %s", m.Status.MemberID, fromTo))
	r.peerNotices.forget(m.UID)
	m.Status.PeerURLs = slices.Clone(want)
	return true, ctrl.Result{}, nil
}

// settledSince tells whether every voter's latest probe started at least a recheck interval
// after the last change, so that a member a wrong URL cut off has had time to show it.
func (r *MembershipReconciler) settledSince(probes Probes, members []etcd.Member, last time.Time) bool {
	if last.IsZero() {
		return true
	}
	for _, mem := range members {
		if h, ok := probes.Members[mem.ID]; !mem.IsLearner && (!ok || h.At.Before(last.Add(r.RecheckInterval))) {
			return false
		}
	}
	return true
}

// notices writes a Warning once per reason and change per object: a refusal re-checked every few
// seconds, or a failure retried with etcd's error worded differently each time, must not become
// an Event each time.
type notices map[types.UID]string

func (n *notices) warn(ctx context.Context, r *MembershipReconciler, m *v1alpha1.EtcdMember, reason, change, msg string) {
	if (*n)[m.UID] == reason+" "+change {
		return
	}
	if *n == nil {
		*n = notices{}
	}
	(*n)[m.UID] = reason + " " + change
	logf.FromContext(ctx).Info("Peer URL update not done", "memberID", m.Status.MemberID, "reason", reason, "detail", msg)
	r.Events.Warning(ctx, m, reason, "UpdatePeerURLs", msg)
}

func (n notices) forget(uid types.UID) { delete(n, uid) }
