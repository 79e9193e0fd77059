package kubeadm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

// replaceDead replaces node-2, dead, as docs/runbooks.md "Replace a dead control-plane node"
// says: `kubectl etcdmember leave` removes its member while the two others stay healthy, the
// Node is deleted, and a machine rebuilt under the same name and address joins with `kubeadm
// join --control-plane`; its object is re-admitted.
func (w *workflow) replaceDead() {
	dead := w.nodes[1]
	dead.Die(w.t)
	run := w.admin.Plugin(w.t, nil, nil, "leave", dead.Name, "--timeout=2m")
	if run.Code != 0 {
		w.t.Fatalf("kubectl etcdmember leave %s, dead: %s", dead.Name, run.Output())
	}
	w.gone(dead, settle)
	w.rebuild(dead)
}

// unreachableRemoved is replaceDead with the unreachable policy instead of the leave: with
// --remove-unreachable-after and --min-voters=2 (the default floor of 3 holds a three-node control
// plane), the leader asks dead node-3's member to leave by itself once etcd's leader too hears
// nothing from it.
func (w *workflow) unreachableRemoved() {
	w.applyDaemonSet("--leave-on-node-delete", "--remove-unreachable-after="+unreachableAfter.String(), "--min-voters=2")
	dead := w.nodes[2]
	died := time.Now()
	dead.Die(w.t)
	// If node-3's agent led, the others take the Lease over first, then measure the unreachable
	// time themselves.
	w.gone(dead, unreachableAfter+2*settle)
	w.t.Logf("%s's member gone by the unreachable policy %s after its machine died (--remove-unreachable-after=%s)",
		dead.Name, time.Since(died).Round(100*time.Millisecond), unreachableAfter)
	if n := w.eventCount(dead.Name, v1alpha1.ReasonUnreachableMember, 1); n != 1 {
		w.t.Errorf("%d UnreachableMember Events about %s, want 1", n, dead.Name)
	}
	w.rebuild(dead)
}

// unreachableAfter is the tier's --remove-unreachable-after: above the agent's floor (two probe
// intervals, 10 s), short enough for a test.
const unreachableAfter = 20 * time.Second

// gone waits up to within for n's object to be Left=True/Removed, and its member out of etcd's
// member list; checks that the two others are healthy; and deletes n's Node as the runbook does
// before the machine is rebuilt.
func (w *workflow) gone(n *tier.Node, within time.Duration) {
	w.t.Helper()
	framework.WaitEtcdMember(w.t, w.client, within, pollEvery, n.Name, "Left=True/Removed", removed)
	framework.Eventually(w.t, settle, time.Second, n.Name+"'s member out of etcd's member list", func(context.Context) (bool, error) {
		if _, ok := w.etcdMembers()[n.Name]; ok {
			return false, fmt.Errorf("still listed")
		}
		return true, nil
	})
	w.othersHealthy(n)
	run := w.admin.Plugin(w.t, nil, nil, "list")
	if line := lineOf(run.Stdout, n.Name); run.Code != 0 || !slices.Contains(strings.Fields(line), v1alpha1.ReasonRemoved) {
		w.t.Errorf("kubectl etcdmember list (exit %d) does not say %s LEAVE %s:\n%s", run.Code, n.Name, v1alpha1.ReasonRemoved, run.Output())
	}
	w.admin.MustKubectl(w.t, "delete", "node", n.Name, "--timeout=1m")
}

// rebuild rebuilds n and joins it with kubeadm, under its name and address: the join succeeds,
// the object is re-admitted, and all three are healthy.
func (w *workflow) rebuild(n *tier.Node) {
	w.t.Helper()
	n.Rebuild(w.t)
	w.rejoinNode(n)
}
