package kubeadm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/controller"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

// healthyAfterServing is how soon after its etcd serves again an object must say Healthy=True:
// two of the leader's probes, as the DaemonSet runs it (the default --probe-interval).
const healthyAfterServing = 2 * controller.DefaultProbeInterval

// etcdUpgrade moves every node's etcd from the minor kubeadm init deployed (3.6) to the one
// kubeadm v1.37 deploys (3.7), one node at a time, as an operator upgrades etcd with kubeadm: the
// new tag in the ClusterConfiguration, then on each node `kubeadm upgrade node phase
// control-plane`, which checks etcd's health, backs its data up, writes the new static pod
// manifest in place of the old one and waits for etcd to be available again.
//
// node-2's upgrade runs while a leave of node-3 is pending: asked once node-2's etcd has stopped,
// when removing node-3 would leave one healthy voter of two. node-3's member must not go while
// node-2's etcd is down (the leader says so with a QuorumAtRisk Event); it goes after, and no
// other member does. The leave goes through node-1's apiserver, which kubeadm's admin.conf names:
// node-2's own serves nothing while its etcd, the only one it stores in, is down. node-3, reset,
// then joins again on the new minor. node-3's and node-1's upgrades run with no leave pending.
//
// During each upgrade the node's object turns Healthy=False when its etcd is down for longer than
// two probe intervals (38 to 40 s in the runs so far); after it, the object is Healthy=True within
// two probe intervals of its etcd serving the new version, and no agent restarts (WatchAgentPods).
func (w *workflow) etcdUpgrade() {
	from, to := w.cluster.EtcdImageTag, w.nodes[0].EtcdImageTags[len(w.nodes[0].EtcdImageTags)-1]
	if from == to {
		w.t.Fatalf("kubeadm init deployed etcd %s, the newest image the tier holds: nothing to upgrade to", from)
	}
	w.etcdVersionsAre(minorOf(from))
	before := w.etcdMembers()
	removedBefore := len(w.events(w.nodes[2].Name, v1alpha1.ReasonRemoved))
	heldBefore := len(w.events(w.nodes[2].Name, v1alpha1.ReasonQuorumAtRisk))

	// Certificates are not renewed here (kubeadm's default renews them): renewal is a scenario of
	// its own, and this one is about etcd's restart.
	w.cluster.SetEtcdImageTag(w.t, to)
	node1, node2, node3 := w.nodes[0], w.nodes[1], w.nodes[2]
	w.upgradeEtcd(node3, to, nil)
	w.upgradeEtcd(node2, to, node3)
	w.member(node3.Name, "Left=True/Removed", removed)
	if n := w.eventCount(node3.Name, v1alpha1.ReasonRemoved, removedBefore+1); n != removedBefore+1 {
		w.t.Errorf("%d Removed Events about %s, want %d", n, node3.Name, removedBefore+1)
	}
	// The leave was asked while node-2's etcd was down, for far longer than a probe interval: the
	// leader must have said why it waited.
	if ev := w.events(node3.Name, v1alpha1.ReasonQuorumAtRisk); len(ev) > heldBefore {
		w.t.Logf("the leader held %s's leave while %s's etcd restarted: %v", node3.Name, node2.Name, ev[heldBefore:])
	} else {
		w.t.Errorf("no %s Event about %s, whose leave was asked while %s's etcd was down", v1alpha1.ReasonQuorumAtRisk, node3.Name, node2.Name)
	}
	after := w.etcdMembers()
	for _, n := range []*tier.Node{node1, node2} {
		if after[n.Name] != before[n.Name] {
			w.t.Errorf("%s's member changed during the upgrade: %+v, before %+v", n.Name, after[n.Name], before[n.Name])
		}
	}
	if _, ok := after[node3.Name]; ok || len(after) != 2 {
		w.t.Errorf("etcd's members after %s's leave: %v, want %s and %s only", node3.Name, after, node1.Name, node2.Name)
	}

	if out, err := w.reset(node3); err != nil {
		w.t.Fatalf("%v\n%s", err, out)
	}
	if ev := w.events(node3.Name, v1alpha1.ReasonNotFound); len(ev) > 0 {
		w.t.Errorf("NotFound Events about %s, which left before kubeadm reset: %v", node3.Name, ev)
	}
	w.admin.MustKubectl(w.t, "delete", "node", node3.Name, "--timeout=1m")
	w.rejoinNode(node3)

	w.upgradeEtcd(node1, to, nil)
	w.etcdVersionsAre(minorOf(to))
	w.othersHealthy(nil)
}

