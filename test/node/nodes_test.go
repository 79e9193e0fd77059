package node

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

	// A restart is allowed here, unlike in TestInstall: three kubelets and their etcd members on 2
	// cores, beside the e2e package, can stall etcd past the agents' 3 s lease renewal, and a
	// leading agent that cannot renew exits by design (the fence). Each one is logged with why.
	var pods *corev1.PodList
	framework.Eventually(t, settle, pollEvery, "an agent pod Ready on every node", func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentLabel}); err != nil {
			return false, err
		}
		var ready, not []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if podReady(p) && p.Status.HostIP == nc.Cluster.Member(p.Spec.NodeName).IP() {
				ready = append(ready, p.Spec.NodeName)
			} else {
				not = append(not, fmt.Sprintf("%s on %s (%s, host IP %q)", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.HostIP))
			}
		}
		if len(ready) == len(nodes) {
			return true, nil
		}
		return false, fmt.Errorf("Ready on %v; not yet: %v", ready, not)
	})
	for i := range pods.Items {
		for _, c := range pods.Items[i].Status.ContainerStatuses {
			if c.RestartCount > 0 && c.LastTerminationState.Terminated != nil {
				last := c.LastTerminationState.Terminated
				t.Logf("%s restarted %d times; last exit %d (%s): %s", pods.Items[i].Name, c.RestartCount, last.ExitCode, last.Reason, last.Message)
			}
		}
	}
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
