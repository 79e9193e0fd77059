package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestUnregisteredMembersAreDiscovered: every etcd member is visible as exactly one object, and
// can be asked to leave, even when no agent registered it: a member added by hand and started, a
// member added by hand and never started (so nameless), and a member sharing its name with another.
func TestUnregisteredMembersAreDiscovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	byHand := e.cluster.AddMember(t, "node-4", false)
	twin := e.cluster.AddMemberAs(t, "node-5", "node-1", false)

	// An unstarted voter costs quorum; with 5 started of 6 voters the cluster keeps working. etcd
	// refuses ("unhealthy cluster") until the members just added have been connected a while, so
	// that refusal is waited out.
	var nameless uint64
	err := framework.Poll(settle, 500*time.Millisecond, apiCall(func(ctx context.Context) error {
		resp, err := e.cluster.Client(t).MemberAdd(ctx, []string{"http://" + net.JoinHostPort("127.0.0.1", "1")})
		if err != nil {
			return unlessUnhealthy(err)
		}
		nameless = resp.Member.ID
		return nil
	}))
	if err != nil {
		t.Fatalf("member add: %v", err)
	}

	want := map[string]uint64{
		"node-4":                            byHand.ID(),
		"node-1-" + twin.IDHex():            twin.ID(),
		"member-" + etcd.IDString(nameless): nameless,
	}
	for name, id := range want {
		obj := e.waitFor(name, "discovered and Joined", joined)
		if obj.Status.MemberID != etcd.IDString(id) || obj.Labels[v1alpha1.LabelDiscovered] != "true" {
			t.Errorf("%s: memberID %s labels %v, want %s and the discovered label", name, obj.Status.MemberID, obj.Labels, etcd.IDString(id))
		}
	}
	if obj := e.get("node-1-" + twin.IDHex()); obj.Status.Name != "node-1" {
		t.Errorf("the twin's etcd name is not kept in status.name: %q", obj.Status.Name)
	}
	assertOneObjectPerMember(t, e)

	for name := range want {
		e.leave(name)
	}
	for name := range want {
		e.waitFor(name, "Left=True/Removed", removedByUs)
	}
	ids := e.etcdMemberIDs()
	if len(ids) != 3 {
		t.Fatalf("etcd has %d members after removing the three discovered ones, want 3", len(ids))
	}
	if obj := e.get("node-1"); !joined(obj) || obj.Spec.Leave {
		t.Fatalf("node-1, whose name the twin shared, was touched: %s", describe(obj))
	}
}

// assertOneObjectPerMember checks that every member in etcd has exactly one object.
func assertOneObjectPerMember(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := e.client.List(ctx, &list, &client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	count := map[string][]string{}
	for _, o := range list.Items {
		count[o.Status.MemberID] = append(count[o.Status.MemberID], o.Name)
	}
	for id := range e.etcdMemberIDs() {
		if names := count[etcd.IDString(id)]; len(names) != 1 {
			t.Errorf("member %s has objects %v, want exactly one", etcd.IDString(id), names)
		}
	}
}

// TestRemovableFollowsHealth: the pre-flight condition answers before anyone asks.
func TestRemovableFollowsHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	others := nonLeaders(e)
	dead, alive := others[0], others[1]
	for _, m := range e.cluster.Members() {
		e.waitFor(m.Name, "Removable=True", func(o *v1alpha1.EtcdMember) bool {
			return hasCondition(o, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept)
		})
	}
	e.agents[dead.Name].Kill(t)
	dead.Kill(t)
	obj := e.waitFor(alive.Name, "Removable=False/QuorumAtRisk", func(o *v1alpha1.EtcdMember) bool {
		return hasCondition(o, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	})
	if msg := condition(obj, v1alpha1.ConditionRemovable).Message; !strings.Contains(msg, "would leave 1 healthy voter of 2") {
		t.Errorf("Removable message lacks the numbers: %q", msg)
	}
	e.waitFor(dead.Name, "Removable=True for the dead member", func(o *v1alpha1.EtcdMember) bool {
		return hasCondition(o, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept)
	})
	dead.Start(t)
	e.waitFor(alive.Name, "Removable=True again", func(o *v1alpha1.EtcdMember) bool {
		return hasCondition(o, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept)
	})
}