// upgradeEtcd runs kubeadm's upgrade of n's etcd to tag, and returns once kubeadm has exited 0,
// n's etcd serves that version, and n's object said Healthy=True within healthyAfterServing of it.
// With pending, it asks pending's member to leave as soon as n's etcd has stopped, and fails if
// that member is removed while n's etcd is still down.
func (w *workflow) upgradeEtcd(n *tier.Node, tag string, pending *tier.Node) {
	w.t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		out, err := n.Kubeadm(w.t, "upgrade", "node", "phase", "control-plane", "--certificate-renewal=false")
		done <- result{out, err}
	}()
	want := strings.TrimSuffix(tag, "-0")
	var (
		kubeadm        *result
		stopped        bool
		stoppedAt      time.Time
		served, health time.Time
		asked          bool
		witness        = w.witnessFor(n, pending)
		// n's objects are read through the witness's apiserver: n's own, which admin.conf names
		// for node-1, stores only in n's etcd and answers nothing while it restarts.
		objects   = w.admin.ObjectClientAt(w.t, "https://"+witness.IP+":6443", 0)
		unhealthy bool
	)
	deadline := time.Now().Add(kubeadmUpgradeTimeout)
	for kubeadm == nil || health.IsZero() {
		select {
		case r := <-done:
			kubeadm = &r
			if r.err != nil {
				w.t.Fatalf("kubeadm upgrade on %s: %v\n%s", n.Name, r.err, r.out)
			}
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s's etcd upgrade: kubeadm done %t, its etcd stopped %t, served %s at %v, object Healthy at %v; not done after %s",
				n.Name, kubeadm != nil, stopped, want, served, health, kubeadmUpgradeTimeout)
		}
		// pending's membership as the witness's member holds it, read before n's state: gone
		// there while n's etcd is still down means the removal was committed meanwhile.
		gone := asked && !w.listsMember(witness, pending.Name)
		version := w.etcdVersionAt(n)
		switch {
		case version == "" && served.IsZero():
			if !stopped {
				stopped, stoppedAt = true, time.Now()
			}
			if pending != nil && !asked {
				if run := w.admin.Plugin(w.t, nil, nil, "leave", pending.Name, "--wait=false"); run.Code != 0 {
					w.t.Fatalf("kubectl etcdmember leave %s --wait=false: exit %d\n%s", pending.Name, run.Code, run.Output())
				}
				asked = true
				w.t.Logf("asked %s to leave while %s's etcd is down", pending.Name, n.Name)
			}
			if gone {
				w.t.Fatalf("%s's member was removed while %s's etcd was down: one healthy voter of two", pending.Name, n.Name)
			}
		case version == want && served.IsZero():
			if !stopped {
				w.t.Logf("%s's etcd served %s before it was seen stopped", n.Name, want)
			}
			served = time.Now()
			down := "never seen down"
			if stopped {
				down = fmt.Sprintf("%s after it was seen down", served.Sub(stoppedAt).Round(100*time.Millisecond))
			}
			w.t.Logf("%s's etcd serves %s, %s after kubeadm started, %s", n.Name, want, served.Sub(start).Round(100*time.Millisecond), down)
		}
		if stopped && served.IsZero() && !unhealthy && healthy(objects, n.Name) == metav1.ConditionFalse {
			unhealthy = true
			w.t.Logf("%s's object Healthy=False while its etcd restarts", n.Name)
		}
		if !served.IsZero() && health.IsZero() {
			if got := healthy(objects, n.Name); got == metav1.ConditionTrue {
				health = time.Now()
				w.t.Logf("%s's object Healthy=True %s after its etcd served", n.Name, health.Sub(served).Round(100*time.Millisecond))
			} else if time.Since(served) > healthyAfterServing {
				w.t.Fatalf("%s's object not Healthy=True %s after its etcd served %s: Healthy=%s, read through %s's apiserver",
					n.Name, healthyAfterServing, want, got, witness.Name)
			}
		}
	}
	// An outage of two probe intervals cannot pass unrecorded: Healthy=True after it would say
	// nothing.
	if outage := served.Sub(stoppedAt); stopped && !unhealthy && outage > healthyAfterServing {
		w.t.Errorf("%s's etcd was down for %s, and its object was never seen Healthy=False meanwhile", n.Name, outage.Round(100*time.Millisecond))
	}
	if pending != nil && !asked {
		w.t.Fatalf("%s's etcd was never seen stopped, so %s's leave was never asked", n.Name, pending.Name)
	}
	if !strings.Contains(kubeadm.out, "[upgrade/etcd]") {
		w.t.Errorf("kubeadm upgrade on %s said nothing of etcd:\n%s", n.Name, kubeadm.out)
	}
	w.t.Logf("kubeadm upgrade node phase control-plane on %s: %s", n.Name, time.Since(start).Round(100*time.Millisecond))
}

