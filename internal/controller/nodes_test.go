package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrl "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// The node controller on the in-process tier: its decisions on Nodes and objects in the fake API,
// next to the membership reconciler on a modelled cluster, so that a Node's deletion can be followed
// through the leave it asks for.

// apiNodes reads Nodes from the world's API and records which ones the controller follows.
type apiNodes struct {
	w        *world
	followed map[string]bool
}

func (n *apiNodes) Node(ctx context.Context, name string, follow bool) (*metav1.PartialObjectMetadata, error) {
	n.followed[name] = follow
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(nodeGVK)
	err := n.w.api.Get(ctx, types.NamespacedName{Name: name}, node)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return node, err
}

// nodeWorld is a world of three voters whose objects are bound to Nodes of their names.
type nodeWorld struct {
	*world
	nodes *apiNodes
	nr    *NodeReconciler
}

func newNodeWorld(t *testing.T, leaveOnDelete bool) *nodeWorld {
	t.Helper()
	w := &nodeWorld{world: newWorld(t, etcdfake.Voters(3)...)}
	w.nodes = &apiNodes{w: w.world, followed: map[string]bool{}}
	w.nr = &NodeReconciler{
		Client: w.api, APIReader: w.api, Events: &events.Recorder{Client: w.api, Namespace: "kube-system"},
		Nodes: w.nodes, LeaveOnDelete: leaveOnDelete, Hold: 5 * time.Minute, Clock: w.clock,
	}
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		w.registerNode(name)
		m := w.get(name)
		m.Status.NodeName = name
		if err := w.api.Status().Update(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		w.reconcileNode(name)
	}
	return w
}

func (w *nodeWorld) registerNode(name string) {
	w.t.Helper()
	if err := w.api.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *nodeWorld) reconcileNode(name string) ctrl.Result {
	w.t.Helper()
	res, err := w.nr.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	if err != nil {
		w.t.Fatalf("reconcile Node %s: %v", name, err)
	}
	return res
}

// node returns the Node, nil once it is gone.
func (w *nodeWorld) node(name string) *corev1.Node {
	w.t.Helper()
	n := &corev1.Node{}
	err := w.api.Get(context.Background(), types.NamespacedName{Name: name}, n)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

func (w *nodeWorld) held(name string) bool {
	w.t.Helper()
	n := w.node(name)
	return n != nil && slices.Contains(n.Finalizers, v1alpha1.FinalizerNode)
}

// deleteNode deletes the Node as the apiserver does with finalizers: it stays, being deleted,
// until they are gone. The world's clock moves to the deletion, which the fake API stamps with
// the real time.
func (w *nodeWorld) deleteNode(name string) {
	w.t.Helper()
	if err := w.api.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		w.t.Fatal(err)
	}
	if n := w.node(name); n != nil && n.DeletionTimestamp != nil {
		w.clock.SetTime(n.DeletionTimestamp.Time)
	}
}

func (w *nodeWorld) eventsOf(name, reason string) []eventsv1.Event {
	w.t.Helper()
	var list eventsv1.EventList
	if err := w.api.List(context.Background(), &list); err != nil {
		w.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == name && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// TestNodeFinalizerFollowsBinding: the finalizer is on every Node bound to a member etcd lists and
// on no other; a binding by spec.nodeName wins over the agent's status.nodeName.
func TestNodeFinalizerFollowsBinding(t *testing.T) {
	w := newNodeWorld(t, true)
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		if !w.held(name) || !w.nodes.followed[name] {
			t.Errorf("Node %s: held %v, followed %v; want both", name, w.held(name), w.nodes.followed[name])
		}
	}
	w.registerNode("worker-1")
	w.reconcileNode("worker-1")
	if w.held("worker-1") || w.nodes.followed["worker-1"] {
		t.Errorf("an unbound Node is held or followed")
	}

	// An operator rebinds node-3's member to worker-1: node-3 is released, worker-1 held.
	w.edit("node-3", func(m *v1alpha1.EtcdMember) { m.Spec.NodeName = "worker-1" })
	w.reconcileNode("node-3")
	w.reconcileNode("worker-1")
	if w.held("node-3") || !w.held("worker-1") {
		t.Errorf("after spec.nodeName=worker-1: node-3 held %v, worker-1 held %v; want false, true", w.held("node-3"), w.held("worker-1"))
	}

	// A member that left etcd holds its Node no more, and its object, kept as history, needs no
	// watch of the Node.
	w.askLeave("node-2")
	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, "after the leave")
	w.reconcileNode("node-2")
	if w.held("node-2") || w.nodes.followed["node-2"] {
		t.Errorf("the Node of a removed member: held %v, followed %v; want neither", w.held("node-2"), w.nodes.followed["node-2"])
	}
}

