package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// TestUnreachableTimedFromReasonChange: a member False/Alarm for an hour that then stops answering
// is asked to leave --remove-unreachable-after later, not at the first probe that finds it
// unreachable (the Healthy condition's lastTransitionTime still says an hour ago).
func TestUnreachableTimedFromReasonChange(t *testing.T) {
	scheme := testScheme(t)
	members := []etcd.Member{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}
	target := members[3]
	probes := probesOf(map[uint64]bool{1: true, 2: true, 3: true})
	for id, h := range probes.Members {
		h.Status.Leader = 1 // as the model's cluster, led by its first voter
		probes.Members[id] = h
	}
	m := member(false, cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonAlarm))
	status.Get(m, v1alpha1.ConditionHealthy).LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m).Build()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	// Member 4 is down for etcd too, so the other voters confirm it (askPeers).
	peers := etcdfake.New(etcdfake.Voters(4)...)
	peers.Set(4, func(m *etcdfake.Member) { m.Down = true })
	r := &MembershipReconciler{
		Client: c, Events: &events.Recorder{Client: c, Namespace: "kube-system"}, Peers: peers,
		RemoveUnreachableAfter: time.Minute, MinVoters: 3, Clock: clk, ProbeTimeout: time.Second,
	}
	step := func(reason string, after time.Duration) {
		t.Helper()
		clk.SetTime(clk.Now().Add(after))
		status.Set(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, reason, "m")
		if _, err := actOn(r, m, view{target: target, members: members, probes: probes, probed: true}); err != nil {
			t.Fatal(err)
		}
	}

	step(v1alpha1.ReasonAlarm, 0)
	step(v1alpha1.ReasonAlarm, 30*time.Minute)
	step(v1alpha1.ReasonUnreachable, 5*time.Second)
	if m.Spec.Leave {
		t.Fatal("asked to leave at the first probe that found it unreachable, after an hour of Alarm")
	}
	step(v1alpha1.ReasonUnreachable, 59*time.Second)
	if m.Spec.Leave {
		t.Fatal("asked to leave 59s after it became unreachable, want 1m")
	}
	// Answering again, even as still unhealthy, ends the streak: the minute starts over.
	step(v1alpha1.ReasonNotServing, time.Second)
	step(v1alpha1.ReasonUnreachable, time.Second)
	step(v1alpha1.ReasonUnreachable, 30*time.Second)
	if m.Spec.Leave {
		t.Fatal("asked to leave although the unreachable streak started again 30s ago")
	}
	step(v1alpha1.ReasonUnreachable, 30*time.Second)
	if m.Spec.Leave {
		t.Fatal("asked to leave on one read of etcd's leader's metrics")
	}
	step(v1alpha1.ReasonUnreachable, silenceWindow)
	if !m.Spec.Leave || m.Spec.MemberID != m.Status.MemberID || m.Annotations[v1alpha1.AnnotationLeaveReason] == "" {
		t.Fatalf("not asked to leave after a minute unreachable and etcd's leader silent about it for %s: spec %+v, annotations %v", silenceWindow, m.Spec, m.Annotations)
	}
}

// TestLearnerStallCountsFromLastProgress: a big learner that keeps replicating is never stalled
// however long it takes; one caught up on an idle cluster is not stalled either; one whose index
// stops short of the voters' stalls from its last progress.
func TestLearnerStallCountsFromLastProgress(t *testing.T) {
	var tm timers
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const id = 4
	if d := tm.stalledFor(id, 0, false, 5000, t0); d != 0 {
		t.Fatalf("first sighting: stalled %s", d)
	}
	// An hour of steady progress, far behind the voters.
	for i := 1; i <= 60; i++ {
		if d := tm.stalledFor(id, uint64(10*i), true, 5000, t0.Add(time.Duration(i)*time.Minute)); d != 0 {
			t.Fatalf("minute %d: progressing learner stalled %s", i, d)
		}
	}
	at := t0.Add(60 * time.Minute)
	if d := tm.stalledFor(id, 600, true, 5000, at.Add(9*time.Minute)); d != 9*time.Minute {
		t.Fatalf("no progress for 9m: stalled %s", d)
	}
	// Unreachable probes are no progress either.
	if d := tm.stalledFor(id, 0, false, 5000, at.Add(11*time.Minute)); d != 11*time.Minute {
		t.Fatalf("unreachable for 2 more minutes: stalled %s", d)
	}

	var idle timers
	idle.stalledFor(id, 100, true, 100, t0)
	if d := idle.stalledFor(id, 100, true, 100, t0.Add(time.Hour)); d != 0 {
		t.Fatalf("caught-up learner on an idle cluster: stalled %s", d)
	}

	idle.forget(id)
	if d := idle.stalledFor(id, 0, false, 100, t0.Add(2*time.Hour)); d != 0 {
		t.Fatalf("after forget, a new learner with the same ID starts afresh: stalled %s", d)
	}
}

