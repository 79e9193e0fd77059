package kubeadm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// removeForGood removes node-3 as docs/runbooks.md "With kubectl delete node" says for kubeadm,
// the agents running with --leave-on-node-delete: drain it, `kubectl delete node`, then `kubeadm
// reset -f` on the machine. The delete returns with the member out of etcd and node-3's object
// Left=True/Removed; kubeadm reset, which removes its node's member itself, exits 0 although the
// member is gone, and changes nothing: one Removed Event more, no NotFound, the two others healthy.
func (w *workflow) removeForGood() {
	w.applyDaemonSet("--leave-on-node-delete")
	gone := w.nodes[2]
	removedBefore := len(w.events(gone.Name, v1alpha1.ReasonRemoved))
	// The runbook's check before the delete: the leader holds the Node only once an agent with the
	// option leads.
	w.nodeHeld(gone.Name)
	w.admin.MustKubectl(w.t, "drain", gone.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
	start := time.Now()
	w.admin.MustKubectl(w.t, "delete", "node", gone.Name, "--timeout=2m")
	w.t.Logf("kubectl delete node %s returned after %s", gone.Name, time.Since(start).Round(100*time.Millisecond))
	if _, ok := w.etcdMembers()[gone.Name]; ok {
		w.t.Errorf("kubectl delete node %s returned with its member still in etcd's member list", gone.Name)
	}
	w.member(gone.Name, "Left=True/Removed", removed)
	if out, err := w.reset(gone); err != nil {
		w.t.Errorf("kubeadm reset -f on %s, whose member is already gone: %v\n%s", gone.Name, err, out)
	}
	if n := w.eventCount(gone.Name, v1alpha1.ReasonRemoved, removedBefore+1); n != removedBefore+1 {
		w.t.Errorf("%d Removed Events about %s, want %d", n, gone.Name, removedBefore+1)
	}
	if ev := w.events(gone.Name, v1alpha1.ReasonNotFound); len(ev) > 0 {
		w.t.Errorf("NotFound Events about %s, which left before kubeadm reset: %v", gone.Name, ev)
	}
	if m := w.member(gone.Name, "recorded", func(*v1alpha1.EtcdMember) bool { return true }); !removed(m) {
		w.t.Errorf("%s's object after kubeadm reset: %+v, want Left=True/Removed still", gone.Name, m.Status.Conditions)
	}
	w.othersHealthy(gone)
}

// removed: the object records its member's leave, done by the leader.
func removed(m *v1alpha1.EtcdMember) bool {
	return status.IsTrue(m, v1alpha1.ConditionLeft) && status.HasReason(m, v1alpha1.ConditionLeft, v1alpha1.ReasonRemoved)
}

// eventCount waits for want Events about the EtcdMember name with reason (the leader writes each
// after the status the test waited for), then counts them once no more came for a few seconds.
func (w *workflow) eventCount(name, reason string, want int) int {
	w.t.Helper()
	n := 0
	// count records the Events seen and says whether more came since the last call.
	count := func(ctx context.Context) (bool, error) {
		list, err := framework.MemberEvents(ctx, w.client, name, reason)
		if err != nil {
			return false, err
		}
		more := len(list) > n
		n = max(n, len(list))
		return more, nil
	}
	framework.Eventually(w.t, settle, pollEvery, fmt.Sprintf("%d %s Events about %s", want, reason, name), func(ctx context.Context) (bool, error) {
		if _, err := count(ctx); err != nil {
			return false, err
		}
		return n >= want, nil
	})
	// Until a whole window passes with none more; a failed read is no Event.
	none := func(ctx context.Context) (bool, error) {
		more, _ := count(ctx)
		return !more, nil
	}
	for framework.Hold(3*time.Second, pollEvery, none) != nil {
		w.t.Logf("%d %s Events about %s so far", n, reason, name)
	}
	return n
}

// nodeHeld waits until the Node name carries the finalizer the leader holds a member's Node with
// under --leave-on-node-delete, read as docs/runbooks.md says to.
func (w *workflow) nodeHeld(name string) {
	w.t.Helper()
	framework.Eventually(w.t, settle, time.Second, "Node "+name+" held with "+v1alpha1.FinalizerNode, func(context.Context) (bool, error) {
		out, err := w.admin.Kubectl(w.t, "get", "node", name, "-o", "jsonpath={.metadata.finalizers}")
		if err != nil {
			return false, err
		}
		if !strings.Contains(out, v1alpha1.FinalizerNode) {
			return false, fmt.Errorf("finalizers %q", out)
		}
		return true, nil
	})
}
