package controller

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
)

// TestServingVoters: the leader's cluster calls go to every voter that served the round, its
// own among them, on the URLs they were probed on; never to a learner.
func TestServingVoters(t *testing.T) {
	members := []etcd.Member{
		{ID: 1, ClientURLs: []string{"https://10.0.0.1:2379"}},
		{ID: 2, ClientURLs: []string{"https://10.0.0.2:2379"}},
		{ID: 3, ClientURLs: []string{"https://10.0.0.3:2379", "https://[fd00::3]:2379"}},
		{ID: 4, ClientURLs: []string{"https://10.0.0.4:2379"}, IsLearner: true},
	}
	round := func(serving ...uint64) Probes {
		p := Probes{Members: map[uint64]etcd.Health{}, List: members}
		for _, m := range members {
			p.Members[m.ID] = etcd.Health{Reachable: true, Serving: slices.Contains(serving, m.ID)}
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		probes Probes
		want   []string
	}{
		{"all serve", round(1, 2, 3, 4), []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379", "https://[fd00::3]:2379"}},
		{"one down", round(2, 3, 4), []string{"https://10.0.0.2:2379", "https://10.0.0.3:2379", "https://[fd00::3]:2379"}},
		{"no voter serves", round(4), nil},
	} {
		if got := servingVoters(tc.probes); !slices.Equal(got, tc.want) {
			t.Errorf("%s: endpoints %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLeadersOwnMemberDies: the member the leader reads the member list through dies. The round
// that finds it down goes on with the last list, routes the calls to the members that serve, and
// the object turns Healthy=False; a leave that would cost quorum is refused on the guard's numbers.
func TestLeadersOwnMemberDies(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	w.term.local = 1
	var routed []string
	w.watcher.route = func(u []string) { routed = u }
	var state pollState
	w.pollRound(&state)
	if want := []string{"https://127.0.0.1:2379", "https://127.0.0.2:2379", "https://127.0.0.3:2379"}; !slices.Equal(routed, want) {
		t.Fatalf("routed to %v while every member serves, want %v", routed, want)
	}
	w.etcd.Set(1, func(m *etcdfake.Member) { m.Down = true })
	// Read through the dead member, the list fails; the round still probes.
	w.etcd.Fail(etcdfake.OpMemberList, errors.New("connection refused"))
	w.pollRound(&state)
	w.expect("node-1", v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable, "the round after the own member died")
	if want := []string{"https://127.0.0.2:2379", "https://127.0.0.3:2379"}; !slices.Equal(routed, want) {
		t.Errorf("routed to %v, want the serving voters %v", routed, want)
	}
	w.askLeave("node-2")
	w.mustReconcileEnqueued("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "a leave with the own member dead")
}

// TestDueRoundDoesNotWaitForTheListRead: a member froze, and the poll's member list read goes to
// it (no round has found it yet, so the calls still go there) and hangs until its timeout. The
// round that fell due starts on the last list without waiting for that read, so the failure shows
// one probe timeout after the round fell due, not two.
func TestDueRoundDoesNotWaitForTheListRead(t *testing.T) {
	w := newWorld(t, etcdfake.Voters(3)...)
	var state pollState
	w.pollRound(&state)
	w.etcd.Set(2, func(m *etcdfake.Member) { m.Frozen = true })
	probing := make(chan struct{})
	list := &listBehindProbes{Cluster: w.etcd, probing: probing}
	w.watcher.etcd = list
	w.watcher.peers = &signalProbes{Peers: w.etcd, probing: probing}
	w.pollRound(&state)
	if !list.answered {
		t.Error("the member list read ended before any probe of the due round started: the round waited for the read")
	}
	w.expect("node-2", v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable, "the round after the member froze")
}

// listBehindProbes answers the member list only once a probe has started, and otherwise fails
// it at its deadline, as a read sent to a frozen member does.
type listBehindProbes struct {
	Cluster
	probing  <-chan struct{}
	answered bool
}

func (l *listBehindProbes) MemberList(ctx context.Context) ([]etcd.Member, error) {
	select {
	case <-l.probing:
		l.answered = true
		return l.Cluster.MemberList(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// signalProbes closes probing at the first probe.
type signalProbes struct {
	Peers
	probing chan struct{}
	once    sync.Once
}

func (s *signalProbes) Probe(ctx context.Context, m etcd.Member, timeout time.Duration) etcd.Health {
	s.once.Do(func() { close(s.probing) })
	return s.Peers.Probe(ctx, m, timeout)
}

// TestRemovalVia: a removal goes to a voter that served when last probed and stays: etcd's leader
// when that is another member, never the member removed, one that did not serve, or one on whose
// URLs another member answers; with none such it is not sent at all.
func TestRemovalVia(t *testing.T) {
	v := func(id uint64, healthy bool, leader uint64) voter {
		return voter{Member: etcd.Member{ID: id}, Healthy: healthy, Leader: leader}
	}
	answeredBy := v(2, true, 3)
	answeredBy.AnsweredBy = 1
	r := &MembershipReconciler{Probes: func() (Probes, bool) { return Probes{}, false }}
	for _, tc := range []struct {
		name   string
		voters []voter
		want   uint64
	}{
		{"etcd's leader, listed last", []voter{v(1, true, 3), v(2, true, 3), v(3, true, 3)}, 3},
		{"the target leads: another", []voter{v(1, true, 2), v(2, false, 0), v(3, true, 2)}, 1},
		{"the target first in the list", []voter{v(2, false, 0), v(3, true, 1), v(1, true, 1)}, 1},
		{"only a member that does not serve is left", []voter{v(1, false, 0), v(2, false, 0)}, 0},
		{"another member answers on its URLs", []voter{v(2, false, 0), answeredBy}, 0},
		{"no probes", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			via, err := r.removalVia(2, tc.voters)
			switch {
			case tc.want == 0 && err == nil:
				t.Errorf("sent to %d, want not sent", via.ID)
			case tc.want != 0 && (err != nil || via.ID != tc.want):
				t.Errorf("sent to %d (%v), want %d", via.ID, err, tc.want)
			}
		})
	}
}

// TestFakeCatchesARemovalSentToItsTarget: the fake applies a removal sent to the member it removes,
// answers as that stopping member does, and records it, which fails every in-process test
// (newWorld's cleanup); one sent to a member that stays is not recorded.
func TestFakeCatchesARemovalSentToItsTarget(t *testing.T) {
	c := etcdfake.New(etcdfake.Voters(3)...)
	if err := c.MemberRemove(t.Context(), etcd.Member{ID: 3}, 3); !errors.Is(err, rpctypes.ErrStopped) {
		t.Errorf("removal sent to its target answered %v, want %v", err, rpctypes.ErrStopped)
	}
	if err := c.MemberRemove(t.Context(), etcd.Member{ID: 1}, 2); err != nil {
		t.Errorf("removal sent to a member that stays: %v", err)
	}
	if got := c.SentToTarget(); !slices.Equal(got, []uint64{3}) {
		t.Errorf("recorded %v as sent to their target, want [3]", got)
	}
	if c.Has(2) || c.Has(3) {
		t.Errorf("both removals are applied; the list still has 2: %v, 3: %v", c.Has(2), c.Has(3))
	}
}
