package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// The Node lifecycle (--leave-on-node-delete): deleting a member's Node asks the member to leave,
// and the Node goes once the member has, or after --node-delete-hold. The test bed runs no kubelet:
// Nodes are registered through the API, as a kubelet registers its own (framework.RegisterNode).

// nodeAgentArgs turn the option on; the hold is long enough never to release a Node in the
// scenarios that do not wait for it.
var nodeAgentArgs = []string{"--leave-on-node-delete", "--node-delete-hold=2m"}

func newNodeEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	cfg.nodes = true
	cfg.agentArgs = append(slices.Clone(nodeAgentArgs), cfg.agentArgs...)
	e := newEnv(t, cfg)
	for name := range e.agents {
		e.waitFor(name, "status.nodeName published", func(m *v1alpha1.EtcdMember) bool { return m.Status.NodeName == name })
		e.waitNodeHeld(name, true)
	}
	return e
}

// waitNodeHeld waits until the Node carries FinalizerNode (held) or does not (!held).
func (e *env) waitNodeHeld(name string, held bool) *corev1.Node {
	e.t.Helper()
	var node *corev1.Node
	framework.Eventually(e.t, settle, retryEvery, fmt.Sprintf("Node %s with the finalizer: %v", name, held), func(context.Context) (bool, error) {
		node = e.api.Node(e.t, name)
		return node != nil && slices.Contains(node.Finalizers, v1alpha1.FinalizerNode) == held, nil
	})
	return node
}

// deleteNode runs `kubectl delete node`, which waits until the Node is gone, and returns how
// long it took.
func (e *env) deleteNode(name string) time.Duration {
	e.t.Helper()
	start := time.Now()
	e.api.MustKubectl(e.t, "delete", "node", name, "--timeout=2m")
	took := time.Since(start)
	if node := e.api.Node(e.t, name); node != nil {
		e.t.Fatalf("kubectl delete node %s returned, but the Node is still there: %s", name, framework.NodeString(node))
	}
	return took
}

// startDeleteNode deletes the Node without waiting for it to go, as automation that only sends
// the DELETE does.
func (e *env) startDeleteNode(name string) {
	e.t.Helper()
	e.api.MustKubectl(e.t, "delete", "node", name, "--wait=false")
}

// nodeEvents returns the Events of reason about the object.
func (e *env) eventsOf(name, reason string) []eventsv1.Event {
	e.t.Helper()
	var out []eventsv1.Event
	for _, ev := range e.events(name) {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// assertLeftForNode checks what deleting the Node of member m left behind: m is out of etcd, its
// object says Removed, the request named m's member ID with the Node's reason, and one NodeDeleted
// Event says so.
func (e *env) assertLeftForNode(m *framework.Member, id uint64) {
	e.t.Helper()
	e.assertRemovedForNode(m, id)
	ev := e.waitEvent(m.Name, corev1.EventTypeNormal, v1alpha1.ReasonNodeDeleted)
	if !strings.Contains(ev.Note, fmt.Sprintf("%x", id)) || !strings.Contains(ev.Note, "Node "+m.Name) {
		e.t.Errorf("NodeDeleted Event does not name the Node and the member: %q", ev.Note)
	}
	if n := len(e.eventsOf(m.Name, v1alpha1.ReasonNodeDeleted)); n != 1 {
		e.t.Errorf("%d NodeDeleted Events about %s, want 1", n, m.Name)
	}
}

// assertRemovedForNode is assertLeftForNode without the Event.
func (e *env) assertRemovedForNode(m *framework.Member, id uint64) {
	e.t.Helper()
	if e.etcdMemberIDs()[id] {
		e.t.Fatalf("member %x of %s is still in etcd", id, m.Name)
	}
	obj := e.waitFor(m.Name, "Left=True/Removed", removedByUs)
	if obj.Spec.MemberID != fmt.Sprintf("%x", id) || !obj.Spec.Leave {
		e.t.Errorf("%s: the request does not name member %x: %s", m.Name, id, describe(obj))
	}
	if why := obj.Annotations[v1alpha1.AnnotationLeaveReason]; !strings.HasPrefix(why, "Node "+m.Name+" (uid ") || !strings.Contains(why, "--leave-on-node-delete") {
		e.t.Errorf("%s: leave-reason %q does not name the Node's deletion", m.Name, why)
	}
}

// TestDeleteNodeOfOperatorBoundMember: a member that has no agent (its object discovered by the
// leader) and that an operator bound to its Node by spec.nodeName is held and removed like any
// other when that Node is deleted.
func TestDeleteNodeOfOperatorBoundMember(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3, agents: []string{"node-1", "node-2"}})
	target := e.cluster.Member("node-3")
	id := target.ID()
	e.waitFor(target.Name, "discovered and Joined", func(m *v1alpha1.EtcdMember) bool {
		return joined(m) && m.Labels[v1alpha1.LabelDiscovered] == "true"
	})
	e.registerNode(target.Name)
	e.bindNode(target.Name, target.Name)
	e.waitNodeHeld(target.Name, true)
	e.deleteNode(target.Name)
	e.assertLeftForNode(target, id)
}

