package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// The Node lifecycle (--leave-on-node-delete) in a run: every member has a Node named like it
// (the test bed runs no kubelet, so the harness registers it), its agent runs with --node-name set
// to it, and the leading agent holds it with the finalizer. Deleting the Node is a leave request
// (deleteNode); a re-joined node gets its Node registered again once the old one is gone.

// nodeHold is the agents' --node-delete-hold. A removal on the test bed takes well under a second,
// a hand-over to the next agent about two, and a failover after the leading agent was killed about
// five (docs/BENCHMARKS.md), so a Node whose leave goes through is mostly let go because the member
// left; a leave the quorum guard refuses stays refused until the end of the scenario heals the
// cluster (the steps after it, a judging tail of 3 to 5 s, the heal), so the hold's own release,
// with the leave still pending, happens within scenarios too.
const nodeHold = 6 * time.Second

// nodeArgs turn the Node lifecycle on for every agent of a run; each agent also gets its own
// --node-name (newWorld).
var nodeArgs = []string{"--leave-on-node-delete", "--node-delete-hold=" + nodeHold.String()}

// isNodeReason tells whether a leave-reason annotation is one the node controller writes for a
// deleted Node ("Node X (uid U) deleted at T, --leave-on-node-delete"): it is the only record of
// who asked, and the harness reads it as the e2e tests do.
func isNodeReason(why string) bool {
	return strings.HasPrefix(why, "Node ") && strings.HasSuffix(why, "--leave-on-node-delete")
}

func (w *world) node(ctx context.Context, name string) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	node, err := w.api.Clientset().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Node %s: %w", name, err)
	}
	return node, nil
}

func (w *world) nodes(ctx context.Context) ([]corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	list, err := w.api.Clientset().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	return list.Items, nil
}

func held(node *corev1.Node) bool {
	return node != nil && node.DeletionTimestamp == nil && slices.Contains(node.Finalizers, v1alpha1.FinalizerNode)
}

// deleteNode deletes member i's Node, as an operator, Terraform or a cloud's node lifecycle
// controller would. It is a leave request like the harness's own (leave): the member the object
// records at that moment, bound to the Node, is registered as the one whose removal is asked for
// before the Node is deleted, so that the removal counts as asked for and a request the node
// controller writes for any other member does not. It skips where a leave skips (a leave of the
// member pending, or asked by the policy already, or the object not recording the member yet),
// and where the Node is not held: without the finalizer its deletion asks nothing.
//
// A deletion whose answer was lost is confirmed by reading the Node; one that cannot be read
// before the bound stays uncertain until restore reads it (resolveNodeDeletions).
func (r *run) deleteNode(i int) (string, error) {
	m := r.w.members[i]
	r.mu.Lock()
	pending := r.pending&(1<<i) != 0
	r.mu.Unlock()
	if pending {
		return "", skip("%s has a leave pending", m.Name)
	}
	l := &leaveRec{scenario: r.scenario, member: i, name: m.Name, id: m.ID(), idHex: m.IDHex()}
	sent := false
	nodes := r.w.api.Clientset().CoreV1().Nodes()
	err := framework.Poll(15*time.Second, pollEvery, retried(func(ctx context.Context) error {
		if sent {
			node, err := r.w.node(ctx, m.Name)
			switch {
			case err != nil:
				return err
			case node == nil || node.DeletionTimestamp != nil:
				// An earlier attempt landed; only its answer was lost.
				return nil
			}
		} else {
			obj, err := r.w.object(ctx, m.Name)
			if err != nil {
				return err
			}
			if obj.Status.MemberID != l.idHex || !status.IsTrue(obj, v1alpha1.ConditionJoined) || obj.BoundNode() != m.Name {
				return fmt.Errorf("the object does not record the member bound to Node %s yet: %s nodeName=%q", m.Name, describe(obj), obj.BoundNode())
			}
			if obj.Spec.Leave {
				return framework.Stop(skip("%s was asked to leave already: %s", m.Name, obj.Annotations[v1alpha1.AnnotationLeaveReason]))
			}
			node, err := r.w.node(ctx, m.Name)
			if err != nil {
				return err
			}
			if !held(node) {
				return fmt.Errorf("not held: %s", framework.NodeString(node))
			}
			l.nodeUID = node.UID
			r.mu.Lock()
			r.authorized[l.id] = l
			r.mu.Unlock()
		}
		l.issued = time.Now()
		sent = true
		err := nodes.Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.nodeUID}})
		if apierrors.IsNotFound(err) {
			// An earlier attempt landed, and the Node is gone already.
			return nil
		}
		return err
	}))
	switch {
	case err == nil:
	case !sent || refused(err):
		r.mu.Lock()
		if r.authorized[l.id] == l {
			delete(r.authorized, l.id)
		}
		r.mu.Unlock()
		return "", skip("delete Node %s: %v", m.Name, err)
	default:
		l.uncertain = true
	}
	r.mu.Lock()
	r.pending |= 1 << i
	r.leaves = append(r.leaves, l)
	r.c.nodeDeletions++
	r.mu.Unlock()
	if l.uncertain {
		return fmt.Sprintf("delete Node %s (uid %s, member %s): whether the deletion landed is unknown: %v", m.Name, l.nodeUID, l.idHex, err), nil
	}
	return fmt.Sprintf("deleted Node %s (uid %s), bound to member %s", m.Name, l.nodeUID, l.idHex), nil
}

