package node

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
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
	tr := startTier(t, 3)
	// node-2's and node-3's addresses live in their own namespaces: this one only routes to them.
	local, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range local {
		for _, n := range tr.nodes[1:] {
			if strings.HasPrefix(a.String(), n.IP+"/") {
				t.Fatalf("%s's address %s is on an interface of the tier's own namespace", n.Name, n.IP)
			}
		}
	}
	applied := tr.applyDaemonSet(tr.node.AgentImage)

	framework.Eventually(t, settle, pollEvery, "an agent pod Ready on every node, at its node's address", func(ctx context.Context) (bool, error) {
		pods, err := tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		var not []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if n := tr.kubeletNode(p.Spec.NodeName); n != nil && framework.PodReady(p) && p.Status.HostIP == n.IP {
				ready[n.Name] = true
			} else {
				not = append(not, fmt.Sprintf("%s on %q (%s, host IP %q)", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.HostIP))
			}
		}
		if len(ready) == len(tr.nodes) {
			return true, nil
		}
		return false, fmt.Errorf("Ready on %v; not yet: %v", slices.Sorted(maps.Keys(ready)), not)
	})
	t.Logf("apply to every agent pod Ready: %s", time.Since(applied).Round(100*time.Millisecond))
	byID := map[string]string{}
	for _, n := range tr.nodes {
		id := tr.nc.Cluster.Member(n.Name).IDHex()
		tr.member(n.Name, "registered by its node's pod", func(m *v1alpha1.EtcdMember) bool {
			return status.IsTrue(m, v1alpha1.ConditionJoined) && m.Status.MemberID == id && m.Status.NodeName == n.Name
		})
		byID[id] = n.Name
	}

	first := byID[tr.api.LeaderAgent(t)]
	if first == "" {
		t.Fatalf("the leader is no agent pod: %s", tr.api.LeaderAgent(t))
	}
	tr.leave(first)
	tr.removedOnce(first)
	var rest []string
	for _, n := range tr.nodes {
		if n.Name != first {
			rest = append(rest, n.Name)
		}
	}
	tr.assertMembers(rest...)
	if next := byID[tr.api.LeaderAgent(t)]; next == first || next == "" {
		t.Errorf("after %s's own member left, the leader is %q: no hand-over to another pod", first, next)
	}
}