// TestDeleteNodeRemovesMember: kubectl delete node of a bound voter returns once the member is out
// of etcd; the object records the removal and why, and the other Nodes stay held.
func TestDeleteNodeRemovesMember(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	// What an operator sees: -o wide carries the Node each agent published.
	wide := e.kubectl("get", "etcdmembers.etcdmember.io", "-o", "wide")
	lines := strings.Split(strings.TrimSpace(wide), "\n")
	col := strings.Index(lines[0], " NODE ") + 1
	if col == 0 {
		t.Fatalf("kubectl get -o wide has no NODE column:\n%s", wide)
	}
	for _, line := range lines[1:] {
		name, _, _ := strings.Cut(line, " ")
		if got, _, _ := strings.Cut(line[col:], " "); got != name {
			t.Errorf("kubectl get -o wide: NODE of %s is %q, want %q:\n%s", name, got, name, wide)
		}
	}
	target := otherThan(e, e.leaderAgent())
	id := target.ID()

	e.deleteNode(target.Name)
	e.assertLeftForNode(target, id)
	for _, m := range e.cluster.Members() {
		if m != target {
			e.waitNodeHeld(m.Name, true)
			if !e.etcdMemberIDs()[m.ID()] {
				t.Errorf("member %s was removed too", m.Name)
			}
		}
	}
}

// TestDeleteNodeOfLeadingAgent: the leading agent never removes its own member; deleting its Node
// hands leadership over, and the next leader removes it and lets the Node go.
func TestDeleteNodeOfLeadingAgent(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	leader := e.leaderAgent()
	target := e.cluster.Member(leader)
	id := target.ID()

	e.deleteNode(leader)
	e.assertLeftForNode(target, id)
	e.waitEvent(leader, corev1.EventTypeNormal, v1alpha1.ReasonHandingOver)
	if now := e.leaderAgent(); now == leader {
		t.Errorf("leadership stayed with %s", leader)
	}
}

// TestDeleteNodeOfEtcdLeader: the Node of etcd's leader (not the leading agent's) goes after the
// controller moved etcd leadership away and removed the member.
func TestDeleteNodeOfEtcdLeader(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	target := e.etcdLeaderBesideAgentLeader()
	id := target.ID()

	e.deleteNode(target.Name)
	e.assertLeftForNode(target, id)
	if now := e.cluster.Leader(t); now == target {
		t.Errorf("etcd still reports the removed %s as leader", target.Name)
	}
}

// TestDeleteTwoNodesAtOnce: two of three Nodes deleted together; each removal is judged on the
// cluster the previous one left (3 → 2 → 1 keeps a quorum at every step), so both members go.
func TestDeleteTwoNodesAtOnce(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	leader := e.leaderAgent()
	var targets []*framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != leader {
			targets = append(targets, m)
		}
	}
	ids := []uint64{targets[0].ID(), targets[1].ID()}
	e.api.MustKubectl(t, "delete", "node", targets[0].Name, targets[1].Name, "--timeout=2m")
	for i, m := range targets {
		if node := e.api.Node(t, m.Name); node != nil {
			t.Fatalf("kubectl delete returned, but %s", framework.NodeString(node))
		}
		e.assertLeftForNode(m, ids[i])
	}
	if got := len(e.etcdMemberIDs()); got != 1 {
		t.Errorf("etcd lists %d members, want 1 (the leading agent's)", got)
	}
}

