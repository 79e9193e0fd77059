package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// events returns the Events written about object name with this reason, oldest first.
func (w *world) events(name, reason string) []eventsv1.Event {
	w.t.Helper()
	var list eventsv1.EventList
	if err := w.api.List(w.t.Context(), &list); err != nil {
		w.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

// TestUnreachablePolicyAsksEtcd: --remove-unreachable-after asks a voter the leader cannot reach
// to leave only when etcd confirms it down: etcd's leader received nothing from it for
// silenceWindow, and no other voter received anything either. The first read only starts the
// measure. Each hold is explained once, however often it is re-checked.
func TestUnreachablePolicyAsksEtcd(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup breaks node-4, the target, and whatever else the case needs.
		setup     func(w *world)
		wantAsked bool
		// event is the reason of the one Event the case writes about node-4, and says what its
		// message must contain.
		event string
		says  []string
	}{
		{name: "cut from the leader only: etcd still hears it, never asked",
			setup: func(w *world) { w.etcd.Set(4, func(m *etcdfake.Member) { m.CutFromAgent = true }) },
			event: v1alpha1.ReasonUnreachableFromLeader,
			says: []string{"unreachable from the leading agent (on the node of member node-1)",
				"etcd member node-1 (1) still hears from it",
				"Check the network path from the leading agent's node to the member's client URLs https://127.0.0.4:2379"}},
		{name: "down: etcd's leader hears nothing, asked",
			setup:     func(w *world) { w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true }) },
			wantAsked: true, event: v1alpha1.ReasonUnreachableMember,
			says: []string{"etcd no longer hears from it either (etcd's leader node-1 (1) received nothing from it for 2s)"}},
		{name: "frozen: its connections stay open, but etcd's leader hears nothing, asked",
			setup:     func(w *world) { w.etcd.Set(4, func(m *etcdfake.Member) { m.Frozen = true }) },
			wantAsked: true, event: v1alpha1.ReasonUnreachableMember,
			says: []string{"etcd's leader node-1 (1) received nothing from it for 2s"}},
		{name: "down, but no voter's metrics can be read: not confirmed, not asked",
			setup: func(w *world) {
				w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true })
				for id := uint64(1); id <= 3; id++ {
					w.etcd.Set(id, func(m *etcdfake.Member) { m.MetricsUnreadable = true })
				}
			},
			event: v1alpha1.ReasonUnreachableUnconfirmed,
			says:  []string{"etcd's leader's metrics could not be read", "node-1 (1): metrics of [https://127.0.0.1:2379]: HTTP 403"}},
		{name: "down, and only the leader's metrics can be read: asked",
			setup: func(w *world) {
				w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true })
				for id := uint64(2); id <= 3; id++ {
					w.etcd.Set(id, func(m *etcdfake.Member) { m.MetricsUnreadable = true })
				}
			},
			wantAsked: true, event: v1alpha1.ReasonUnreachableMember,
			says: []string{"etcd's leader node-1 (1) received nothing from it"}},
		{name: "down, but only followers' metrics can be read: a follower never hears another, not asked",
			setup: func(w *world) {
				w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true })
				w.etcd.Set(1, func(m *etcdfake.Member) { m.MetricsUnreadable = true })
			},
			event: v1alpha1.ReasonUnreachableUnconfirmed,
			says:  []string{"etcd's leader's metrics could not be read", "node-1 (1): metrics of [https://127.0.0.1:2379]: HTTP 403"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, etcdfake.Voters(4)...)
			w.r.RemoveUnreachableAfter = time.Minute
			w.term.local = 1
			tc.setup(w)
			w.mustReconcile("node-4")
			w.expect("node-4", v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable, "first probe")
			w.clock.SetTime(w.clock.Now().Add(61 * time.Second))
			res := w.mustReconcile("node-4")
			if res.RequeueAfter == silenceWindow {
				// The leader's metrics were read for the first time: nothing is decided on one read.
				if w.get("node-4").Spec.Leave || len(w.events("node-4", tc.event)) != 0 {
					t.Fatal("decided on the first read of the leader's metrics")
				}
				w.clock.SetTime(w.clock.Now().Add(silenceWindow))
				res = w.mustReconcile("node-4")
			}
			if got := w.get("node-4").Spec.Leave; got != tc.wantAsked {
				t.Fatalf("spec.leave = %t, want %t", got, tc.wantAsked)
			}
			if tc.wantAsked {
				w.mustReconcile("node-4")
				if got := w.removals(); !slices.Equal(got, []uint64{4}) {
					t.Errorf("removed %v, want member 4", got)
				}
			} else {
				if res.RequeueAfter != w.r.RecheckInterval {
					t.Errorf("held back: %+v, want a re-check after --recheck-interval", res)
				}
				// Re-checks repeat the hold, not its Event.
				for range 3 {
					w.clock.SetTime(w.clock.Now().Add(w.r.RecheckInterval))
					w.mustReconcile("node-4")
				}
				if m := w.get("node-4"); m.Spec.Leave || len(w.removals()) != 0 {
					t.Fatalf("spec.leave = %t, removed %v: want neither", m.Spec.Leave, w.removals())
				}
			}
			evs := w.events("node-4", tc.event)
			if len(evs) != 1 {
				t.Fatalf("%d %s Events, want 1", len(evs), tc.event)
			}
			t.Logf("%s Event: %s", tc.event, evs[0].Note)
			for _, s := range tc.says {
				if !strings.Contains(evs[0].Note, s) {
					t.Errorf("%s Event %q does not say %q", tc.event, evs[0].Note, s)
				}
			}
		})
	}
}

