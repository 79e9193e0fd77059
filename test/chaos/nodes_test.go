package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"

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

// termStart bounds how long a new term takes from winning the Lease to acting on a Node: a fresh
// manager and its caches, the sweep for the finalizer, the Node's own watch and one patch. The
// bench measured about 0.3 s for a new leader to reconcile every object; this is ten times that,
// for a 2-core machine running every process of the test bed.
const termStart = 3 * time.Second

// nodeArgs turn the Node lifecycle on for every agent of a run; each agent also gets its own
// --node-name (newWorld).
var nodeArgs = []string{"--leave-on-node-delete", "--node-delete-hold=" + nodeHold.String()}

// agentDuration is the value of a duration flag the agents run with: the last of the tests'
// timings (framework.TestAgentArgs) and the run's args that sets it, or def.
func agentDuration(args []string, name string, def time.Duration) (time.Duration, error) {
	value, set := "", false
	for _, a := range append(slices.Clone(framework.TestAgentArgs), args...) {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			value, set = v, true
		}
	}
	if !set {
		return def, nil
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("--%s=%s: %w", name, value, err)
	}
	return d, nil
}

// nodeTimings returns the hold the agents run with and the slack of the Terminating invariant:
// how long after its hold ran out (or after the last disruption, see run.disruptLocked) a deleted
// Node may still be there. The slack covers the longest change of leading agent the runs make,
// the leader killed just before the hold runs out and every other agent's own member asked to
// leave (so each holds off, holdoff.go):
//
//   - a retry period until the others read the Lease's last renewal;
//   - two lease durations: the Lease unrenewed for one, then free for another before an agent
//     whose own member has a pending leave campaigns;
//   - a retry period until its next read shows that;
//   - a lease duration again: the new term's elector (client-go) trusts no clock but its own, and
//     waits that long from its first read of a Lease the killed agent never released;
//   - a retry period with client-go's jitter until its next attempt;
//   - termStart.
//
// With the tests' timings (lease 4 s, retry 0.5 s) that is 17.1 s. An agent that does not hold
// off is leading after a lease duration and two jittered retry periods (6.2 s), inside it.
func nodeTimings(args []string) (hold, slack time.Duration, err error) {
	hold, err1 := agentDuration(args, "node-delete-hold", 0)
	lease, err2 := agentDuration(args, "leader-elect-lease-duration", 0)
	retry, err3 := agentDuration(args, "leader-elect-retry-period", 0)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, err
	}
	if hold == 0 || lease == 0 || retry == 0 {
		return 0, 0, fmt.Errorf("the agents' args set no --node-delete-hold, lease duration or retry period: %v", args)
	}
	jittered := time.Duration(float64(retry) * (1 + leaderelection.JitterFactor))
	return hold, retry + 2*lease + retry + lease + jittered + termStart, nil
}

// nodeDeadline is when a Node deleted at deleted must be gone at the latest: slack after the
// later of its hold's end and the last disruption.
func nodeDeadline(deleted time.Time, hold time.Duration, disrupted time.Time, slack time.Duration) time.Time {
	end := deleted.Add(hold)
	if disrupted.After(end) {
		end = disrupted
	}
	return end.Add(slack)
}

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

// nodeDisruption tells what, at this moment, keeps the leading agent from letting a deleted Node
// go in time, or "": kube-apiserver down; an etcd member frozen or a network fault in place (the
// apiserver's requests that land on a frozen or cut-off member, a Lease renewal among them, wait
// out a timeout); or no agent that may lead (up, its member up, listed and registered). mayLead is
// leadableAgent's answer, taken before the lock.
func (r *run) nodeDisruptionLocked(mayLead bool) string {
	switch {
	case r.apiDown:
		return "kube-apiserver down"
	case r.netInPlace:
		return "a network fault in place"
	case !mayLead:
		return "no agent may lead"
	}
	for i, f := range r.member {
		if f == paused {
			return "etcd " + nodeName(i) + " frozen"
		}
	}
	return ""
}

// leadableAgent tells whether some agent may lead: the injector left it and its member up, etcd
// lists its member, and it has registered it (/readyz), which an agent needs before it campaigns.
func (r *run) leadableAgent() bool {
	r.mu.Lock()
	var candidates []int
	for i, m := range r.w.members {
		if r.agent[i] == up && r.member[i] == up && r.list.has(m.ID()) {
			candidates = append(candidates, i)
		}
	}
	r.mu.Unlock()
	return slices.ContainsFunc(candidates, func(i int) bool {
		return r.w.agents[i].Running() && r.w.members[i].Running() && r.w.agentReady(i)
	})
}

// disruptLocked records that something happened that may end or stall the leading agent's term:
// the Terminating invariant gives a deleted Node slack after it, the health invariant a member
// that is down (checkHealthLocked).
func (r *run) disruptLocked(what string) {
	r.disruptedAt, r.disruption = time.Now(), what
	r.termDisruptedAt, r.termDisruption = r.disruptedAt, what
}