// TestDeleteNodeHoldThenRelease: four voters, one dead; two healthy members' Nodes deleted at once.
// The first removal leaves 2 healthy of 3, the second would leave 1 healthy of 2 and is refused:
// its Node is let go after --node-delete-hold with the guard's numbers, and the leave, still
// pending, completes once the dead member is back.
func TestDeleteNodeHoldThenRelease(t *testing.T) {
	t.Parallel()
	const hold = 6 * time.Second
	e := newNodeEnv(t, envConfig{size: 4, agentArgs: []string{fmt.Sprintf("--node-delete-hold=%s", hold)}})
	leader := e.leaderAgent()
	var others []*framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != leader {
			others = append(others, m)
		}
	}
	dead, targets := others[0], others[1:]
	dead.Kill(t)
	e.waitFor(dead.Name, "Healthy=False", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})

	start := time.Now()
	e.api.MustKubectl(t, "delete", "node", targets[0].Name, targets[1].Name, "--timeout=2m")
	took := time.Since(start)
	var removed, refused *framework.Member
	for _, m := range targets {
		if node := e.api.Node(t, m.Name); node != nil {
			t.Fatalf("kubectl delete returned, but %s", framework.NodeString(node))
		}
		if e.etcdMemberIDs()[m.ID()] {
			refused = m
		} else {
			removed = m
		}
	}
	if removed == nil || refused == nil {
		t.Fatalf("want one member removed and one refused; etcd lists %v", e.etcdMemberIDs())
	}
	// The hold counts from the deletionTimestamp, which the apiserver records to the second.
	if took < hold-time.Second {
		t.Errorf("kubectl delete returned after %s, before the hold of %s ran out", took, hold)
	}
	obj := e.waitFor(refused.Name, "Left=False/QuorumAtRisk", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	})
	if !obj.LeavePending() {
		t.Fatalf("the refused leave is no longer pending: %s", describe(obj))
	}
	ev := e.waitEvent(refused.Name, corev1.EventTypeWarning, v1alpha1.ReasonNodeReleasedLeavePending)
	if !strings.Contains(ev.Note, "would leave 1 healthy voter of 2") || !strings.Contains(ev.Note, refused.IDHex()) {
		t.Errorf("NodeReleasedLeavePending does not carry the guard's numbers and the member: %q", ev.Note)
	}
	if n := len(e.eventsOf(removed.Name, v1alpha1.ReasonNodeReleasedLeavePending)); n != 0 {
		t.Errorf("%d NodeReleasedLeavePending Events about %s, which left in time", n, removed.Name)
	}

	dead.Start(t)
	e.waitFor(refused.Name, "Left=True/Removed once the dead member is back", removedByUs)
	if e.etcdMemberIDs()[refused.ID()] {
		t.Fatalf("member of %s still in etcd", refused.Name)
	}
}

// TestDeleteNodeOfDeadMember: a member whose etcd is already dead is removed when its Node goes.
func TestDeleteNodeOfDeadMember(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	target := otherThan(e, e.leaderAgent())
	id := target.ID()
	target.Kill(t)
	e.waitFor(target.Name, "Healthy=False", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})
	e.deleteNode(target.Name)
	e.assertLeftForNode(target, id)
}

// TestNodeFinalizerOnlyWhereBound: no finalizer on a Node bound to nothing, and none at all while
// the option is off; their deletion is untouched. Turning the option off (every agent restarted
// without it) takes every finalizer off again.
func TestNodeFinalizerOnlyWhereBound(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	e.api.RegisterNode(t, "worker-1")
	members := len(e.etcdMemberIDs())
	window := 3 * time.Second
	framework.Consistently(t, window, retryEvery, "an unbound Node stays without the finalizer", func(context.Context) (bool, error) {
		node := e.api.Node(t, "worker-1")
		return node != nil && !slices.Contains(node.Finalizers, v1alpha1.FinalizerNode), nil
	})
	e.deleteNode("worker-1")

	for _, a := range e.agents {
		a.Stop(t)
	}
	for name, a := range e.agents {
		// The Node's name from the environment this time, as deploy/daemonset and
		// deploy/static-pod pass it: --node-name's default.
		a.SetArgs("--kubeconfig=" + e.agentKubeconfig)
		a.SetEnv(t, "NODE_NAME="+name)
		a.Start(t)
		// Ready means registered, with the agent's own fields written; an empty --node-name
		// would have unbound the object.
		if got := e.get(name).Status.NodeName; got != name {
			t.Errorf("%s: status.nodeName %q after a restart with NODE_NAME=%s and no --node-name", name, got, name)
		}
	}
	for name := range e.agents {
		e.waitNodeHeld(name, false)
	}
	// Deleted with the option off, a bound Node goes at once and its member stays.
	target := otherThan(e, e.leaderAgent())
	e.deleteNode(target.Name)
	e.holds(target.Name, "Joined=True, no leave", window, func(m *v1alpha1.EtcdMember) bool { return joined(m) && !m.Spec.Leave })
	if got := len(e.etcdMemberIDs()); got != members {
		t.Errorf("etcd lists %d members, want %d", got, members)
	}
}

