package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestPodAgentsOnEveryNode: every member's node a kubelet of its own, node-2's and node-3's each in
// a network and mount namespace of their own with their own containerd, as kind gives each node a
// container. The DaemonSet runs an agent pod on each; the pods elect a leader among themselves, and
// the leader's own member leaves through the hand-over to another pod.
func TestPodAgentsOnEveryNode(t *testing.T) {
	nc := framework.StartNodeCluster(t, 3, "node-2", "node-3")
	tr := &tier{t: t, nc: nc, api: nc.API, cs: nc.API.Clientset(), client: nc.API.ObjectClient(t, 50)}
	var nodes []*framework.KubeletNode
	for _, m := range nc.Cluster.Members() {
		nodes = append(nodes, nc.StartKubeletNode(t, m))
	}
	tr.node = nodes[0]
	// node-2's and node-3's addresses live in their own namespaces: this one only routes to them.
	local, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range local {
		for _, n := range nodes[1:] {
			if strings.HasPrefix(a.String(), n.IP+"/") {
				t.Fatalf("%s's address %s is on an interface of the tier's own namespace", n.Name, n.IP)
			}
		}
	}
	tr.api.InstallEtcdmember(t)
	applied := tr.applyDaemonSet(tr.node.AgentImage)

	framework.Eventually(t, settle, pollEvery, "an agent pod Ready on every node", func(ctx context.Context) (bool, error) {
		pods, err := tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentLabel})
		if err != nil {
			return false, nil
		}
		ready := map[string]bool{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if podReady(p) && restarts(p) == 0 && p.Status.HostIP == nc.Cluster.Member(p.Spec.NodeName).IP() {
				ready[p.Spec.NodeName] = true
			}
		}
		return len(ready) == len(nodes), nil
	})
	t.Logf("apply to every agent pod Ready: %s", time.Since(applied).Round(100*time.Millisecond))
	byID := map[string]string{}
	for _, n := range nodes {
		m := tr.member(n.Name, "registered by its node's pod", func(m *v1alpha1.EtcdMember) bool {
			return status.IsTrue(m, v1alpha1.ConditionJoined) && m.Status.NodeName == n.Name
		})
		byID[m.Status.MemberID] = n.Name
	}

	first := byID[tr.api.LeaderAgent(t)]
	if first == "" {
		t.Fatalf("the leader is no agent pod: %s", tr.api.LeaderAgent(t))
	}
	tr.leave(first)
	tr.removedOnce(first)
	var rest []string
	for _, n := range nodes {
		if n.Name != first {
			rest = append(rest, n.Name)
		}
	}
	tr.assertMembers(rest...)
	if next := byID[tr.api.LeaderAgent(t)]; next == first || next == "" {
		t.Errorf("after %s's own member left, the leader is %q: no hand-over to another pod", first, next)
	}
}
