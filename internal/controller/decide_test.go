package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// actOn runs what a reconcile runs on a listed member after observe's own reads: the term's
// measures, then act. The unit tests of one policy use it with a view they make themselves.
func actOn(r *MembershipReconciler, m *v1alpha1.EtcdMember, v view) (ctrl.Result, error) {
	r.measure(context.Background(), m, &v, nil)
	return r.act(context.Background(), m, v, nil)
}

// TestDecide: one row per change decide can choose and per reason it holds one back, each on the
// smallest view that calls for it, and decide never changes the object. The last check lists
// every change and hold decide.go can return, so that a row deleted by mistake is missed: a new
// one in decide.go needs its entry there, and a row.
func TestDecide(t *testing.T) {
	const (
		recheck = 5 * time.Second
		stall   = 10 * time.Minute
		after   = time.Minute
	)
	urls := func(id uint64) []string { return []string{fmt.Sprintf("http://10.0.0.%d:2379", id)} }
	mem := func(id uint64) etcd.Member {
		return etcd.Member{ID: id, Name: fmt.Sprintf("m%d", id), ClientURLs: urls(id), PeerURLs: []string{fmt.Sprintf("http://10.0.0.%d:2380", id)}}
	}
	learner := func(id uint64) etcd.Member { l := mem(id); l.IsLearner = true; return l }
	members := func(ms ...etcd.Member) []etcd.Member { return ms }
	three := members(mem(1), mem(2), mem(3))
	// probed: the latest periodic round, healthy members serving and following leader 1.
	probed := func(healthy ...uint64) Probes {
		p := Probes{Members: map[uint64]etcd.Health{}}
		for _, id := range healthy {
			p.Members[id] = etcd.Health{Reachable: true, Serving: true, Status: etcd.EndpointStatus{Leader: 1}}
		}
		return p
	}
	// fresh: the guard's own probes, healthy voters following leader.
	fresh := func(ms []etcd.Member, leader uint64, healthy ...uint64) []voter {
		var out []voter
		for _, mm := range ms {
			if !mm.IsLearner {
				ok := slices.Contains(healthy, mm.ID)
				out = append(out, voter{Member: mm, Healthy: ok, Leader: map[bool]uint64{true: leader}[ok]})
			}
		}
		return out
	}
	leaving := func(annotations ...string) *v1alpha1.EtcdMember {
		m := member(true)
		m.Spec.MemberID = m.Status.MemberID
		for i := 0; i+1 < len(annotations); i += 2 {
			metav1.SetMetaDataAnnotation(&m.ObjectMeta, annotations[i], annotations[i+1])
		}
		return m
	}
	forced := func() *v1alpha1.EtcdMember { return leaving(v1alpha1.AnnotationForceLeave, "true") }
	advertising := func(url string) *v1alpha1.EtcdMember {
		m := member(false)
		m.Status.AdvertisedPeerURLs = []string{url}
		return m
	}
	unreachable := func(annotations ...string) *v1alpha1.EtcdMember {
		m := member(false, cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable))
		status.Get(m, v1alpha1.ConditionHealthy).LastTransitionTime = metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
		for i := 0; i+1 < len(annotations); i += 2 {
			metav1.SetMetaDataAnnotation(&m.ObjectMeta, annotations[i], annotations[i+1])
		}
		return m
	}
	askedFor := "unhealthy since 2026-12-03T10:00:00Z and unreachable for longer than --remove-unreachable-after 1m0s"
	four := members(mem(1), mem(2), mem(3), mem(4))

	cases := []struct {
		name string
		m    *v1alpha1.EtcdMember
		v    view
		// policy turns the dead-member policy on.
		policy bool

		change    changeKind
		held      []string // "<change>/<reason>", in order
		after     time.Duration
		moveFirst bool
		stallLeft time.Duration
		// guarded: the quorum guard judged the leave; forced: the force-leave annotation counts.
		guarded, forced bool
	}{
		{name: "a leave naming an earlier member is refused", m: func() *v1alpha1.EtcdMember {
			m := leaving()
			m.Spec.MemberID = "1"
			return m
		}(), v: view{target: mem(2), members: three},
			held: []string{"remove/" + v1alpha1.ReasonMemberMismatch + "@Left"}},
		{name: "the leader's own member is handed over", m: leaving(), v: view{target: mem(2), members: three, local: 2},
			change: handOver},
		{name: "a learner leaves without the guard", m: leaving(), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4))},
			change: removeMember},
		{name: "a voter leaves while quorum is kept", m: leaving(), v: view{target: mem(2), members: three, voters: fresh(three, 1, 1, 3)},
			change: removeMember, guarded: true},
		{name: "a voter's leave that costs quorum is refused", m: leaving(), v: view{target: mem(2), members: three, voters: fresh(three, 1, 1)},
			held: []string{"remove/" + v1alpha1.ReasonQuorumAtRisk + "@Left"}, after: recheck, guarded: true},
		{name: "force overrides the quorum guard", m: forced(), v: view{target: mem(2), members: three, voters: fresh(three, 1, 1)},
			change: removeMember, guarded: true, forced: true},
		{name: "not even force removes the last voter", m: forced(), v: view{target: mem(2), members: members(mem(2)), voters: fresh(members(mem(2)), 2)},
			held: []string{"remove/" + v1alpha1.ReasonLastVoter + "@Left"}, after: recheck, guarded: true, forced: true},
		{name: "etcd's leader leaves once leadership moved away", m: leaving(), v: view{target: mem(2), members: three, voters: fresh(three, 2, 1, 3)},
			change: removeMember, moveFirst: true, guarded: true},
		{name: "leadership is not moved again while the move is held", m: leaving(), v: view{target: mem(2), members: three, voters: fresh(three, 2, 1, 3), moveHeld: true},
			held: []string{"remove/" + holdMoveHeld + "@log"}, after: recheck, moveFirst: true, guarded: true},
		{name: "force moves leadership although the move is held", m: forced(), v: view{target: mem(2), members: three, voters: fresh(three, 2, 1, 3), moveHeld: true},
			change: removeMember, moveFirst: true, guarded: true, forced: true},

		{name: "peer URLs another member has are refused", m: advertising("http://10.0.0.3:2380"), v: view{target: mem(2), members: three, probes: probed(1, 2, 3), probed: true, settled: true},
			held: []string{"update peer URLs/" + v1alpha1.ReasonPeerURLsUpdateRefused + "@Warning"}, after: recheck},
		{name: "a peer-URL update waits for the first probe round", m: advertising("http://10.0.0.22:2380"), v: view{target: mem(2), members: three},
			held: []string{"update peer URLs/" + holdNoProbeYet + "@log"}, after: recheck},
		{name: "a peer-URL update waits until the last one settled", m: advertising("http://10.0.0.22:2380"), v: view{target: mem(2), members: three, probes: probed(1, 2, 3), probed: true},
			held: []string{"update peer URLs/" + holdSettling + "@log"}, after: recheck},
		{name: "a peer-URL update that could cost quorum waits", m: advertising("http://10.0.0.22:2380"), v: view{target: mem(2), members: three, probes: probed(1, 2), probed: true, settled: true},
			held: []string{"update peer URLs/" + v1alpha1.ReasonPeerURLsUpdateRefused + "@Warning"}, after: recheck},
		{name: "a voter's peer URLs are updated", m: advertising("http://10.0.0.22:2380"), v: view{target: mem(2), members: three, probes: probed(1, 2, 3), probed: true, settled: true},
			change: updatePeerURLs},
		{name: "a learner's peer URLs need no quorum to spare", m: advertising("http://10.0.0.44:2380"), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4)), probes: probed(1), probed: true, settled: true},
			change: updatePeerURLs},
		{name: "a waiting peer-URL update lets the promotion go ahead", m: advertising("http://10.0.0.44:2380"), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4)), probes: probed(1, 2, 3, 4), probed: true},
			change: promoteLearner, held: []string{"update peer URLs/" + holdSettling + "@log"}, after: recheck, stallLeft: stall},

		{name: "a stalled learner is evicted", m: member(false), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4)), probes: probed(1, 2, 3, 4), probed: true, stalled: stall},
			change: evictLearner},
		{name: "a learner that has not started waits for its deadline", m: member(false), v: view{target: etcd.Member{ID: 4, IsLearner: true}, members: members(mem(1), mem(2), mem(3), etcd.Member{ID: 4, IsLearner: true}), probed: true, stalled: time.Minute},
			held: []string{"promote/" + v1alpha1.ReasonNotStarted + "@Promoted"}, after: stall - time.Minute},
		{name: "a promotion waits for the first probe round", m: member(false), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4))},
			held: []string{"promote/" + holdNoProbeYet + "@log"}, after: recheck},
		{name: "a promotion that could cost quorum waits", m: member(false), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4)), probes: probed(1, 4), probed: true},
			held: []string{"promote/" + v1alpha1.ReasonQuorumAtRisk + "@Promoted"}, after: recheck},
		{name: "a learner that runs is promoted", m: member(false), v: view{target: learner(4), members: members(mem(1), mem(2), mem(3), learner(4)), probes: probed(1, 2, 3, 4), probed: true, stalled: 3 * time.Minute},
			change: promoteLearner, stallLeft: stall - 3*time.Minute},

		{name: "with the policy off an unreachable voter stays", m: unreachable(), v: view{target: mem(4), members: four, probes: probed(1, 2, 3), probed: true, unreachable: true, down: time.Hour}},
		{name: "a reachable voter stays", m: member(false), v: view{target: mem(4), members: four, probes: probed(1, 2, 3, 4), probed: true}, policy: true},
		{name: "an unreachable voter is not asked before its time", m: unreachable(), v: view{target: mem(4), members: four, probes: probed(1, 2, 3), probed: true, unreachable: true, down: 10 * time.Second}, policy: true,
			held: []string{"ask to leave/" + holdNotUnreachableYet + "@log"}, after: 50 * time.Second},
		{name: "an unreachable voter is not asked below the voter floor", m: unreachable(), v: view{target: mem(3), members: three, probes: probed(1, 2), probed: true, unreachable: true, down: time.Hour}, policy: true,
			held: []string{"ask to leave/" + holdTooFewVoters + "@log"}},
		{name: "an unreachable voter is not asked when the guard would refuse", m: unreachable(), v: view{target: mem(4), members: four, probes: probed(1), probed: true, unreachable: true, down: time.Hour}, policy: true,
			held: []string{"ask to leave/" + holdGuardWouldRefuse + "@log"}},
		{name: "a cancelled request is not asked again for the same outage", m: unreachable(v1alpha1.AnnotationLeaveReason, askedFor), v: view{target: mem(4), members: four, probes: probed(1, 2, 3), probed: true, unreachable: true, down: time.Hour}, policy: true,
			held: []string{"ask to leave/" + holdAlreadyAsked + "@log"}},
		{name: "an unreachable voter is asked to leave", m: unreachable(), v: view{target: mem(4), members: four, probes: probed(1, 2, 3), probed: true, unreachable: true, down: time.Hour}, policy: true,
			change: askUnreachableLeave},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &MembershipReconciler{RecheckInterval: recheck, LearnerStallTimeout: stall, MinVoters: 3}
			if tc.policy {
				r.RemoveUnreachableAfter = after
			}
			before := tc.m.DeepCopy()
			n := r.decide(tc.m, tc.v)
			var held []string
			for _, h := range n.held {
				told := "log"
				switch {
				case h.condition != "":
					told = h.condition
				case h.warning:
					told = "Warning"
				}
				held = append(held, string(h.change)+"/"+h.reason+"@"+told)
				if h.message == "" {
					t.Errorf("hold %s/%s has no message", h.change, h.reason)
				}
				if h.guardRefusal != (h.change == removeMember && (h.reason == v1alpha1.ReasonQuorumAtRisk || h.reason == v1alpha1.ReasonLastVoter)) {
					t.Errorf("hold %s/%s counted as a guard refusal: %v", h.change, h.reason, h.guardRefusal)
				}
			}
			if n.change != tc.change || !slices.Equal(held, tc.held) || n.after != tc.after || n.moveFirst != tc.moveFirst ||
				n.stallLeft != tc.stallLeft || n.guarded != tc.guarded || n.forced != tc.forced {
				t.Fatalf("decide = change %q held %q after %s moveFirst %v stallLeft %s guarded %v forced %v\nwant change %q held %q after %s moveFirst %v stallLeft %s guarded %v forced %v",
					n.change, held, n.after, n.moveFirst, n.stallLeft, n.guarded, n.forced, tc.change, tc.held, tc.after, tc.moveFirst, tc.stallLeft, tc.guarded, tc.forced)
			}
			covered[string(n.change)] = true
			for _, h := range held {
				covered[h] = true
			}
			if tc.change == askUnreachableLeave && n.leaveReason != askedFor {
				t.Fatalf("leave reason %q, want %q", n.leaveReason, askedFor)
			}
			if !equality.Semantic.DeepEqual(before, tc.m) {
				t.Fatal("decide changed the object")
			}
		})
	}
	// Every change decide.go can choose and every hold it can return, with how it is told.
	for _, want := range []string{
		string(noChange), string(removeMember), string(handOver), string(updatePeerURLs), string(promoteLearner), string(evictLearner), string(askUnreachableLeave),
		"remove/" + v1alpha1.ReasonMemberMismatch + "@Left", "remove/" + v1alpha1.ReasonQuorumAtRisk + "@Left", "remove/" + v1alpha1.ReasonLastVoter + "@Left", "remove/" + holdMoveHeld + "@log",
		"update peer URLs/" + v1alpha1.ReasonPeerURLsUpdateRefused + "@Warning", "update peer URLs/" + holdNoProbeYet + "@log", "update peer URLs/" + holdSettling + "@log",
		"promote/" + v1alpha1.ReasonNotStarted + "@Promoted", "promote/" + holdNoProbeYet + "@log", "promote/" + v1alpha1.ReasonQuorumAtRisk + "@Promoted",
		"ask to leave/" + holdNotUnreachableYet + "@log", "ask to leave/" + holdTooFewVoters + "@log", "ask to leave/" + holdGuardWouldRefuse + "@log", "ask to leave/" + holdAlreadyAsked + "@log",
	} {
		if !covered[want] {
			t.Errorf("no row decides %q", want)
		}
	}
}