// TestLeaderKilledDuringNodeDeletion: the leading agent dies between seeing the Node's deletion and
// writing the request, and, in a second round, between the request and the removal. Each time the
// next leader finishes: exactly one removal, of the bound member, asked for once.
func TestLeaderKilledDuringNodeDeletion(t *testing.T) {
	t.Parallel()
	for _, point := range []string{failpoint.NodeBeforeLeaveRequest, failpoint.LeaveBeforeRemove} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			e := newNodeEnv(t, envConfig{size: 3})
			// Only the agent that leads first crashes: the others run without the failpoint.
			leader := e.leaderAgent()
			for _, a := range e.agents {
				a.Stop(t)
			}
			crashing := e.agents[leader]
			crashing.SetEnv(t, failpoint.EnvVar+"="+point)
			crashing.Start(t)
			framework.Eventually(t, settle, retryEvery, leader+" leads again", func(context.Context) (bool, error) {
				return e.api.LeaderAgent(t) == leader, nil
			})
			for name, a := range e.agents {
				if name != leader {
					a.Start(t)
				}
			}
			target := otherThan(e, leader)
			id := target.ID()
			before := e.etcdMemberIDs()

			e.startDeleteNode(target.Name)
			err := framework.Poll(settle, 50*time.Millisecond, func(context.Context) (bool, error) {
				code, exited := crashing.Exited()
				if exited && code != failpoint.ExitCode {
					t.Fatalf("%s exited with code %d, not at the failpoint", leader, code)
				}
				return exited, nil
			})
			if err != nil {
				t.Fatalf("%s did not reach %s: %s", leader, point, describe(e.get(target.Name)))
			}
			framework.Eventually(t, settle, retryEvery, "Node "+target.Name+" gone", func(context.Context) (bool, error) {
				return e.api.Node(t, target.Name) == nil, nil
			})
			// The Event follows the request it reports, and is lost with a leader that dies
			// right after the request (the leave-before-remove round, often); it is never
			// written twice.
			e.assertRemovedForNode(target, id)
			if n := len(e.eventsOf(target.Name, v1alpha1.ReasonNodeDeleted)); n > 1 {
				t.Errorf("%d NodeDeleted Events about %s, want at most 1", n, target.Name)
			}
			after := e.etcdMemberIDs()
			for mid := range before {
				if after[mid] == (mid == id) {
					t.Errorf("member %x: in etcd before %v, after %v; want only %x removed", mid, before[mid], after[mid], id)
				}
			}
		})
	}
}

// TestRecreatedNodeRebinds: a Node deleted, its member removed, the node re-joined as a new member
// under a re-created Node of the same name: the new member is bound again and held, and deleting
// the Node again removes the new member only.
func TestRecreatedNodeRebinds(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	target := otherThan(e, e.leaderAgent())
	first := target.ID()
	e.deleteNode(target.Name)
	e.assertLeftForNode(target, first)

	e.api.RegisterNode(t, target.Name)
	e.cluster.Rejoin(t, target, false)
	second := target.ID()
	obj := e.waitFor(target.Name, "re-joined and bound", func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex() && joined(m) && m.Status.NodeName == target.Name
	})
	if _, ok := obj.Annotations[v1alpha1.AnnotationLeaveReason]; ok || obj.Spec.Leave {
		t.Errorf("the take-over kept the earlier request: %s, annotations %v", describe(obj), obj.Annotations)
	}
	e.waitNodeHeld(target.Name, true)

	members := e.etcdMemberIDs()
	e.deleteNode(target.Name)
	obj = e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	if obj.Spec.MemberID != target.IDHex() {
		t.Errorf("the second request names %s, want the new member %s", obj.Spec.MemberID, target.IDHex())
	}
	after := e.etcdMemberIDs()
	if after[second] || len(after) != len(members)-1 {
		t.Errorf("etcd lists %v after the second deletion; want %v without %x", after, members, second)
	}
}

