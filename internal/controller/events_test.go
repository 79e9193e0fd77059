package controller

import (
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
)

// TestForcedLeaveSaidOncePerRequest: a forced leave that etcd keeps refusing is retried by one
// leader and then by the next, which remembers nothing of the first: ForcedLeave is written once.
// A new request, forced again, is said again.
func TestForcedLeaveSaidOncePerRequest(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	// A peer down: the guard would refuse, force skips it, and etcd's own check refuses.
	w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true })
	w.edit("node-2", func(m *v1alpha1.EtcdMember) {
		m.Annotations = map[string]string{v1alpha1.AnnotationForceLeave: "true"}
		m.Spec.Leave = true
	})
	for range 3 {
		_, _ = w.reconcile("node-2")
	}
	w.expect("node-2", v1alpha1.ConditionLeft, "False", v1alpha1.ReasonEtcdError, "forced, refused by etcd")
	w.expect("node-2", v1alpha1.ConditionGuardSkipped, "True", v1alpha1.ReasonForced, "forced")
	w.newTerm()
	for range 3 {
		_, _ = w.reconcile("node-2")
	}
	if n := len(w.events("node-2", v1alpha1.ReasonForced)); n != 1 {
		t.Fatalf("%d ForcedLeave Events over six attempts and a leader change, want 1", n)
	}

	// Cancelled, then asked again: a new request (a new generation).
	w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = false; m.Generation++ })
	_, _ = w.reconcile("node-2")
	w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = true; m.Generation++ })
	_, _ = w.reconcile("node-2")
	_, _ = w.reconcile("node-2")
	if n := len(w.events("node-2", v1alpha1.ReasonForced)); n != 2 {
		t.Errorf("%d ForcedLeave Events after a second forced request, want 2", n)
	}
}

// TestUnreachableHoldSaidOnceAcrossLeaders: a hold of the dead-member policy is written once, not
// again by the next leader, which has none of the first one's memory: UnreachableLeaveHeld says
// it was said. Once the member is reachable again the condition goes, and the next outage is
// announced afresh.
func TestUnreachableHoldSaidOnceAcrossLeaders(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(4)...)
	w.r.RemoveUnreachableAfter = time.Minute
	w.etcd.Set(4, func(m *etcdfake.Member) { m.CutFromAgent = true })
	w.mustReconcile("node-4")
	w.clock.SetTime(w.clock.Now().Add(10 * time.Minute))
	hold := func() {
		w.mustReconcile("node-4") // the first read of etcd's leader's metrics
		w.clock.SetTime(w.clock.Now().Add(silenceWindow))
		for range 3 {
			w.mustReconcile("node-4")
			w.clock.SetTime(w.clock.Now().Add(w.r.RecheckInterval))
		}
	}
	hold()
	w.expect("node-4", v1alpha1.ConditionUnreachableLeaveHeld, "True", v1alpha1.ReasonUnreachableFromLeader, "held")
	w.newTerm()
	w.r.RemoveUnreachableAfter = time.Minute
	w.mustReconcile("node-4")
	w.clock.SetTime(w.clock.Now().Add(2 * time.Minute))
	hold()
	if n := len(w.events("node-4", v1alpha1.ReasonUnreachableFromLeader)); n != 1 {
		t.Fatalf("%d UnreachableFromLeader Events over two leaders' re-checks, want 1", n)
	}
	if w.get("node-4").Spec.Leave {
		t.Fatal("a member etcd still hears was asked to leave")
	}

	w.etcd.Set(4, func(m *etcdfake.Member) { m.CutFromAgent = false })
	w.mustReconcile("node-4")
	w.expect("node-4", v1alpha1.ConditionUnreachableLeaveHeld, "", "", "reachable again")
	w.etcd.Set(4, func(m *etcdfake.Member) { m.CutFromAgent = true })
	w.mustReconcile("node-4")
	w.clock.SetTime(w.clock.Now().Add(10 * time.Minute))
	hold()
	if n := len(w.events("node-4", v1alpha1.ReasonUnreachableFromLeader)); n != 2 {
		t.Errorf("%d UnreachableFromLeader Events after a second outage, want 2", n)
	}
}

// TestRefusalSaidOnceAcrossLeaders: a refused leave, re-checked by one leader and then by the
// next, writes its QuorumAtRisk Warning once: the Event follows the Left condition, which the
// next leader finds as the first one left it.
func TestRefusalSaidOnceAcrossLeaders(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true })
	w.askLeave("node-2")
	for range 3 {
		w.mustReconcile("node-2")
	}
	w.newTerm()
	for range 3 {
		w.mustReconcile("node-2")
	}
	w.expect("node-2", v1alpha1.ConditionLeft, "False", v1alpha1.ReasonQuorumAtRisk, "refused")
	if n := len(w.events("node-2", v1alpha1.ReasonQuorumAtRisk)); n != 1 {
		t.Errorf("%d QuorumAtRisk Events over six re-checks and a leader change, want 1", n)
	}
}