// followNodesLocked follows, on a list of the Nodes, those the scenario deleted: when each started
// Terminating and when it went, and whether its member was still in etcd then (let go after the
// hold, or for a cancelled leave).
func (r *run) followNodesLocked(nodes []corev1.Node, now time.Time) {
	present := map[types.UID]*corev1.Node{}
	for k := range nodes {
		present[nodes[k].UID] = &nodes[k]
	}
	for _, l := range r.leaves {
		if l.nodeUID == "" || !l.nodeGone.IsZero() {
			continue
		}
		node, ok := present[l.nodeUID]
		switch {
		case ok && node.DeletionTimestamp != nil && l.nodeDeleted.IsZero():
			l.nodeDeleted = node.DeletionTimestamp.Time
		case !ok && !l.uncertain:
			l.nodeGone = now
			how := "member left"
			switch {
			case l.cancelled:
				how = "leave cancelled"
			case r.list.has(l.id):
				how = "hold ran out"
			}
			r.c.nodeReleases[how]++
			if !l.nodeDeleted.IsZero() {
				r.c.terminating = append(r.c.terminating, now.Sub(l.nodeDeleted))
			}
		}
	}
}

// checkNodeRequest checks a leave the node controller wrote for a Node the harness deleted: it
// names that Node (by UID), not a Node of the same name registered since.
func (r *run) checkNodeRequest(l *leaveRec, obj *v1alpha1.EtcdMember) {
	why := obj.Annotations[v1alpha1.AnnotationLeaveReason]
	if l.nodeUID == "" || !obj.Spec.Leave || !isNodeReason(why) {
		return
	}
	if !strings.Contains(why, "(uid "+string(l.nodeUID)+")") || obj.Spec.MemberID != l.idHex {
		r.violateLocked("node request "+l.idHex, "%s: the request for the deletion of Node %s (uid %s) reads %q and names member %s, want that Node and member %s",
			obj.Name, l.name, l.nodeUID, why, obj.Spec.MemberID, l.idHex)
	}
}

// renewNode registers member i's Node again before its node re-joins, so that the new member is
// bound and held: once the Node deleted for the old member is gone (skipped while it is still
// Terminating). A Node that is there and not deleting is left as it is.
func (r *run) renewNode(i int) (string, error) {
	name := r.w.members[i].Name
	var node *corev1.Node
	err := framework.Poll(2*callTimeout, pollEvery, retried(func(ctx context.Context) error {
		var err error
		node, err = r.w.node(ctx, name)
		return err
	}))
	switch {
	case err != nil:
		return "", skip("reading Node %s: %v", name, err)
	case node != nil && node.DeletionTimestamp != nil:
		return "", skip("its Node is still Terminating: %s", framework.NodeString(node))
	case node != nil:
		return "", nil
	}
	r.w.api.RegisterNode(r.t, name)
	return ", Node registered again", nil
}

// resolveNodeDeletions settles each deletion of the scenario whose answer was lost: a Node still
// there and not deleting was never deleted, so nothing was asked.
func (r *run) resolveNodeDeletions() {
	r.t.Helper()
	r.mu.Lock()
	leaves := slices.Clone(r.leaves)
	r.mu.Unlock()
	for _, l := range leaves {
		if l.nodeUID == "" || !l.uncertain {
			continue
		}
		var node *corev1.Node
		err := framework.Poll(settleBound, pollEvery, retried(func(ctx context.Context) error {
			var err error
			node, err = r.w.node(ctx, l.name)
			return err
		}))
		if err != nil {
			r.violate("resolve "+l.name, "reading Node %s to learn whether its deletion landed: %v", l.name, err)
			continue
		}
		r.mu.Lock()
		if node != nil && node.UID == l.nodeUID && node.DeletionTimestamp == nil {
			l.outcome = outcomeNotSent
			r.c.outcomes[outcomeNotSent]++
			r.pending &^= 1 << l.member
			r.logf("  the deletion of Node %s never landed", l.name)
		}
		l.uncertain = false
		r.mu.Unlock()
	}
}

// restoreNodes brings every member's Node back for the baseline: a Node deleted this scenario is
// registered again once it is gone (the members removed for it re-joined already, through
// renewNode; these are the members that stayed: their leave was cancelled, or refused as last
// voter).
func (r *run) restoreNodes() {
	r.t.Helper()
	for _, m := range r.w.members {
		registered := false
		err := framework.Poll(settleBound, pollEvery, retried(func(ctx context.Context) error {
			node, err := r.w.node(ctx, m.Name)
			switch {
			case err != nil:
				return err
			case node == nil:
				r.w.api.RegisterNode(r.t, m.Name)
				registered = true
				return nil
			case node.DeletionTimestamp != nil:
				return fmt.Errorf("still Terminating: %s", framework.NodeString(node))
			}
			return nil
		}))
		if err != nil {
			r.violate("restore Node "+m.Name, "Node %s to restore the baseline: %v", m.Name, err)
			continue
		}
		if registered {
			r.logf("  registered Node %s again", m.Name)
		}
	}
}

// TestIsNodeReason: the node controller's reasons are told from the policy's.
func TestIsNodeReason(t *testing.T) {
	if !isNodeReason("Node node-2 (uid 0b0c) deleted at 2026-12-01T12:00:00Z, --leave-on-node-delete") {
		t.Errorf("the node controller's reason not recognised")
	}
	if isNodeReason("unhealthy since 2026-12-01T12:00:00Z and unreachable for longer than --remove-unreachable-after 4s") {
		t.Errorf("the policy's reason taken for a Node's")
	}
}
