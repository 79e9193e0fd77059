package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

func TestHealthCondition(t *testing.T) {
	started := etcd.Member{ID: 2, ClientURLs: []string{"http://10.0.0.2:2379"}}
	learner := started
	learner.IsLearner = true
	down := errors.New("connection refused")
	cases := []struct {
		name   string
		target etcd.Member
		h      etcd.Health
		alarms []string
		status metav1.ConditionStatus
		reason string
	}{
		{"never started", etcd.Member{ID: 2}, etcd.Health{Err: down}, nil, metav1.ConditionFalse, v1alpha1.ReasonNotStarted},
		{"unreachable", started, etcd.Health{Err: down}, nil, metav1.ConditionFalse, v1alpha1.ReasonUnreachable},
		{"another member answered", started, etcd.Health{AnsweredBy: 7, Err: down}, []string{"NOSPACE"}, metav1.ConditionFalse, v1alpha1.ReasonAnsweredByOther},
		{"unreachable outranks a stale alarm", started, etcd.Health{Err: down}, []string{"NOSPACE"}, metav1.ConditionFalse, v1alpha1.ReasonUnreachable},
		{"alarm outranks serving", started, etcd.Health{Reachable: true, Serving: true}, []string{"NOSPACE"}, metav1.ConditionFalse, v1alpha1.ReasonAlarm},
		{"answers but no quorum", started, etcd.Health{Reachable: true, Err: down}, nil, metav1.ConditionFalse, v1alpha1.ReasonNotServing},
		{"serving voter", started, etcd.Health{Reachable: true, Serving: true}, nil, metav1.ConditionTrue, v1alpha1.ReasonServing},
		{"answering learner", learner, etcd.Health{Reachable: true, Serving: true}, nil, metav1.ConditionTrue, v1alpha1.ReasonServing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, reason, msg := healthCondition(tc.target, tc.h, tc.alarms, time.Second)
			if s != tc.status || reason != tc.reason || msg == "" {
				t.Fatalf("got %s/%s %q, want %s/%s with a message", s, reason, msg, tc.status, tc.reason)
			}
		})
	}
}

// TestObserveHealthWritesOnlyWhatMatters: raft index and DB size move with every write to etcd;
// copying them on every probe would cost an API write per member per probe.
func TestObserveHealthWritesOnlyWhatMatters(t *testing.T) {
	r := &MembershipReconciler{HealthRefresh: time.Minute, ProbeTimeout: time.Second}
	target := etcd.Member{ID: 2, ClientURLs: []string{"http://10.0.0.2:2379"}}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	probe := func(at time.Time, index uint64, leader uint64, term uint64, alarms ...string) Probes {
		return Probes{
			Members: map[uint64]etcd.Health{2: {Reachable: true, Serving: true, At: at,
				Status: etcd.EndpointStatus{MemberID: 2, Leader: leader, RaftTerm: term, RaftIndex: index, DBSize: 4096}}},
			Alarms: map[uint64][]string{2: alarms},
		}
	}
	m := member(false)
	r.observeHealth(m, target, probe(t0, 100, 1, 3))
	if h := m.Status.Health; h == nil || h.RaftIndex != 100 || h.Leader || !h.LastProbeTime.Equal(&metav1.Time{Time: t0}) {
		t.Fatalf("first probe not recorded: %+v", h)
	}
	steps := []struct {
		name      string
		probes    Probes
		wantIndex int64
	}{
		{"index moved, nothing else: kept", probe(t0.Add(5*time.Second), 180, 1, 3), 100},
		{"became leader: written", probe(t0.Add(10*time.Second), 190, 2, 3), 190},
		{"index moved again: kept", probe(t0.Add(15*time.Second), 250, 2, 3), 190},
		{"new term alone: kept", probe(t0.Add(20*time.Second), 260, 2, 4), 190},
		{"alarm: written", probe(t0.Add(25*time.Second), 270, 2, 4, "NOSPACE"), 270},
		{"refresh interval passed: written", probe(t0.Add(90*time.Second), 300, 2, 4, "NOSPACE"), 300},
	}
	for _, s := range steps {
		r.observeHealth(m, target, s.probes)
		if got := m.Status.Health.RaftIndex; got != s.wantIndex {
			t.Fatalf("%s: raftIndex %d, want %d", s.name, got, s.wantIndex)
		}
	}
	if !status.HasReason(m, v1alpha1.ConditionHealthy, v1alpha1.ReasonAlarm) {
		t.Fatalf("Healthy = %+v, want Alarm", status.Get(m, v1alpha1.ConditionHealthy))
	}

	// A member missing from the probes (listed after the last round) is left as it was.
	before := m.DeepCopy()
	r.observeHealth(m, etcd.Member{ID: 9}, probe(t0, 1, 1, 1))
	if m.Status.Health.RaftIndex != before.Status.Health.RaftIndex {
		t.Fatal("a member without a probe changed status")
	}
}

