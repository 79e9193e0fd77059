//go:build bench

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// nodeRounds is how many rounds the delete part runs; each round deletes the Node of another
// member and of the leading agent's own member, and has the plugin remove a member of each kind,
// so that every row has nodeRounds samples (p99 needs 10). A removal and its re-join cost about
// 12 s.
const nodeRounds = 10

// nodeRoundsEnv overrides nodeRounds, for trial runs of the part alone:
// BENCH_NODE_ROUNDS=3 go test -tags bench -run 'TestBench/nodes/delete' ./test/bench/
const nodeRoundsEnv = "BENCH_NODE_ROUNDS"

// nodeAgentArgs turn the Node lifecycle on at its default --node-delete-hold, and have the agents
// log their timestamps to the nanosecond, for the breakdown (the default is whole seconds).
var nodeAgentArgs = []string{"--leave-on-node-delete", "--zap-time-encoding=rfc3339nano"}

// commandTimeout is the --timeout of the timed commands: far above anything measured, it turns a
// hang into a failure long before --node-delete-hold would let a Node go.
const commandTimeout = "--timeout=1m"

// benchNodes measures the Node lifecycle: `kubectl delete node` against `kubectl etcdmember
// leave` (part delete), and what thousands of Nodes cost the leading agent (part many). Each part
// runs on test beds of its own, so `-run TestBench/nodes/delete` runs one alone.
func benchNodes(t *testing.T, r *results) {
	t.Run("delete", func(t *testing.T) { r.nodeDelete = benchNodeDelete(t, runsFromEnv(t, nodeRoundsEnv, nodeRounds)) })
	t.Run("many", func(t *testing.T) { r.manyNodes = benchManyNodes(t, runsFromEnv(t, manyNodesEnv, manyNodes)) })
}

// nodeCase is one kind of cycle: how the member goes, and whose member it is.
type nodeCase struct {
	// deleteNode: `kubectl delete node`; otherwise `kubectl etcdmember leave`.
	deleteNode bool
	// leaderNode: the leading agent's own member, which it hands over to remove; otherwise a
	// member that neither leads etcd nor runs the leading agent.
	leaderNode bool
}

func (c nodeCase) String() string {
	how, whose := "kubectl etcdmember leave", "another node"
	if c.deleteNode {
		how = "kubectl delete node"
	}
	if c.leaderNode {
		whose = "the leading agent's node"
	}
	return how + ", " + whose
}

// nodeSample is one timed removal; every instant is on this machine's clock, the audit log's
// included (the apiserver runs here too).
type nodeSample struct {
	nodeCase
	// started and exited bracket the kubectl process; gone is the first member list without the
	// member (1 ms poll through a member that stays).
	started, exited, gone time.Time
	// request is the timed command's own write as the apiserver received it and answered it
	// (audit log, µs): the DELETE of the Node, or the plugin's spec.leave patch.
	request, requestDone time.Time
	// deletionTimestamp is the Node's, as the apiserver recorded it (whole seconds) and a watch
	// opened before the command saw it.
	deletionTimestamp time.Time
	// asked is the leader's spec.leave request received by the apiserver, released its removal of
	// the finalizer (audit log); for a Node's deletion only.
	asked, released time.Time
	// handOver is when the leading agent logged that it steps down to have its own member
	// removed, and newLeader when the next leader logged that it leads (agents' logs); for the
	// leading agent's node only.
	handOver, newLeader time.Time
	// removed is the leader's log line of the removal, written once MemberRemove answered, and
	// removeStart the start of its reconcile, stepsMs["removed"] before.
	removeStart, removed time.Time
}

func benchNodeDelete(t *testing.T, rounds int) []nodeSample {
	e := newEnvWith(t, envOptions{size: 3, audit: true, nodes: true}, nodeAgentArgs...)
	for _, m := range e.cluster.Members() {
		e.waitNodeHeld(m.Name)
	}
	// kubectl caches discovery under $HOME/.kube/cache per apiserver; filling it here keeps the
	// first delete from paying for what no later one does.
	for _, args := range [][]string{{"get", "nodes"}, {"etcdmember", "list"}} {
		if run := e.api.KubectlWithPlugin(t, nil, nil, args...); run.Code != 0 {
			t.Fatalf("warm-up: %s", run.Output())
		}
	}
	// Each kind is compared with the other way of removing the same kind of member, and every
	// cycle of the leading agent's node leaves a new leader behind; swapping each pair in odd
	// rounds puts either way as often right after such a cycle.
	var out []nodeSample
	for i := range rounds {
		cases := []nodeCase{{true, false}, {false, false}, {true, true}, {false, true}}
		if i%2 == 1 {
			cases = []nodeCase{{false, false}, {true, false}, {false, true}, {true, true}}
		}
		for _, c := range cases {
			s := e.nodeCycle(c)
			t.Logf("round %d/%d, %s: took %s, gone %s after the start%s", i+1, rounds, c,
				s.exited.Sub(s.started).Round(time.Microsecond), s.gone.Sub(s.started).Round(time.Microsecond), s.deleteDetail())
			out = append(out, s)
		}
	}
	// The breakdown of a missed goal reads the agents' logs beyond what the samples keep.
	if slices.ContainsFunc(out, func(s nodeSample) bool { return s.deleteNode && s.gone.Sub(s.request) > nodeGoneGoal }) {
		e.keepAgentLogs("nodes")
	}
	return out
}