// TestLearnerEvictionWaitsForStall: the reconciler's learner path evicts only once the learner
// made no progress for --learner-stall-timeout on its clock. Without a client the eviction
// itself would fail, so the test stops short of it and checks the requeue it asks for.
func TestLearnerEvictionWaitsForStall(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	r := &MembershipReconciler{LearnerStallTimeout: 10 * time.Minute, RecheckInterval: time.Second, Clock: clk}
	voters := []etcd.Member{{ID: 1}, {ID: 2}, {ID: 3}}
	target := etcd.Member{ID: 4, IsLearner: true}
	probes := func(learnerIndex uint64) Probes {
		p := Probes{Members: map[uint64]etcd.Health{}}
		for _, v := range voters {
			p.Members[v.ID] = etcd.Health{Reachable: true, Serving: true, Status: etcd.EndpointStatus{RaftIndex: 90000}}
		}
		// The target has no client URLs in etcd's record, so the path ends before any etcd call
		// (NotStarted); only the timing under test depends on these probes.
		p.Members[target.ID] = etcd.Health{Reachable: true, Status: etcd.EndpointStatus{RaftIndex: learnerIndex, IsLearner: true}}
		return p
	}
	members := []etcd.Member{voters[0], voters[1], voters[2], target}
	m := member(false)
	for i := range 30 {
		res, err := actOn(r, m, view{target: target, members: members, probes: probes(uint64(1000 * (i + 1))), probed: true})
		if err != nil || res.RequeueAfter != 10*time.Minute {
			t.Fatalf("minute %d of progress: %+v %v, want the full stall timeout ahead", i, res, err)
		}
		clk.SetTime(clk.Now().Add(time.Minute))
	}
	// The loop's last step moved the clock a minute past the last progress.
	clk.SetTime(clk.Now().Add(8 * time.Minute))
	res, err := actOn(r, m, view{target: target, members: members, probes: probes(30000), probed: true})
	if err != nil || res.RequeueAfter != time.Minute {
		t.Fatalf("9m without progress: %+v %v, want a requeue a minute later", res, err)
	}
	if c := status.Get(m, v1alpha1.ConditionPromoted); c.Reason == v1alpha1.ReasonEvicting {
		t.Fatal("evicted before the stall timeout")
	}
}

// TestHeardNeedsAWholeSilence: a voter counts as silent about a member only when its counter
// stayed still for the whole window under one etcd leader; any growth is heard at once; a
// restarted observer or a new leader starts the measure over.
func TestHeardNeedsAWholeSilence(t *testing.T) {
	var tm timers
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const window = 2 * time.Second
	type read struct {
		after    time.Duration
		received float64
		leader   uint64
		heard    bool
		silent   bool
	}
	for i, r := range []read{
		{0, 100, 1, false, false},                       // the first read only samples
		{time.Second, 100, 1, false, false},             // still, but not for the whole window
		{time.Second, 100, 1, false, true},              // still for 2 s
		{time.Second, 100, 1, false, true},              // and still since
		{time.Second, 101, 1, true, false},              // heard: at once, and the measure restarts
		{time.Second, 101, 1, false, false},             // still for 1 s of the new measure
		{5 * time.Second, 101, 2, false, false},         // a new leader: its silence is measured afresh
		{5 * time.Second, 101, 2, false, true},          // still under one leader for the window
		{time.Second, 3, 2, false, false},               // the observer restarted: counter went back
		{window - time.Millisecond, 3, 2, false, false}, // not yet the whole window
	} {
		t0 = t0.Add(r.after)
		heard, silent := tm.heard(4, 1, r.received, r.leader, t0, window)
		if heard != r.heard || silent != r.silent {
			t.Errorf("read %d (%+v): heard=%t silent=%t", i, r, heard, silent)
		}
	}
	tm.forget(4)
	if heard, silent := tm.heard(4, 1, 3, 2, t0.Add(time.Hour), window); heard || silent {
		t.Errorf("after forget: heard=%t silent=%t, want a fresh sample", heard, silent)
	}
}