// checkNodesLocked checks, on a list of the Nodes that started at read, that no Node has been
// Terminating for longer than its hold and the slack (nodeDeadline), and follows the Nodes the
// scenario deleted: when each started Terminating and when it went, and why (its member left,
// its leave was cancelled, or the hold ran out).
func (r *run) checkNodesLocked(nodes []corev1.Node, read, now time.Time) {
	present := map[types.UID]*corev1.Node{}
	for k := range nodes {
		node := &nodes[k]
		present[node.UID] = node
		if node.DeletionTimestamp == nil {
			continue
		}
		deadline := nodeDeadline(node.DeletionTimestamp.Time, r.hold, r.disruptedAt, r.slack)
		if read.After(deadline) {
			since := "none this run"
			if !r.disruptedAt.IsZero() {
				since = fmt.Sprintf("%s at %s", r.disruption, r.disruptedAt.Sub(r.start).Truncate(100*time.Millisecond))
			}
			asked := "a deletion the harness did not register"
			if k := slices.IndexFunc(r.leaves, func(l *leaveRec) bool { return l.nodeUID == node.UID }); k >= 0 {
				asked = r.leaves[k].String()
			}
			r.violateLocked("terminating "+string(node.UID), "Node %s (uid %s) has been Terminating since %s, longer than --node-delete-hold %s and the slack %s after the later of the hold's end and the last disruption (%s); finalizers %v; %s",
				node.Name, node.UID, node.DeletionTimestamp.UTC().Format(time.RFC3339), r.hold, r.slack, since, node.Finalizers, asked)
		}
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
			// The member lists the monitors read lag behind by a sample each, so the hold is told
			// by how long the Node was there: it is let go for its member's leaving or cancel as
			// soon as the leader sees that, and only then for the hold.
			took := now.Sub(l.issued)
			if !l.nodeDeleted.IsZero() {
				took = now.Sub(l.nodeDeleted)
				r.c.terminating = append(r.c.terminating, took)
			}
			how := "member left"
			switch {
			case l.cancelled:
				how = "leave cancelled"
			case took >= r.hold:
				how = "hold ran out"
			}
			r.c.nodeReleases[how]++
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
// there and not deleting lostWriteLands after every fault was healed was never deleted, so nothing
// was asked. A deletion held up by a frozen member lands only once the member is resumed; judged
// at once, it would count as never sent while the node controller still acts on it.
func (r *run) resolveNodeDeletions() {
	r.t.Helper()
	r.mu.Lock()
	leaves, lostSettle := slices.Clone(r.leaves), r.healedAt.Add(lostWriteLands)
	r.mu.Unlock()
	for _, l := range leaves {
		if l.nodeUID == "" || !l.uncertain {
			continue
		}
		landed := false
		err := r.await(settleBound, func(ctx context.Context) error {
			read := time.Now()
			node, err := r.w.node(ctx, l.name)
			if err != nil {
				return err
			}
			var decided bool
			if landed, decided = deletionLanded(node, l.nodeUID, read, lostSettle); !decided {
				return fmt.Errorf("Node %s is not deleting, and its deletion may still land until %s", l.name, lostSettle.Sub(r.start).Truncate(100*time.Millisecond))
			}
			return nil
		})
		if err != nil {
			r.violate("resolve "+l.name, "reading Node %s to learn whether its deletion landed: %v", l.name, err)
			continue
		}
		r.mu.Lock()
		if !landed {
			l.outcome = outcomeNotSent
			r.c.outcomes[outcomeNotSent]++
			r.pending &^= 1 << l.member
			r.logf("  the deletion of Node %s never landed", l.name)
		}
		l.uncertain = false
		r.mu.Unlock()
	}
}

// deletionLanded judges a deletion of the Node with uid whose answer was lost, from a read of the
// Node (nil: not found) that started at read: decided is false while the deletion may still land,
// before lostSettle.
func deletionLanded(node *corev1.Node, uid types.UID, read, lostSettle time.Time) (landed, decided bool) {
	switch {
	case node == nil || node.UID != uid || node.DeletionTimestamp != nil:
		return true, true
	case read.Before(lostSettle):
		return false, false
	}
	return false, true
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

// TestNodeTimings pins the slack down for the tests' timings, and shows that CHAOS_AGENT_ARGS
// move it.
func TestNodeTimings(t *testing.T) {
	hold, slack, err := nodeTimings(nodeArgs)
	if err != nil {
		t.Fatal(err)
	}
	if hold != nodeHold || slack != 17100*time.Millisecond {
		t.Errorf("hold %s, slack %s; want %s and 17.1s", hold, slack, nodeHold)
	}
	hold, slack, err = nodeTimings(append(slices.Clone(nodeArgs), "--leader-elect-lease-duration=5s", "--leader-elect-retry-period=1s", "--node-delete-hold=1m"))
	if err != nil {
		t.Fatal(err)
	}
	if hold != time.Minute || slack != 22200*time.Millisecond {
		t.Errorf("production lease timings: hold %s, slack %s; want 1m and 22.2s", hold, slack)
	}
	if _, _, err := nodeTimings(nil); err == nil {
		t.Errorf("no --node-delete-hold: no error")
	}
}

// TestNodeDeadline: the slack counts from the hold's end, or from a later disruption.
func TestNodeDeadline(t *testing.T) {
	deleted := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if got, want := nodeDeadline(deleted, nodeHold, time.Time{}, 10*time.Second), deleted.Add(nodeHold+10*time.Second); !got.Equal(want) {
		t.Errorf("no disruption: %s, want %s", got, want)
	}
	if got, want := nodeDeadline(deleted, nodeHold, deleted.Add(time.Second), 10*time.Second), deleted.Add(nodeHold+10*time.Second); !got.Equal(want) {
		t.Errorf("a disruption within the hold: %s, want %s", got, want)
	}
	if got, want := nodeDeadline(deleted, nodeHold, deleted.Add(time.Minute), 10*time.Second), deleted.Add(time.Minute+10*time.Second); !got.Equal(want) {
		t.Errorf("a disruption after the hold: %s, want %s", got, want)
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
