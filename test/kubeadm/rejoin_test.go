package kubeadm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/members"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

// rejoin joins node-3 again with `kubeadm join --control-plane`, under its name and at its
// address, on the machine kubeadm reset cleaned (rejoinNode).
func (w *workflow) rejoin() { w.rejoinNode(w.nodes[2]) }

// rejoinNode joins n again: kubeadm adds a new member, and n's object, which recorded the one
// before, is re-admitted with the new ID and one more Rejoined Event. As in grow, the new learner
// is promoted at most once by the leader, nothing is evicted, no member-<id> object is left, and
// all three end healthy.
func (w *workflow) rejoinNode(n *tier.Node) {
	w.t.Helper()
	before := w.member(n.Name, "recorded", func(*v1alpha1.EtcdMember) bool { return true }).Status.MemberID
	rejoined := len(w.events(n.Name, v1alpha1.ReasonRejoined))
	promoted, evicted := len(w.events(n.Name, v1alpha1.ReasonPromoted)), len(w.events(n.Name, v1alpha1.ReasonEvicted))
	start := time.Now()
	w.cluster.Join(w.t, n)
	w.t.Logf("kubeadm join --control-plane on %s again: %s", n.Name, time.Since(start).Round(100*time.Millisecond))
	w.agentPodsRolledOut()
	w.registered(n)
	if now := w.member(n.Name, "registered", func(*v1alpha1.EtcdMember) bool { return true }).Status.MemberID; now == before {
		w.t.Errorf("%s's object still records member %s after the new join", n.Name, before)
	}
	if got := w.eventCount(n.Name, v1alpha1.ReasonRejoined, rejoined+1); got != rejoined+1 {
		w.t.Errorf("%d Rejoined Events about %s after its new join, want %d", got, n.Name, rejoined+1)
	}
	if ev := w.events(n.Name, v1alpha1.ReasonPromoted); len(ev) > promoted+1 {
		w.t.Errorf("%s promoted more than once in its new join (kubeadm promotes it too): %v", n.Name, ev[promoted:])
	}
	if ev := w.events(n.Name, v1alpha1.ReasonEvicted); len(ev) > evicted {
		w.t.Errorf("%s evicted during its new join: %v", n.Name, ev[evicted:])
	}
	w.onlyNodeObjects()
	w.othersHealthy(n)
}

// resetFirst runs `kubeadm reset -f` on node-3, drained, without a leave: kubeadm removes the
// node's member itself. node-3's object says so (Joined=False/NotFound, one NotFound Event) and
// `kubectl etcdmember list` explains it; nothing else is removed; deleting the Node afterwards goes
// at once, although the leader held it under --leave-on-node-delete.
func (w *workflow) resetFirst() {
	gone := w.nodes[2]
	w.nodeHeld(gone.Name)
	notFound := len(w.events(gone.Name, v1alpha1.ReasonNotFound))
	w.admin.MustKubectl(w.t, "drain", gone.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
	if out, err := w.reset(gone); err != nil {
		w.t.Fatalf("%v\n%s", err, out)
	}
	w.member(gone.Name, "Joined=False/NotFound", func(m *v1alpha1.EtcdMember) bool {
		c := status.Get(m, v1alpha1.ConditionJoined)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonNotFound
	})
	if got := w.eventCount(gone.Name, v1alpha1.ReasonNotFound, notFound+1); got != notFound+1 {
		w.t.Errorf("%d NotFound Events about %s after kubeadm reset, want %d", got, gone.Name, notFound+1)
	}
	var names []string
	for name := range w.etcdMembers() {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{w.nodes[0].Name, w.nodes[1].Name}; !slices.Equal(names, want) {
		w.t.Errorf("etcd's members after kubeadm reset on %s: %v, want %v", gone.Name, names, want)
	}
	run := w.admin.Plugin(w.t, nil, nil, "list")
	if line := lineOf(run.Stdout, gone.Name); run.Code != 0 || !strings.Contains(line, members.NoteRemovedElsewhere) {
		w.t.Errorf("kubectl etcdmember list (exit %d) does not say %s's member was %q:\n%s", run.Code, gone.Name,
			members.NoteRemovedElsewhere, run.Output())
	}
	start := time.Now()
	w.admin.MustKubectl(w.t, "delete", "node", gone.Name, "--timeout=1m")
	took := time.Since(start)
	w.t.Logf("kubectl delete node %s after kubeadm reset returned after %s", gone.Name, took.Round(100*time.Millisecond))
	// The leader let the Node go when it recorded its member NotFound: nothing holds the deletion.
	if took > nodeDeleteAtOnce {
		w.t.Errorf("kubectl delete node %s took %s, its member being gone already; want within %s", gone.Name, took, nodeDeleteAtOnce)
	}
	w.othersHealthy(gone)
}

// reset removes n's machine from the cluster as docs/runbooks.md says, `systemctl stop kubelet`
// then `kubeadm reset -f`, and returns kubeadm's output and error. The kubelet stops first because
// kubeadm reset empties /var/lib/etcd as soon as the member is out of etcd, and stops the kubelet
// only in a later phase: meanwhile a running kubelet restarts the etcd container that has just
// exited, and that etcd writes the directory again. The next `kubeadm join` then fails its
// preflight with "/var/lib/etcd is not empty" (seen once here: the kubelet restarted etcd 60 ms
// before kubeadm emptied the directory, and etcd wrote it again 30 ms after).
func (w *workflow) reset(n *tier.Node) (string, error) {
	w.t.Helper()
	n.StopKubelet(w.t)
	out, err := n.Kubeadm(w.t, "reset", "-f")
	// What the next join requires: no container, and an empty /var/lib/etcd.
	framework.Eventually(w.t, 10*time.Second, pollEvery, "no container on "+n.Name+" after kubeadm reset", func(context.Context) (bool, error) {
		if ids := n.Containers(w.t); len(ids) > 0 {
			return false, fmt.Errorf("containers %v", ids)
		}
		return true, nil
	})
	entries, readErr := os.ReadDir(n.HostPath(w.t, "/var/lib/etcd"))
	if readErr != nil {
		w.t.Fatalf("node %s: %v", n.Name, readErr)
	}
	if len(entries) > 0 {
		w.t.Errorf("/var/lib/etcd on %s holds %d entries after kubeadm reset (%s first), want none", n.Name, len(entries), entries[0].Name())
	}
	return out, err
}

// nodeDeleteAtOnce bounds the deletion of a Node whose member is already gone: one reconcile of
// the leader's, and kubectl's own polling of the deletion (every second or so).
const nodeDeleteAtOnce = 10 * time.Second

// othersHealthy waits until every node but n has its object Joined=True and Healthy=True.
func (w *workflow) othersHealthy(n *tier.Node) {
	w.t.Helper()
	for _, o := range w.nodes {
		if o == n {
			continue
		}
		w.member(o.Name, "Joined and Healthy", func(m *v1alpha1.EtcdMember) bool {
			return status.IsTrue(m, v1alpha1.ConditionJoined) && status.IsTrue(m, v1alpha1.ConditionHealthy)
		})
	}
}

// lineOf is the first line of out whose first field is name.
func lineOf(out, name string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return line
		}
	}
	return fmt.Sprintf("(no line for %s)", name)
}