// TestAgentsMayOnlyTouchTheNodeFinalizer: with the agents' own credential, against the shipped
// RBAC and admission policies: adding and removing the finalizer is all an agent may change on a
// Node; relabelling it, cordoning it or deleting it is refused. (A leave without the leave-reason
// annotation stays refused too: TestAgentsCannotForceOrAskUnexplained.)
func TestAgentsMayOnlyTouchTheNodeFinalizer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 1, agents: []string{}})
	e.api.RegisterNode(t, "node-x")
	agentCfg, _ := e.api.User(t, "etcdmember-agent-2", "etcdmember:agents")
	agent, err := client.New(agentCfg, client.Options{Scheme: e.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string) error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x"}}
		return agent.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	// A policy takes effect a moment after it is created: the first refusal is waited for, each
	// attempt with a new value (a patch that changes nothing is no change to refuse).
	attempt := 0
	framework.Eventually(t, settle, retryEvery, "the node guard refuses a label", func(context.Context) (bool, error) {
		attempt++
		return patch(fmt.Sprintf(`{"metadata":{"labels":{"wait-for-policy":"%d"}}}`, attempt)) != nil, nil
	})
	if err := patch(`{"metadata":{"finalizers":["` + v1alpha1.FinalizerNode + `"]}}`); err != nil {
		t.Fatalf("adding the finalizer with the agents' credential: %v", err)
	}
	for what, body := range map[string]string{
		"a label":           `{"metadata":{"labels":{"evil":"true"}}}`,
		"a label removed":   `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`,
		"an annotation":     `{"metadata":{"annotations":{"evil":"true"}}}`,
		"cordon":            `{"spec":{"unschedulable":true}}`,
		"another finalizer": `{"metadata":{"finalizers":["` + v1alpha1.FinalizerNode + `","example.com/other"]}}`,
	} {
		err := patch(body)
		if err == nil || !strings.Contains(err.Error(), "only by adding or removing the etcdmember.io/etcd-member finalizer") {
			t.Errorf("patching %s with the agents' credential: %v, want the node guard's refusal", what, err)
		}
	}
	if err := patch(`{"metadata":{"finalizers":null}}`); err != nil {
		t.Fatalf("removing the finalizer with the agents' credential: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	err = agent.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x"}})
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("deleting a Node with the agents' credential: %v, want forbidden", err)
	}

}

// TestLeaveOnNodeDeleteRefusedBesideOtherControllers: where the API shows that the distribution
// removes a deleted Node's member itself, the agent refuses the option, exits 1 and says why.
func TestLeaveOnNodeDeleteRefusedBesideOtherControllers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env)
		want  string
	}{
		{"k3s finalizer", func(t *testing.T, e *env) {
			e.api.RegisterNode(t, "k3s-server-1")
			e.kubectl("patch", "node", "k3s-server-1", "--type", "merge", "-p",
				`{"metadata":{"finalizers":["wrangler.cattle.io/managed-etcd-controller"]}}`)
		}, "--leave-on-node-delete refused: Node k3s-server-1 carries the finalizer wrangler.cattle.io/managed-etcd-controller"},
		{"k0s EtcdMember kind", installK0sCRD, "--leave-on-node-delete refused: the API serves etcd.k0sproject.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{size: 1, agents: []string{}})
			e.t = t
			tc.setup(t, e)
			a := framework.NewAgent(t, e.cluster.Member("node-1"), e.api, "--kubeconfig="+e.agentKubeconfig, "--leave-on-node-delete")
			a.StartUnready(t)
			err := framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
				_, exited := a.Exited()
				return exited, nil
			})
			if code, _ := a.Exited(); err != nil || code != 1 {
				t.Fatalf("the agent did not exit 1 (exited: %v, code %d)", err == nil, code)
			}
			e.agents["node-1"] = a
			if !e.agentLogsContain(tc.want) {
				t.Errorf("the agent's log does not say %q", tc.want)
			}
		})
	}
}

// TestDocumentedFinalizerRemoval: with the agents gone for good and the finalizer left on the
// Nodes, the command docs/install.md gives takes etcdmember's finalizer off every Node and leaves
// every other finalizer alone; the Nodes then delete.
func TestDocumentedFinalizerRemoval(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	for _, a := range e.agents {
		a.Kill(t)
	}
	e.kubectl("patch", "node", "node-1", "--type", "json", "-p", `[{"op":"add","path":"/metadata/finalizers/0","value":"example.com/keep"}]`)

	e.api.RunDocumented(t, "release-node-finalizers")
	for _, m := range e.cluster.Members() {
		node := e.api.Node(t, m.Name)
		if node == nil || slices.Contains(node.Finalizers, v1alpha1.FinalizerNode) {
			t.Errorf("after the documented command: %s", framework.NodeString(node))
		}
	}
	if node := e.api.Node(t, "node-1"); !slices.Equal(node.Finalizers, []string{"example.com/keep"}) {
		t.Errorf("the documented command touched another finalizer: %s", framework.NodeString(node))
	}
	e.deleteNode("node-2")
}
