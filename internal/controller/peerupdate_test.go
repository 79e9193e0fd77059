package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
)

// TestPeerUpdatesWaitForAProbeRoundAfterTheLast: after one update, the next waits until every
// voter's probe started a recheck interval later, so that a member a wrong URL cut off shows it
// before another member's URLs change.
func TestPeerUpdatesWaitForAProbeRoundAfterTheLast(t *testing.T) {
	r := &MembershipReconciler{RecheckInterval: time.Second}
	last := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	members := []etcd.Member{{ID: 1}, {ID: 2}, {ID: 3, IsLearner: true}}
	probes := func(at1, at2 time.Time) Probes {
		return Probes{Members: map[uint64]etcd.Health{1: {At: at1}, 2: {At: at2}}}
	}
	if !r.settledSince(probes(last, last), members, time.Time{}) {
		t.Fatal("no update yet, yet not settled")
	}
	if r.settledSince(probes(last.Add(2*time.Second), last.Add(500*time.Millisecond)), members, last) {
		t.Fatal("settled although member 2's probe started half a second after the update")
	}
	if !r.settledSince(probes(last.Add(2*time.Second), last.Add(time.Second)), members, last) {
		t.Fatal("not settled although every voter was probed a recheck interval after the update")
	}
}

// TestPeerNoticesOncePerChange: a refusal re-checked every few seconds, or a failure whose error
// text differs on each retry, writes one Event; a new reason or change writes another.
func TestPeerNoticesOncePerChange(t *testing.T) {
	scheme := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r := &MembershipReconciler{Events: &events.Recorder{Client: c, Namespace: "kube-system"}}
	m := member(false)
	m.UID = "u1"
	for i, step := range []struct{ reason, change, msg string }{
		{v1alpha1.ReasonPeerURLsUpdateRefused, "a -> b", "quorum"},
		{v1alpha1.ReasonPeerURLsUpdateRefused, "a -> b", "quorum"},
		{v1alpha1.ReasonPeerURLsUpdateFailed, "a -> b", "etcd said: timeout"},
		{v1alpha1.ReasonPeerURLsUpdateFailed, "a -> b", "etcd said: connection reset"},
		{v1alpha1.ReasonPeerURLsUpdateFailed, "a -> c", "etcd said: timeout"},
	} {
		r.peerNotices.warn(context.Background(), r, m, step.reason, step.change, step.msg)
		// Event names carry a nanosecond timestamp; keep them apart.
		time.Sleep(time.Duration(i+1) * time.Microsecond)
	}
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range list.Items {
		reasons = append(reasons, ev.Reason+" "+ev.Note)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d Events, want 3 (one per reason and change): %q", len(list.Items), reasons)
	}
	r.peerNotices.forget(m.UID)
	r.peerNotices.warn(context.Background(), r, m, v1alpha1.ReasonPeerURLsUpdateFailed, "a -> c", "etcd said: timeout")
	if err := c.List(context.Background(), &list); err != nil || len(list.Items) != 4 {
		t.Fatalf("after forget: %d Events (%v), want a fourth", len(list.Items), err)
	}
}

// TestPeerUpdateRefusedWhenLosingTheMemberCostsQuorum: with one other voter dead, a wrong new URL
// for a healthy voter would leave one healthy voter of three, so the leader does not update and
// says why in one Warning. The reconciler has no etcd client: reaching MemberUpdate would panic.
func TestPeerUpdateRefusedWhenLosingTheMemberCostsQuorum(t *testing.T) {
	scheme := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r := &MembershipReconciler{Events: &events.Recorder{Client: c, Namespace: "kube-system"}, RecheckInterval: time.Second, Leadership: &fakeTerm{}}
	members := []etcd.Member{
		{ID: 1, PeerURLs: []string{"http://10.0.0.1:2380"}},
		{ID: 2, PeerURLs: []string{"http://10.0.0.2:2380"}},
		{ID: 3, PeerURLs: []string{"http://10.0.0.3:2380"}},
	}
	m := member(false)
	m.UID = "u2"
	m.Status.AdvertisedPeerURLs = []string{"http://10.0.0.22:2380"}
	probes := probesOf(map[uint64]bool{1: true, 2: true, 3: false})
	for range 3 {
		res, err := actOn(r, m, view{target: members[1], members: members, probes: probes, probed: true})
		if err != nil || res.RequeueAfter != time.Second {
			t.Fatalf("result=%+v err=%v, want a refusal re-checked after --recheck-interval", res, err)
		}
	}
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Reason != v1alpha1.ReasonPeerURLsUpdateRefused {
		t.Fatalf("Events %+v, want one PeerURLsUpdateRefused", list.Items)
	}
	if m.Status.PeerURLs != nil {
		t.Fatalf("status.peerURLs changed to %v without an update", m.Status.PeerURLs)
	}

	// With every voter healthy, the same update goes ahead as far as the fence, which finds no
	// such object in the API and gives it up before any etcd call.
	r.APIReader = c
	_, err := actOn(r, m, view{target: members[1], members: members, probes: probesOf(map[uint64]bool{1: true, 2: true, 3: true}), probed: true})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("with quorum to spare: %v, want the update to reach the fence", err)
	}
}