// TestNodeFinalizerOffReleasesEverything: without the option every finalizer found goes, and no
// Node is followed.
func TestNodeFinalizerOffReleasesEverything(t *testing.T) {
	w := newNodeWorld(t, true)
	w.nr.LeaveOnDelete = false
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		w.reconcileNode(name)
		if w.held(name) || w.nodes.followed[name] {
			t.Errorf("Node %s with the option off: held %v, followed %v", name, w.held(name), w.nodes.followed[name])
		}
	}
	// A Node being deleted that an earlier leader held goes at once, and nobody is asked to leave.
	w.nr.LeaveOnDelete = true
	w.reconcileNode("node-2")
	w.deleteNode("node-2")
	w.nr.LeaveOnDelete = false
	w.reconcileNode("node-2")
	if w.node("node-2") != nil {
		t.Errorf("a deleted Node is still there with the option off")
	}
	if m := w.get("node-2"); m.Spec.Leave {
		t.Errorf("the option off, a Node's deletion asked for a leave: %+v", m.Spec)
	}
}

// TestDeletedNodeAsksLeaveOnceThenGoes: a bound Node being deleted asks its member to leave with
// its member ID and the reason, once however often it is reconciled and by whichever term; the
// membership reconciler removes the member, and the Node goes.
func TestDeletedNodeAsksLeaveOnceThenGoes(t *testing.T) {
	w := newNodeWorld(t, true)
	w.deleteNode("node-2")
	res := w.reconcileNode("node-2")
	if res.RequeueAfter != 5*time.Minute {
		t.Errorf("requeue after %s, want the hold of 5m", res.RequeueAfter)
	}
	m := w.get("node-2")
	why := m.Annotations[v1alpha1.AnnotationLeaveReason]
	if !m.Spec.Leave || m.Spec.MemberID != "2" || !strings.HasPrefix(why, "Node node-2 (uid ") {
		t.Fatalf("request: spec %+v, reason %q", m.Spec, why)
	}
	version := m.ResourceVersion
	// A new term sees the same deletion: nothing is written again.
	w.nr.Events = &events.Recorder{Client: w.api, Namespace: "kube-system"}
	w.reconcileNode("node-2")
	if got := w.get("node-2").ResourceVersion; got != version {
		t.Errorf("the request was written again (resourceVersion %s, then %s)", version, got)
	}
	if n := len(w.eventsOf("node-2", v1alpha1.ReasonNodeDeleted)); n != 1 {
		t.Errorf("%d NodeDeleted Events, want 1", n)
	}
	if w.node("node-2") == nil {
		t.Fatal("the Node went before its member left")
	}

	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "the leave the Node asked for")
	w.reconcileNode("node-2")
	if w.node("node-2") != nil {
		t.Errorf("the Node is still there after its member left")
	}
	if n := len(w.eventsOf("node-2", v1alpha1.ReasonNodeReleasedLeavePending)); n != 0 {
		t.Errorf("%d NodeReleasedLeavePending Events for a leave that completed", n)
	}
}

// TestDeletedNodeReleasedAfterHold: a refused leave holds the Node until the hold has passed since
// the deletion; then the Node goes with the guard's numbers, and the leave stays pending.
func TestDeletedNodeReleasedAfterHold(t *testing.T) {
	w := newNodeWorld(t, true)
	w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true })
	w.deleteNode("node-2")
	deleted := w.clock.Now()
	w.reconcileNode("node-2")
	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "with node-3 down")

	w.clock.SetTime(deleted.Add(4 * time.Minute))
	if res := w.reconcileNode("node-2"); res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("4m into the hold: requeue after %s, want the minute left", res.RequeueAfter)
	}
	if w.node("node-2") == nil {
		t.Fatal("released before the hold ran out")
	}
	w.clock.SetTime(deleted.Add(5 * time.Minute))
	w.reconcileNode("node-2")
	if w.node("node-2") != nil {
		t.Fatal("still held after the hold ran out")
	}
	evs := w.eventsOf("node-2", v1alpha1.ReasonNodeReleasedLeavePending)
	if len(evs) != 1 || !strings.Contains(evs[0].Note, "would leave 1 healthy voter of 2") || evs[0].Type != corev1.EventTypeWarning {
		t.Fatalf("NodeReleasedLeavePending: %+v", evs)
	}
	if m := w.get("node-2"); !m.LeavePending() {
		t.Errorf("the leave is no longer pending: %+v", m.Status.Conditions)
	}
}

// slowEvents stands for a control plane slow to take an Event: while the first Event of reason is
// written, during runs, as the rest of the world goes on meanwhile.
type slowEvents struct {
	client.Client
	reason string
	during func()
}

func (s *slowEvents) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if ev, ok := obj.(*eventsv1.Event); ok && ev.Reason == s.reason && s.during != nil {
		during := s.during
		s.during = nil
		during()
	}
	return s.Client.Create(ctx, obj, opts...)
}

// slowNodeDeletedEvent makes the next NodeDeleted Event slow: while it is written, the leader
// reconciles name's leave and the hold (5m) runs out.
func (w *nodeWorld) slowNodeDeletedEvent(name string) {
	deleted := w.clock.Now()
	w.nr.Events = &events.Recorder{Namespace: "kube-system", Client: &slowEvents{Client: w.api, reason: v1alpha1.ReasonNodeDeleted,
		during: func() {
			w.mustReconcile(name)
			w.clock.SetTime(deleted.Add(6 * time.Minute))
		}}}
}

