package agent

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

func TestIdentityHolds(t *testing.T) {
	members := []etcd.Member{{ID: 1}, {ID: 2}}
	cases := []struct {
		name             string
		pinned, answered uint64
		members          []etcd.Member
		holds            bool
	}{
		{"first sync", 0, 2, members, true},
		{"same member", 1, 1, members, true},
		{"a VIP now lands on another node", 1, 2, members, false},
		{"rebuilt: the pinned member is gone", 1, 3, []etcd.Member{{ID: 2}, {ID: 3}}, true},
		{"rebuilt, the new member not added yet", 1, 3, []etcd.Member{{ID: 2}}, true},
	}
	for _, tc := range cases {
		if got := identityHolds(tc.pinned, tc.answered, tc.members); got != tc.holds {
			t.Errorf("%s: identityHolds = %v, want %v", tc.name, got, tc.holds)
		}
	}
}

func TestPinnedBy(t *testing.T) {
	registered := member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	discovered := member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	discovered.Labels = map[string]string{v1alpha1.LabelDiscovered: "true"}
	if id, ok := pinnedBy(registered, "node-2"); !ok || etcd.IDString(id) != testID {
		t.Errorf("an object registered under --name pins %x, %v; want %s", id, ok, testID)
	}
	if _, ok := pinnedBy(registered, ""); ok {
		t.Error("without --name the object's name comes from the answering member, yet it pins")
	}
	if _, ok := pinnedBy(discovered, "node-2"); ok {
		t.Error("an object the leader discovered pins")
	}
	blank := member("", "")
	blank.Status.MemberID = ""
	if _, ok := pinnedBy(blank, "node-2"); ok {
		t.Error("an object without a member ID pins")
	}
}

// TestWarnIdentityOnce: a mismatch that lasts gives one Warning; another mismatch, or the same
// one after the identity held again, gives another.
func TestWarnIdentityOnce(t *testing.T) {
	e := newHookEnv(t, interceptor.Funcs{}, member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList))
	ctx := context.Background()
	vip := identityError{object: "node-2", endpoint: "http://10.0.0.10:2379", pinned: 0x8e9e05c52164694d, answered: 1}
	for range 3 {
		e.r.warnIdentity(ctx, nil, vip)
	}
	if evs := e.eventReasons(t); len(evs) != 1 {
		t.Fatalf("events %q, want one %s", evs, v1alpha1.ReasonLocalMemberChanged)
	}
	other := vip
	other.answered = 3
	e.r.warnIdentity(ctx, nil, other)
	if evs := e.eventReasons(t); len(evs) != 2 {
		t.Fatalf("events %q after a second mismatch, want two", evs)
	}
	e.r.accept("node-2", localView{self: etcd.Member{ID: vip.pinned}, members: []etcd.Member{{ID: vip.pinned}, {ID: 1}}, clusterID: testCluster})
	e.r.warnIdentity(ctx, nil, other)
	if evs := e.eventReasons(t); len(evs) != 3 {
		t.Fatalf("events %q after the mismatch came back, want three", evs)
	}
	if got := e.r.LocalMemberID(); got != vip.pinned {
		t.Errorf("LocalMemberID %x, want the pinned %x", got, vip.pinned)
	}
	if others := e.r.last.others; len(others) != 1 || others[0].ID != 1 {
		t.Errorf("others %v, want member 1 only", others)
	}
}