func TestSummarizeCountsOnlyNotableChanges(t *testing.T) {
	base := Probes{Members: map[uint64]etcd.Health{
		1: {Reachable: true, Serving: true, Status: etcd.EndpointStatus{Leader: 1, RaftTerm: 2, RaftIndex: 10, DBSize: 1}},
		2: {Reachable: true, Serving: true, Status: etcd.EndpointStatus{Leader: 1, RaftTerm: 2, RaftIndex: 10, DBSize: 1}},
	}}
	moved := Probes{Members: map[uint64]etcd.Health{
		1: {Reachable: true, Serving: true, Status: etcd.EndpointStatus{Leader: 1, RaftTerm: 2, RaftIndex: 99, DBSize: 7}},
		2: {Reachable: true, Serving: true, Status: etcd.EndpointStatus{Leader: 1, RaftTerm: 2, RaftIndex: 98, DBSize: 7}},
	}}
	if summarize(base) != summarize(moved) {
		t.Error("raft index and DB size changes count as health changes")
	}
	down := Probes{Members: map[uint64]etcd.Health{1: base.Members[1], 2: {}}}
	if summarize(base) == summarize(down) {
		t.Error("an unreachable member does not count as a change")
	}
	alarmed := Probes{Members: base.Members, Alarms: map[uint64][]string{2: {"NOSPACE"}}}
	if summarize(base) == summarize(alarmed) {
		t.Error("an alarm does not count as a change")
	}
}

// TestHealthMessagesStableAcrossErrors: a member that stays down fails each probe with different
// error text (a refused connection, then a timeout); the condition must read the same, or every
// probe would be a status write and a Warning Event.
func TestHealthMessagesStableAcrossErrors(t *testing.T) {
	target := etcd.Member{ID: 2, ClientURLs: []string{"http://10.0.0.2:2379"}}
	for _, pair := range [][2]etcd.Health{
		{{Err: errors.New("dial tcp 10.0.0.2:2379: connect: connection refused")}, {Err: context.DeadlineExceeded}},
		{{Reachable: true, Err: errors.New("etcdserver: no leader")}, {Reachable: true, Err: errors.New("etcdserver: request timed out")}},
	} {
		s1, r1, m1 := healthCondition(target, pair[0], nil, time.Second)
		s2, r2, m2 := healthCondition(target, pair[1], nil, time.Second)
		if s1 != s2 || r1 != r2 || m1 != m2 {
			t.Errorf("%s/%s %q\nvs %s/%s %q: want the same condition for the same state", s1, r1, m1, s2, r2, m2)
		}
		if strings.Contains(m1, pair[0].Err.Error()) {
			t.Errorf("message %q carries the error text", m1)
		}
	}
}

// TestNotServingNeedsTwoRounds: a serving member turns Healthy=False/NotServing only once two
// probe rounds in a row found it without a leader; one round is most often an election. Other
// verdicts, and a member already unhealthy, follow each round.
func TestNotServingNeedsTwoRounds(t *testing.T) {
	target := etcd.Member{ID: 2, ClientURLs: []string{"http://10.0.0.2:2379"}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var prev *Probes
	round := func(i int, h etcd.Health) Probes {
		h.At = t0.Add(time.Duration(i) * 5 * time.Second)
		p := Probes{Members: map[uint64]etcd.Health{2: h}}
		if prev != nil && prev.Members[2].At.Equal(h.At) {
			// The same round, reconciled again.
			return *prev
		}
		p.carryStreaks(prev)
		prev = &p
		return p
	}
	serving := etcd.Health{Reachable: true, Serving: true}
	noLeader := etcd.Health{Reachable: true, Err: errors.New("etcdserver: no leader")}
	down := etcd.Health{Err: errors.New("connection refused")}

	r := &MembershipReconciler{HealthRefresh: time.Minute, ProbeTimeout: time.Second}
	m := member(false)
	steps := []struct {
		name   string
		probes Probes
		want   string
	}{
		{"serving", round(0, serving), "True/Serving"},
		{"one round without a leader", round(1, noLeader), "True/Serving"},
		{"the same round, reconciled again", round(1, noLeader), "True/Serving"},
		{"serving again: the streak ends", round(2, serving), "True/Serving"},
		{"a new streak's first round", round(3, noLeader), "True/Serving"},
		{"its second round", round(4, noLeader), "False/NotServing"},
		{"serving", round(5, serving), "True/Serving"},
		{"unreachable at once", round(6, down), "False/Unreachable"},
		{"answering without a leader while unhealthy", round(7, noLeader), "False/NotServing"},
	}
	for _, s := range steps {
		r.observeHealth(m, target, s.probes)
		c := status.Get(m, v1alpha1.ConditionHealthy)
		if got := string(c.Status) + "/" + c.Reason; got != s.want {
			t.Errorf("%s: Healthy=%s, want %s", s.name, got, s.want)
		}
	}
}