// TestDeletedNodeReleasedWhileAsking: the hold can run out inside the reconcile that asks for the
// leave, while its NodeDeleted Event waits on a slow control plane (7 s in a make test run of
// issue #48), and the leader refuses the leave meanwhile. The release tells the leader's answer,
// read at the release, not the object as it was before the request.
func TestDeletedNodeReleasedWhileAsking(t *testing.T) {
	w := newNodeWorld(t, true)
	w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true })
	w.deleteNode("node-2")
	w.slowNodeDeletedEvent("node-2")
	w.reconcileNode("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "with node-3 down")
	if w.node("node-2") != nil {
		t.Fatal("still held after the hold ran out")
	}
	evs := w.eventsOf("node-2", v1alpha1.ReasonNodeReleasedLeavePending)
	if len(evs) != 1 || !strings.Contains(evs[0].Note, "would leave 1 healthy voter of 2") {
		t.Fatalf("NodeReleasedLeavePending does not tell the leader's answer: %+v", evs)
	}
}

// TestDeletedNodeLeftWhileAsking: a member that left while its Node's reconcile was asking is not
// reported as pending when the Node goes.
func TestDeletedNodeLeftWhileAsking(t *testing.T) {
	w := newNodeWorld(t, true)
	w.deleteNode("node-2")
	w.slowNodeDeletedEvent("node-2")
	w.reconcileNode("node-2")
	w.expect("node-2", v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "the leave the Node asked for")
	if w.node("node-2") != nil {
		t.Fatal("the Node is still there after its member left")
	}
	if n := len(w.eventsOf("node-2", v1alpha1.ReasonNodeReleasedLeavePending)); n != 0 {
		t.Errorf("%d NodeReleasedLeavePending Events for a member that left", n)
	}
}

// TestDeletedNodeCancelledLeave: an operator who cancels the leave a Node's deletion asked for
// keeps the member; the Node goes at once and the leave is not asked again.
func TestDeletedNodeCancelledLeave(t *testing.T) {
	w := newNodeWorld(t, true)
	w.etcd.Set(3, func(m *etcdfake.Member) { m.Down = true })
	w.deleteNode("node-2")
	w.reconcileNode("node-2")
	w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = false })
	w.reconcileNode("node-2")
	if w.node("node-2") != nil {
		t.Fatal("the Node is still held after the leave was cancelled")
	}
	if m := w.get("node-2"); m.Spec.Leave {
		t.Errorf("the cancelled leave was asked again")
	}
	if n := len(w.eventsOf("node-2", v1alpha1.ReasonNodeReleasedLeaveCancelled)); n != 1 {
		t.Errorf("%d NodeReleasedLeaveCancelled Events, want 1", n)
	}
}

// TestDeletedNodeOfGoneMember: a Node whose member is already out of etcd goes at once, asking
// nothing; one whose leave an operator asked already keeps that request as it is.
func TestDeletedNodeOfGoneMember(t *testing.T) {
	w := newNodeWorld(t, true)
	if err := w.etcdctlRemove(2); err != nil {
		t.Fatal(err)
	}
	w.mustReconcile("node-2")
	w.expect("node-2", v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound, "removed by someone else")
	w.deleteNode("node-2")
	w.reconcileNode("node-2")
	if w.node("node-2") != nil || w.get("node-2").Spec.Leave {
		t.Errorf("a gone member's Node: still there %v, leave asked %v", w.node("node-2") != nil, w.get("node-2").Spec.Leave)
	}

	w.edit("node-3", func(m *v1alpha1.EtcdMember) { m.Spec.Leave, m.Spec.MemberID = true, "3" })
	w.deleteNode("node-3")
	w.reconcileNode("node-3")
	m := w.get("node-3")
	if _, ok := m.Annotations[v1alpha1.AnnotationLeaveReason]; ok || !status.IsTrue(m, v1alpha1.ConditionJoined) {
		t.Errorf("an operator's pending leave was rewritten: %v", m.Annotations)
	}
	if w.node("node-3") == nil {
		t.Errorf("the Node went before the operator's leave completed")
	}
}

// TestDeletedNodeRequestNamesCurrentMember: a request left over from before the node re-joined
// (spec.memberID naming an earlier member) is replaced by one naming the member bound now.
func TestDeletedNodeRequestNamesCurrentMember(t *testing.T) {
	w := newNodeWorld(t, true)
	w.edit("node-2", func(m *v1alpha1.EtcdMember) { m.Spec.Leave, m.Spec.MemberID = true, "99" })
	w.deleteNode("node-2")
	w.reconcileNode("node-2")
	if m := w.get("node-2"); m.Spec.MemberID != "2" || !m.LeaveAsked() {
		t.Errorf("spec %+v, want a leave of member 2", m.Spec)
	}
}