// deleteDetail is the log's note on a Node's deletion, and the cycle's breakdown (nodeSteps).
func (s nodeSample) deleteDetail() string {
	var b strings.Builder
	if s.deleteNode {
		fmt.Fprintf(&b, "; DELETE received → gone %s, deletionTimestamp %s → gone %s",
			s.gone.Sub(s.request).Round(time.Microsecond), s.deletionTimestamp.UTC().Format(time.TimeOnly), s.gone.Sub(s.deletionTimestamp).Round(time.Microsecond))
	}
	for _, step := range nodeSteps {
		if step.applies(s.nodeCase) {
			fmt.Fprintf(&b, "\n\t%s: %s ms", step.what, num(millis(s.instant(step.end).Sub(s.instant(step.start)))))
		}
	}
	return b.String()
}

// nodeCycle removes one member as c says, times it, and brings it back: the Node registered
// again, the member re-joined and its Node held again.
func (e *env) nodeCycle(c nodeCase) nodeSample {
	e.t.Helper()
	target, stay := e.pickNodeTarget(c.leaderNode)
	e.waitRemovable()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	name, id, idHex := target.Name, target.ID(), target.IDHex()
	gone := goneAt(ctx, e.etcd[stay.Name], id)
	var deleting <-chan sighting[*corev1.Node]
	args := []string{"etcdmember", "leave", name, commandTimeout}
	if c.deleteNode {
		deleting = watchUntil(ctx, e.t, e.client, &corev1.NodeList{}, func(n *corev1.Node) bool { return n.DeletionTimestamp != nil },
			client.MatchingFields{"metadata.name": name})
		args = []string{"delete", "node", name, commandTimeout}
	}

	s := nodeSample{nodeCase: c, started: time.Now()}
	run := e.api.KubectlWithPlugin(e.t, nil, nil, args...)
	s.exited = s.started.Add(run.Took)
	if run.Code != 0 {
		e.t.Fatalf("%s: %s", c, run.Output())
	}
	s.gone = await(ctx, e.t, gone, name+" gone from etcd")
	if c.deleteNode {
		s.deletionTimestamp = await(ctx, e.t, deleting, "Node "+name+" deleting").obj.DeletionTimestamp.Time
		if node := e.api.Node(e.t, name); node != nil {
			e.t.Fatalf("kubectl delete node %s returned, but %s", name, framework.NodeString(node))
		}
	}
	e.auditCycle(&s, name)
	e.logCycle(&s, idHex)

	if c.deleteNode {
		e.api.RegisterNode(e.t, name)
	}
	e.rejoin(target)
	e.waitNodeHeld(name)
	return s
}

// pickNodeTarget returns the member to remove and one that stays, through which etcd's member list
// is polled. The leading agent's own member is moved off etcd's leadership first, untimed, so
// that its removal, like every other here, needs no MoveLeader.
func (e *env) pickNodeTarget(leaderNode bool) (target, stay *framework.Member) {
	e.t.Helper()
	if !leaderNode {
		return e.pickTarget()
	}
	target = e.cluster.Member(e.leaderAgent())
	for _, m := range e.cluster.Members() {
		if m != target {
			stay = m
			break
		}
	}
	if e.cluster.Leader(e.t) == target {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if _, err := e.etcd[target.Name].MoveLeader(ctx, stay.ID()); err != nil {
			e.t.Fatalf("moving etcd leadership from %s to %s: %v", target.Name, stay.Name, err)
		}
		if now := e.cluster.Leader(e.t); now == target {
			e.t.Fatalf("etcd leadership stayed with %s", target.Name)
		}
	}
	return target, stay
}

