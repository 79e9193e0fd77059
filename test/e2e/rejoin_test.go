package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestRejoinAfterWipe: a node that left comes back wiped and re-added under the same name. Its
// agent takes the object over: new member ID, leave cleared, Joined=True/Rejoined.
func TestRejoinAfterWipe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	target := otherThan(e, e.leaderAgent())
	oldID := target.IDHex()
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)

	e.cluster.Rejoin(t, target, false)
	if target.IDHex() == oldID {
		t.Fatalf("rejoined member kept its ID %s", oldID)
	}
	obj := e.waitFor(target.Name, "Joined=True/Rejoined with the new ID", func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex() &&
			hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonRejoined)
	})
	if obj.Spec.Leave {
		t.Errorf("spec.leave not cleared: %s", describe(obj))
	}
	if condition(obj, v1alpha1.ConditionLeft) != nil {
		t.Errorf("the old leave's outcome still shows: %s", describe(obj))
	}
	// The object stays usable: the new member can leave again.
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed again", removedByUs)
}

// TestRejoinWithoutAgent: when the re-joined node's agent is not running (yet), the leader takes
// the object over itself once the discovery grace has passed, rather than giving the member a
// second object; the agent, started later, finds its member already recorded. The chaos run found
// the second object when an agent came back later than the grace.
func TestRejoinWithoutAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	target := otherThan(e, e.leaderAgent())
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	e.agents[target.Name].Stop(t)

	e.cluster.Rejoin(t, target, false)
	e.waitFor(target.Name, "taken over by the leader", func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex() && !m.Spec.Leave &&
			hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonRejoined)
	})
	e.agents[target.Name].Start(t)
	// Two discovery graces at the tests' poll interval: long enough for a duplicate to appear.
	e.holds(target.Name, "still the member's only object", 10*time.Second, func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex()
	})
	var list v1alpha1.EtcdMemberList
	e.retry("list", func(ctx context.Context) error { return e.client.List(ctx, &list) })
	for _, o := range list.Items {
		if o.Name != target.Name && o.Status.MemberID == target.IDHex() {
			t.Fatalf("object %s also records member %s: %s", o.Name, target.IDHex(), describe(&o))
		}
	}
	e.waitEvent(target.Name, "Normal", v1alpha1.ReasonRejoined)
}

// removeByHand removes a member behind etcdmember's back, as an operator with etcdctl would.
func removeByHand(t *testing.T, e *env, m *framework.Member) {
	t.Helper()
	// etcd refuses a removal ("unhealthy cluster") until the members have been connected for 5 s,
	// which a scenario that starts with a removal can still be within. The request goes through
	// another member: sent to the member being removed, it can stop before it answers ("server
	// stopped"), which CI caught.
	var cli *clientv3.Client
	for _, other := range e.cluster.Members() {
		if other.Name != m.Name && other.Running() {
			cli = other.Client(t)
			break
		}
	}
	if cli == nil {
		t.Fatalf("no running member other than %s to remove it through", m.Name)
	}
	err := framework.Poll(settle, pollEvery, apiCall(func(ctx context.Context) error {
		_, err := cli.MemberRemove(ctx, m.ID())
		return unlessUnhealthy(err)
	}))
	if err != nil {
		t.Fatalf("member remove %s: %v", m.IDHex(), err)
	}
}

// unlessUnhealthy lets a wait retry etcd's refusal of a membership change while it counts the
// cluster unhealthy (members just added or restarted), and stops it on any other error.
func unlessUnhealthy(err error) error {
	if err != nil && !errors.Is(err, rpctypes.ErrUnhealthy) {
		return framework.Stop(err)
	}
	return err
}