// TestUnreachablePolicyActsOnceEtcdAgrees: a voter cut off from the leader only is kept; when it
// then dies for real, the re-check finds that etcd no longer hears it and asks at once, on the
// unreachable time counted since the leader lost it, without waiting for a change of health the
// leader cannot see.
func TestUnreachablePolicyActsOnceEtcdAgrees(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(4)...)
	w.r.RemoveUnreachableAfter = time.Minute
	w.etcd.Set(4, func(m *etcdfake.Member) { m.CutFromAgent = true })
	w.mustReconcile("node-4")
	w.clock.SetTime(w.clock.Now().Add(10 * time.Minute))
	if res := w.mustReconcile("node-4"); res.RequeueAfter != silenceWindow {
		t.Fatalf("first read of the leader's metrics: %+v, want a re-read after %s", res, silenceWindow)
	}
	w.clock.SetTime(w.clock.Now().Add(silenceWindow))
	if res := w.mustReconcile("node-4"); res.RequeueAfter != w.r.RecheckInterval || w.get("node-4").Spec.Leave {
		t.Fatalf("alive to etcd: %+v, leave=%t; want a re-check and no request", res, w.get("node-4").Spec.Leave)
	}
	w.etcd.Set(4, func(m *etcdfake.Member) { m.Down = true })
	w.clock.SetTime(w.clock.Now().Add(w.r.RecheckInterval))
	w.mustReconcile("node-4")
	m := w.get("node-4")
	if !m.Spec.Leave || !strings.Contains(m.Annotations[v1alpha1.AnnotationLeaveReason], "--remove-unreachable-after 1m0s") {
		t.Fatalf("dead for etcd too: spec.leave = %t, reason %q; want asked under the policy", m.Spec.Leave, m.Annotations[v1alpha1.AnnotationLeaveReason])
	}
	if n := len(w.events("node-4", v1alpha1.ReasonUnreachableFromLeader)); n != 1 {
		t.Errorf("%d UnreachableFromLeader Events, want the one of the hold", n)
	}
}