// kubeadmUpgradeTimeout bounds one node's upgrade: kubeadm waits up to 5 minutes for the new
// static pod (UpgradeManifests).
const kubeadmUpgradeTimeout = 6 * time.Minute

// witnessFor is the node that is neither n nor pending, from which pending's membership is read.
func (w *workflow) witnessFor(n, pending *tier.Node) *tier.Node {
	for _, o := range w.nodes {
		if o != n && o != pending {
			return o
		}
	}
	return nil
}

// etcdVersionAt is the version n's etcd serves, or "" when it does not answer within a second.
func (w *workflow) etcdVersionAt(n *tier.Node) string {
	w.t.Helper()
	out, err := w.cluster.EtcdctlAt(w.t, n, time.Second, "endpoint", "status", "-w", "json")
	if err != nil {
		return ""
	}
	versions, err := endpointVersions(out)
	if err != nil || len(versions) != 1 {
		return ""
	}
	for _, v := range versions {
		return v
	}
	return ""
}

// listsMember tells whether at's own copy of the membership (a serializable read, which needs no
// quorum) still has the member name; an unanswered read counts as listed.
func (w *workflow) listsMember(at *tier.Node, name string) bool {
	w.t.Helper()
	out, err := w.cluster.EtcdctlAt(w.t, at, time.Second, "member", "list", "--consistency=s", "-w", "json")
	if err != nil {
		return true
	}
	var list struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	if json.Unmarshal([]byte(out), &list) != nil {
		return true
	}
	for _, m := range list.Members {
		if m.Name == name {
			return true
		}
	}
	return false
}

// healthy is the status of the EtcdMember name's Healthy condition as objects reads it now;
// Unknown when it cannot be read or has none.
func healthy(objects client.Client, name string) metav1.ConditionStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var m v1alpha1.EtcdMember
	if err := objects.Get(ctx, client.ObjectKey{Name: name}, &m); err != nil {
		return metav1.ConditionUnknown
	}
	if c := status.Get(&m, v1alpha1.ConditionHealthy); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// minorOf is the "3.7." of an etcd image tag "3.7.3-0".
func minorOf(tag string) string {
	parts := strings.SplitN(tag, ".", 3)
	if len(parts) < 2 {
		return tag
	}
	return fmt.Sprintf("%s.%s.", parts[0], parts[1])
}
