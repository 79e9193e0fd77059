package agent

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

func TestLeaseVacancy(t *testing.T) {
	const lease = 5 * time.Second
	t0 := time.Now()
	at := t0.Add

	t.Run("released", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("", "10", at(0))
		v.observe("", "10", at(3*time.Second))
		if got := v.freeFor(at(3 * time.Second)); got != 3*time.Second {
			t.Errorf("free for %s, want 3s from the first sight of the released Lease", got)
		}
	})
	t.Run("missing", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("", "", at(0))
		if got := v.freeFor(at(lease)); got != lease {
			t.Errorf("free for %s, want %s", got, lease)
		}
	})
	t.Run("held and renewed", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("other", "1", at(0))
		v.observe("other", "2", at(4*time.Second))
		if got := v.freeFor(at(8 * time.Second)); got != 0 {
			t.Errorf("free for %s, want 0: renewed 4s ago", got)
		}
		if !v.sawOther {
			t.Error("a renewal by another agent must count as another agent seen")
		}
	})
	t.Run("held by a dead agent", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("dead", "1", at(0))
		v.observe("dead", "1", at(7*time.Second))
		if got := v.freeFor(at(7 * time.Second)); got != 2*time.Second {
			t.Errorf("free for %s, want 2s: expired a lease duration after it was first seen", got)
		}
		if v.sawOther {
			t.Error("a record that never changed shows no live agent")
		}
	})
	t.Run("own unreleased record", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("me", "1", at(0))
		v.observe("", "2", at(time.Second))
		if v.sawOther {
			t.Error("our own record and its release are not another agent")
		}
	})
	t.Run("a failed read starts over", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("", "1", at(0))
		v.forget()
		if got := v.freeFor(at(10 * time.Second)); got != 0 {
			t.Errorf("free for %s after a failed read, want 0", got)
		}
		v.observe("", "1", at(10*time.Second))
		if got := v.freeFor(at(11 * time.Second)); got != time.Second {
			t.Errorf("free for %s, want 1s from the next answer", got)
		}
	})
}

func TestWithdraw(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	l, stepDowns := newTestLeadership(time.Time{})
	if l.endTerm(ended, onlyWhileCampaigning) {
		t.Error("a finished term's watcher withdrew the next term")
	}
	if !l.endTerm(live, onlyWhileCampaigning) || *stepDowns != 1 {
		t.Errorf("a campaigning term was not withdrawn (stepDowns %d)", *stepDowns)
	}
	l, stepDowns = newTestLeadership(time.Now())
	if l.endTerm(live, onlyWhileCampaigning) || *stepDowns != 0 {
		t.Error("a leading term was withdrawn; its controller must hand over instead")
	}
}

// TestStaysOut: an agent stays out of the election while its member's leave is pending and once
// its member is out of etcd, for whatever reason; a refused leave keeps it out too, and a member
// in etcd with no leave, or no object yet, does not.
func TestStaysOut(t *testing.T) {
	object := func(leave bool, conds ...metav1.Condition) *v1alpha1.EtcdMember {
		m := &v1alpha1.EtcdMember{Spec: v1alpha1.EtcdMemberSpec{Leave: leave}}
		m.Status.Conditions = conds
		return m
	}
	joined := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionJoined, Status: s, Reason: reason}
	}
	left := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionLeft, Status: s, Reason: reason}
	}
	for _, c := range []struct {
		name string
		own  *v1alpha1.EtcdMember
		want bool
	}{
		{"no object yet", nil, false},
		{"in etcd, no leave", object(false, joined(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)), false},
		{"leave pending", object(true, joined(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)), true},
		{"leave refused", object(true, joined(metav1.ConditionTrue, v1alpha1.ReasonInMemberList), left(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)), true},
		{"removed on request", object(true, joined(metav1.ConditionFalse, v1alpha1.ReasonRemoved), left(metav1.ConditionTrue, v1alpha1.ReasonRemoved)), true},
		{"evicted", object(false, joined(metav1.ConditionFalse, v1alpha1.ReasonEvicted)), true},
		{"removed by someone else", object(false, joined(metav1.ConditionFalse, v1alpha1.ReasonNotFound)), true},
		{"re-joined under its name", object(false, joined(metav1.ConditionTrue, v1alpha1.ReasonRejoined), left(metav1.ConditionTrue, v1alpha1.ReasonRemoved)), false},
	} {
		if got := staysOut(c.own); got != c.want {
			t.Errorf("%s: staysOut %v, want %v", c.name, got, c.want)
		}
	}
}
