package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
)

// updatePeerURLs makes etcd record the peer URLs the member's node advertises
// (status.advertisedPeerURLs, written by that node's agent once its own etcd answered on them),
// an update decide cleared (decidePeerURLs says when one waits). It is a membership change like
// any other: one at a time, fenced, and recorded.
func (r *MembershipReconciler) updatePeerURLs(ctx context.Context, m *v1alpha1.EtcdMember, v view) (ctrl.Result, error) {
	want := m.Status.AdvertisedPeerURLs
	fromTo := peerChange(v.target, want)
	stillAdvertised := func(fresh *v1alpha1.EtcdMember) bool {
		return peerurl.SameSet(fresh.Status.AdvertisedPeerURLs, want)
	}
	update := change{verb: "updating the peer URLs of", wanted: stillAdvertised,
		call: func(ctx context.Context) error { return r.Etcd.MemberUpdate(ctx, v.target.ID, want) }}
	err := r.makeChange(ctx, m, v.target, update, nil)
	if errors.Is(err, ErrFenced) {
		return ctrl.Result{}, err
	}
	if err != nil {
		r.peerNotices.warn(ctx, r, m, v1alpha1.ReasonPeerURLsUpdateFailed, fromTo, fmt.Sprintf(
			"etcd did not update the peer URLs of member %s (%s); retrying with back-off. etcd said: %v", m.Status.MemberID, fromTo, err))
		return ctrl.Result{}, err
	}
	// Compared with the probes' start times, which are wall-clock.
	r.lastPeerUpdate = time.Now()
	logf.FromContext(ctx).Info("Updated peer URLs", "memberID", m.Status.MemberID, "from", v.target.PeerURLs, "to", want)
	r.Events.Normal(ctx, m, v1alpha1.ReasonPeerURLsUpdated, "UpdatePeerURLs",
		fmt.Sprintf("Updated the peer URLs of member %s: %s", m.Status.MemberID, fromTo))
	r.peerNotices.forget(m.UID)
	m.Status.PeerURLs = slices.Clone(want)
	return ctrl.Result{}, nil
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
