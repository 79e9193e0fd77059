package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
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

// TestRefreshWritesOnlyTheAgentsField: the agent binds an object that records no member, and
// afterwards writes status.advertisedPeerURLs only. Its member list can be older than what the
// leader recorded (here: the leader promoted the member and updated its peer URLs); writing it
// would undo the leader's record.
func TestRefreshWritesOnlyTheAgentsField(t *testing.T) {
	id, err := etcd.ParseID(testID)
	if err != nil {
		t.Fatal(err)
	}
	stale := etcd.Member{ID: id, Name: "node-2", IsLearner: true,
		PeerURLs: []string{"https://10.0.0.2:2380"}, ClientURLs: []string{"https://10.0.0.2:2379"}}
	adv := advertisement{urls: []string{"https://10.0.0.22:2380"}}

	recorded := member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	recorded.Status.PeerURLs = []string{"https://10.0.0.22:2380"}
	recorded.Status.ClientURLs = stale.ClientURLs
	status.Set(recorded, v1alpha1.ConditionPromoted, metav1.ConditionTrue, v1alpha1.ReasonPromoted, "")
	empty := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}

	kept := *recorded.Status.DeepCopy()
	kept.AdvertisedPeerURLs, kept.Conditions = adv.urls, nil
	for _, tc := range []struct {
		name string
		obj  *v1alpha1.EtcdMember
		// want is the status expected without its conditions, which conds summarizes.
		want  v1alpha1.EtcdMemberStatus
		conds []string
	}{
		{"bound: the leader's record stays", recorded, kept, []string{"Joined=True/InMemberList", "Promoted=True/Promoted"}},
		{"unbound: the agent binds it", empty, v1alpha1.EtcdMemberStatus{
			MemberID: testID, IsLearner: true, PeerURLs: stale.PeerURLs, ClientURLs: stale.ClientURLs,
			AdvertisedPeerURLs: adv.urls,
		}, []string{"Joined=True/InMemberList"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := v1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.obj.DeepCopy()).
				WithStatusSubresource(&v1alpha1.EtcdMember{}).Build()
			r := &Registrar{Reader: c, Client: c}
			obj := &v1alpha1.EtcdMember{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tc.obj), obj); err != nil {
				t.Fatal(err)
			}
			if err := r.refresh(t.Context(), obj, stale, adv); err != nil {
				t.Fatal(err)
			}
			got := &v1alpha1.EtcdMember{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tc.obj), got); err != nil {
				t.Fatal(err)
			}
			// Conditions are compared by type, status and reason: Set stamps the time.
			var conds []string
			for _, c := range got.Status.Conditions {
				conds = append(conds, c.Type+"="+string(c.Status)+"/"+c.Reason)
			}
			got.Status.Conditions = nil
			if !equality.Semantic.DeepEqual(got.Status, tc.want) || !slices.Equal(conds, tc.conds) {
				t.Errorf("status after the agent's refresh:\n got  %+v %v\n want %+v %v", got.Status, conds, tc.want, tc.conds)
			}
		})
	}
}

// TestExplainForbidden: a refusal of the agent's identity names the group config/rbac binds, and
// stays a Forbidden error; any other error passes through unchanged.
func TestExplainForbidden(t *testing.T) {
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "etcdmember.io", Resource: "etcdmembers"}, "node-1",
		errors.New(`User "etcdmember-agent-node-1" cannot get resource "etcdmembers"`))
	got := explainForbidden(fmt.Errorf("get etcdmember node-1: %w", refused))
	if !apierrors.IsForbidden(got) || !strings.Contains(got.Error(), "etcdmember:agents") || !strings.Contains(got.Error(), "etcdmember-agent-node-1") {
		t.Errorf("explainForbidden = %v: want a Forbidden error naming the group and keeping the API's answer", got)
	}
	other := errors.New("etcd unreachable")
	if got := explainForbidden(other); !errors.Is(got, other) || got.Error() != other.Error() {
		t.Errorf("explainForbidden(%v) = %v, want it unchanged", other, got)
	}
	if explainForbidden(nil) != nil {
		t.Error("explainForbidden(nil) is not nil")
	}
}

// TestLocalMemberIsNotReady: what gates the campaign is the local member as the one registered,
// not the whole registration, whose API calls may fail while the member works.
func TestLocalMemberIsNotReady(t *testing.T) {
	r := &Registrar{}
	if r.LocalMember() == nil {
		t.Fatal("before any sync, the local member counts as reached")
	}
	const pinned, rejoined = 0x8e9e05c52164694d, 0x1234
	view := localView{self: etcd.Member{ID: pinned}}
	r.noteLocal(view, nil)
	if r.LocalMember() == nil {
		t.Error("a member not registered yet (no pin) counts as reached")
	}
	r.local.Store(pinned)
	r.noteLocal(view, nil)
	r.lastSync.Store(&syncResult{err: errors.New("reading EtcdMember node-2: context deadline exceeded")})
	if err := r.LocalMember(); err != nil {
		t.Errorf("the API failed after the member answered, and LocalMember says %v", err)
	}
	if r.Ready() == nil {
		t.Error("Ready ignores the failed registration")
	}
	r.noteLocal(localView{self: etcd.Member{ID: rejoined}}, nil)
	if err := r.LocalMember(); err == nil || !strings.Contains(err.Error(), "not registered yet") {
		t.Errorf("a re-joined member not taken over yet: LocalMember says %v", err)
	}
	down := errors.New("etcd status of https://172.29.0.2:2379: context deadline exceeded")
	r.noteLocal(localView{}, down)
	if err := r.LocalMember(); !errors.Is(err, down) {
		t.Errorf("the local member down: LocalMember says %v, want it to wrap %v", err, down)
	}
}