// auditCycle fills in what the apiserver's audit log says of the cycle's writes.
func (e *env) auditCycle(s *nodeSample, name string) {
	e.t.Helper()
	events := e.readAudit()
	is := func(user, resource, subresource string, verbs ...string) func(auditEvent) bool {
		return func(ev auditEvent) bool {
			return ev.User.Username == user && ev.ObjectRef.Resource == resource && ev.ObjectRef.Name == name &&
				ev.ObjectRef.Subresource == subresource && slices.Contains(verbs, ev.Verb) && ev.ResponseStatus.Code < 300
		}
	}
	find := func(what string, ok func(auditEvent) bool) auditEvent {
		ev, found := firstAudit(events, s.started, ok)
		if !found {
			e.t.Fatalf("%s: the audit log has no %s after %s", s.nodeCase, what, s.started.Format(time.RFC3339Nano))
		}
		return ev
	}
	if !s.deleteNode {
		req := find("spec.leave patch of "+name, is(adminUser, "etcdmembers", "", "patch"))
		s.request, s.requestDone = req.Received, req.Done
		return
	}
	req := find("DELETE of Node "+name, is(adminUser, "nodes", "", "delete"))
	s.request, s.requestDone = req.Received, req.Done
	s.asked = find("leave request for "+name, is(agentUser, "etcdmembers", "", "update", "patch")).Received
	s.released = find("finalizer removal from Node "+name, is(agentUser, "nodes", "", "patch")).Received
}

// logCycle fills in what the agents' logs say of the cycle: the removal, and for the leading
// agent's own member the hand-over.
func (e *env) logCycle(s *nodeSample, idHex string) {
	e.t.Helper()
	var handOver, became []logEntry
	for _, a := range e.agents {
		for _, l := range e.agentLog(a) {
			switch {
			case l.Msg == "Removed member from etcd" && l.MemberID == idHex && l.Steps != nil:
				s.removed = l.TS
				s.removeStart = l.TS.Add(-time.Duration(l.Steps["removed"] * float64(time.Millisecond)))
			case l.Msg == "Handing leadership over to remove own member" && l.MemberID == idHex:
				handOver = append(handOver, l)
			case l.Msg == "Became leader" && l.TS.After(s.started):
				became = append(became, l)
			}
		}
	}
	if s.removed.IsZero() {
		e.t.Fatalf("%s: no agent logged the removal of member %s with its steps", s.nodeCase, idHex)
	}
	if !s.leaderNode {
		return
	}
	if len(handOver) == 0 {
		e.t.Fatalf("%s: no agent logged handing over for member %s", s.nodeCase, idHex)
	}
	s.handOver = slices.MinFunc(handOver, func(a, b logEntry) int { return a.TS.Compare(b.TS) }).TS
	for _, l := range became {
		if l.TS.After(s.handOver) && (s.newLeader.IsZero() || l.TS.Before(s.newLeader)) {
			s.newLeader = l.TS
		}
	}
	if s.newLeader.IsZero() {
		e.t.Fatalf("%s: no agent logged leading after the hand-over at %s", s.nodeCase, s.handOver.Format(time.RFC3339Nano))
	}
}

// waitNodeHeld waits until the leader holds the Node with the finalizer.
func (e *env) waitNodeHeld(name string) {
	e.t.Helper()
	err := framework.Poll(settle, 50*time.Millisecond, func(context.Context) (bool, error) {
		node := e.api.Node(e.t, name)
		return node != nil && node.DeletionTimestamp == nil && slices.Contains(node.Finalizers, v1alpha1.FinalizerNode), nil
	})
	if err != nil {
		e.t.Fatalf("Node %s not held with %s within %s: %s", name, v1alpha1.FinalizerNode, settle, framework.NodeString(e.api.Node(e.t, name)))
	}
}

// logEntry is what the bench reads of one line of an agent's JSON log.
type logEntry struct {
	TS       time.Time          `json:"ts"`
	Msg      string             `json:"msg"`
	MemberID string             `json:"memberID"`
	Steps    map[string]float64 `json:"stepsMs"`
}

// agentLog reads every JSON line of the agent's log; the framework's header lines between runs
// are not JSON and are skipped.
func (e *env) agentLog(a *framework.Agent) []logEntry {
	e.t.Helper()
	data, err := os.ReadFile(a.LogFile())
	if err != nil {
		e.t.Fatalf("agent %s log: %v", a.Name, err)
	}
	var out []logEntry
	for line := range bytes.Lines(data) {
		var l logEntry
		if json.Unmarshal(line, &l) == nil && l.Msg != "" {
			out = append(out, l)
		}
	}
	return out
}
