package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// TestRemovableIgnoresLearners: learners have no vote, so neither their health nor their number
// changes whether removing a voter keeps quorum, and removing a learner is always fine.
func TestRemovableIgnoresLearners(t *testing.T) {
	members := []etcd.Member{
		{ID: 1, Name: "a"}, {ID: 2, Name: "b"}, {ID: 3, Name: "c"},
		{ID: 4, Name: "l1", IsLearner: true}, {ID: 5, Name: "l2", IsLearner: true},
	}
	cases := []struct {
		name    string
		target  uint64
		healthy map[uint64]bool
		status  metav1.ConditionStatus
		reason  string
	}{
		{"voters healthy, learners dead", 1, map[uint64]bool{1: true, 2: true, 3: true}, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept},
		{"one voter dead, learners healthy", 1, map[uint64]bool{1: true, 2: true, 4: true, 5: true}, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk},
		{"the dead voter itself", 3, map[uint64]bool{1: true, 2: true}, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept},
		{"a learner, everything dead", 4, map[uint64]bool{}, metav1.ConditionTrue, v1alpha1.ReasonLearner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := member(false)
			target, _ := etcd.FindMember(members, tc.target)
			setRemovable(m, view{target: target, members: members, probes: probesOf(tc.healthy), probed: true})
			c := status.Get(m, v1alpha1.ConditionRemovable)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("Removable = %+v, want %s/%s", c, tc.status, tc.reason)
			}
		})
	}

	// Before the first probe there is no verdict to give.
	m := member(false)
	setRemovable(m, view{target: members[0], members: members, probes: Probes{}, probed: false})
	if c := status.Get(m, v1alpha1.ConditionRemovable); c != nil {
		t.Fatalf("Removable set without any probe: %+v", c)
	}
}

// probesOf turns a health map into probes: healthy members served, the others did not answer.
func probesOf(healthy map[uint64]bool) Probes {
	p := Probes{Members: map[uint64]etcd.Health{}}
	for id, ok := range healthy {
		p.Members[id] = etcd.Health{Reachable: ok, Serving: ok}
	}
	return p
}

// TestGuardCountsAVoterAnsweredByAnotherAsUnhealthy: a voter whose client URLs another member
// answered counts as unhealthy, and the verdict says so.
func TestGuardCountsAVoterAnsweredByAnotherAsUnhealthy(t *testing.T) {
	a := etcd.Member{ID: 0xa, Name: "a", ClientURLs: []string{"http://10.0.0.1:2379"}}
	b := etcd.Member{ID: 0xb, Name: "b", ClientURLs: []string{"http://10.0.0.2:2379"}}
	d := etcd.Member{ID: 0xd, Name: "d", ClientURLs: []string{"http://10.0.0.1:2379"}}
	voters := []voter{{Member: a, Healthy: true}, {Member: b, Healthy: true}, {Member: d, AnsweredBy: 0xa}}
	v := checkRemoval(voters, b, "b")
	if v.Allowed {
		t.Fatalf("removal allowed: %s", v.Message)
	}
	if want := "d (http://10.0.0.1:2379) was answered by member a"; !strings.Contains(v.Message, want) {
		t.Errorf("verdict %q does not say %q", v.Message, want)
	}
}