// TestGuardCountsAMemberCutFromTheLeader: a voter the leader cannot reach still counts unhealthy
// for the quorum guard, although etcd hears it: the leader cannot verify it serves. Removing
// another voter is refused with the numbers, where etcd itself would have let it through.
func TestGuardCountsAMemberCutFromTheLeader(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.r.RemoveUnreachableAfter = time.Minute
	w.etcd.Set(3, func(m *etcdfake.Member) { m.CutFromAgent = true })
	w.mustReconcile("node-3")
	w.askLeave("node-2")
	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "leave of node-2")
	if c := status.Get(w.get("node-2"), v1alpha1.ConditionLeft); c == nil ||
		!strings.Contains(c.Message, "removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2") {
		t.Errorf("Left = %+v, want the guard's numbers", c)
	}
	w.expect("node-2", v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "pre-flight of node-2")
	// Past --remove-unreachable-after, node-3 is not asked either: etcd still hears it. (With
	// --min-voters 3 it would not be asked anyway; 2 lets the policy get as far as asking etcd.)
	w.r.MinVoters = 2
	w.clock.SetTime(w.clock.Now().Add(time.Hour))
	w.mustReconcile("node-3")
	w.clock.SetTime(w.clock.Now().Add(silenceWindow))
	w.mustReconcile("node-3")
	if n := len(w.events("node-3", v1alpha1.ReasonUnreachableFromLeader)); n != 1 || w.get("node-3").Spec.Leave {
		t.Errorf("node-3: %d UnreachableFromLeader Events, spec.leave = %t; want the hold explained and no request", n, w.get("node-3").Spec.Leave)
	}
	if got := w.removals(); len(got) != 0 {
		t.Fatalf("removed %v, want nothing", got)
	}
	// etcd's own check counts node-3 active and would have removed node-2: only the guard held.
	if err := w.etcdctlRemove(2); err != nil {
		t.Errorf("etcd refused the removal itself (%v); the case no longer shows the guard refusing", err)
	}
}

// TestUnreachablePolicyWitnessesMustServe: a voter that answers but has no leader has no raft
// connection to anyone, so its "not heard" says nothing. With the only readable voters' metrics
// gone, the one without a leader must not confirm a live member down.
func TestUnreachablePolicyWitnessesMustServe(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(5)...)
	w.r.RemoveUnreachableAfter = time.Minute
	w.term.local = 1
	w.etcd.Set(5, func(m *etcdfake.Member) { m.CutFromAgent = true })
	w.etcd.Set(2, func(m *etcdfake.Member) { m.NoLeader = true })
	for _, id := range []uint64{1, 3, 4} {
		w.etcd.Set(id, func(m *etcdfake.Member) { m.MetricsUnreadable = true })
	}
	w.mustReconcile("node-5")
	w.clock.SetTime(w.clock.Now().Add(61 * time.Second))
	w.mustReconcile("node-5")
	if m := w.get("node-5"); m.Spec.Leave {
		t.Fatalf("a live member was asked to leave on the word of a voter without a leader: %+v", m.Annotations)
	}
	if evs := w.events("node-5", v1alpha1.ReasonUnreachableUnconfirmed); len(evs) != 1 {
		t.Fatalf("%d %s Events, want 1", len(evs), v1alpha1.ReasonUnreachableUnconfirmed)
	}
}

// TestUnreachableHoldAlternatingReasonsAnnouncedOnce: a hold whose reason alternates from one
// re-check to the next (the witnesses' metrics readable, then not) writes one Event per reason
// and outage, not one per re-check.
func TestUnreachableHoldAlternatingReasonsAnnouncedOnce(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(4)...)
	w.r.RemoveUnreachableAfter = time.Minute
	w.term.local = 1
	w.etcd.Set(4, func(m *etcdfake.Member) { m.CutFromAgent = true })
	w.mustReconcile("node-4")
	w.clock.SetTime(w.clock.Now().Add(61 * time.Second))
	for i := range 6 {
		for id := uint64(1); id <= 3; id++ {
			w.etcd.Set(id, func(m *etcdfake.Member) { m.MetricsUnreadable = i%2 == 1 })
		}
		w.mustReconcile("node-4")
		w.clock.SetTime(w.clock.Now().Add(w.r.RecheckInterval))
	}
	if m := w.get("node-4"); m.Spec.Leave {
		t.Fatal("a member etcd still hears was asked to leave")
	}
	for _, reason := range []string{v1alpha1.ReasonUnreachableFromLeader, v1alpha1.ReasonUnreachableUnconfirmed} {
		if evs := w.events("node-4", reason); len(evs) != 1 {
			t.Errorf("%d %s Events over 6 re-checks, want 1", len(evs), reason)
		}
	}
}
