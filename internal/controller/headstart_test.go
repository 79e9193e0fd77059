package controller

import (
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// TestSameVoters: the guard may use the probes started on the previous member list only when the
// fresh list has the same voters at the same URLs; learners do not vote and do not count.
func TestSameVoters(t *testing.T) {
	a := etcd.Member{ID: 1, Name: "node-1", ClientURLs: []string{"http://127.0.0.1:2379"}}
	b := etcd.Member{ID: 2, Name: "node-2", ClientURLs: []string{"http://127.0.0.2:2379"}}
	learner := etcd.Member{ID: 3, ClientURLs: []string{"http://127.0.0.3:2379"}, IsLearner: true}
	moved := b
	moved.ClientURLs = []string{"http://127.0.0.9:2379"}
	promoted := learner
	promoted.IsLearner = false
	renamed := b
	renamed.Name = "other"
	cases := []struct {
		name       string
		probed, at []etcd.Member
		want       bool
	}{
		{"same list", []etcd.Member{a, b}, []etcd.Member{a, b}, true},
		{"other order", []etcd.Member{a, b}, []etcd.Member{b, a}, true},
		{"a learner joined", []etcd.Member{a, b}, []etcd.Member{a, b, learner}, true},
		{"a name changed", []etcd.Member{a, b}, []etcd.Member{a, renamed}, true},
		{"a voter left", []etcd.Member{a, b}, []etcd.Member{a}, false},
		{"a voter joined", []etcd.Member{a}, []etcd.Member{a, b}, false},
		{"a learner was promoted", []etcd.Member{a, b, learner}, []etcd.Member{a, b, promoted}, false},
		{"a voter's URLs changed", []etcd.Member{a, b}, []etcd.Member{a, moved}, false},
	}
	for _, tc := range cases {
		if got := sameVoters(tc.probed, tc.at); got != tc.want {
			t.Errorf("%s: sameVoters = %t, want %t", tc.name, got, tc.want)
		}
	}
}
