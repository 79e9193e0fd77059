package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestRollingUpdateWhileLeavePending: node-3's leave is held by the quorum guard (node-2 is down)
// while the DaemonSet moves to another tag of the image. Once node-2 is back, node-3 is removed
// exactly once, nothing else is, and the new agent pod is Ready.
func TestRollingUpdateWhileLeavePending(t *testing.T) {
	tr := newTier(t)
	tr.installLeading()
	tr.discovered("node-3")
	node2 := tr.nc.Cluster.Member("node-2")
	node2.Stop(t)
	tr.askLeave("node-3")
	tr.member("node-3", "held by the quorum guard", func(m *v1alpha1.EtcdMember) bool {
		return status.HasReason(m, v1alpha1.ConditionLeft, v1alpha1.ReasonQuorumAtRisk)
	})

	next := tr.node.TagAgentImage(t, "rollout")
	tr.applyDaemonSet(next)
	tr.agentPod("Ready on the new tag", func(p *corev1.Pod) bool { return framework.PodReady(p) && p.Spec.Containers[0].Image == next })
	tr.assertMembers("node-1", "node-2", "node-3")

	node2.Start(t)
	tr.removedOnce("node-3")
	tr.assertMembers("node-1", "node-2")
}

// TestDeleteKubeletNode: with --leave-on-node-delete, `kubectl delete node` of the kubelet node
// while its kubelet keeps running. The node's member leaves (through the hand-over: the pod agent
// led), nothing else is removed. The running kubelet does not register its Node again; restarted,
// it does, without the control-plane label. What follows on that node: its etcd, removed, stops;
// the agent's pod goes with the Node and the DaemonSet runs none on the Node that came back; the
// object keeps recording the member that left. The new Node is bound to no other member and held
// by nobody (docs/install.md).
func TestDeleteKubeletNode(t *testing.T) {
	tr := newTier(t)
	manifest := tr.manifest("daemonset/etcdmember-agent.yaml", tr.node.AgentImage)
	// The documented way to turn it on: one more flag in the agents' args.
	const anchor = "            - --health-probe-bind-address=127.0.0.1:9470\n"
	if !strings.Contains(manifest, anchor) {
		t.Fatalf("deploy/daemonset: no %q to add --leave-on-node-delete after", anchor)
	}
	manifest = strings.Replace(manifest, anchor, anchor+"            - --leave-on-node-delete\n", 1)
	path := filepath.Join(t.TempDir(), "daemonset.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	tr.api.MustKubectl(t, "apply", "-f", path)
	tr.agentPod("Ready", framework.PodReady)
	_, kubeconfig := tr.api.User(t, "etcdmember-agent", "etcdmember:agents")
	for _, name := range []string{"node-2", "node-3"} {
		framework.StartAgent(t, tr.nc.Cluster.Member(name), tr.api, "--kubeconfig="+kubeconfig, "--leave-on-node-delete")
	}
	var before *corev1.Node
	framework.Eventually(t, settle, pollEvery, "Node node-1 held by etcdmember's finalizer", func(ctx context.Context) (bool, error) {
		n, err := tr.cs.CoreV1().Nodes().Get(ctx, tr.node.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		before = n
		return slices.Contains(n.Finalizers, v1alpha1.FinalizerNode), nil
	})

	tr.api.MustKubectl(t, "delete", "node", tr.node.Name, "--timeout=120s")
	tr.member("node-1", "removed", func(m *v1alpha1.EtcdMember) bool {
		return status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved)
	})
	tr.assertMembers("node-2", "node-3")
	// A running kubelet does not register its Node again (v1.37 registers only at start).
	framework.Consistently(t, 10*time.Second, pollEvery, "Node node-1 still absent while its kubelet runs", func(ctx context.Context) (bool, error) {
		// Any answer but the Node will do: right after the removal, the apiserver's etcd client may
		// still try the member that left.
		_, err := tr.cs.CoreV1().Nodes().Get(ctx, tr.node.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	tr.node.RestartKubelet(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	again, err := tr.cs.CoreV1().Nodes().Get(ctx, tr.node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.UID == before.UID {
		t.Fatalf("Node node-1 was not registered anew")
	}
	if _, labelled := again.Labels["node-role.kubernetes.io/control-plane"]; labelled {
		t.Errorf("the re-registered Node has the control-plane label, which only an operator or kubeadm sets")
	}

	// Give the agents time to act on the new Node: nothing may bind it to another member, nor hold it.
	framework.Consistently(t, 10*time.Second, pollEvery, "Node node-1 bound only to the member that left", func(ctx context.Context) (bool, error) {
		var list v1alpha1.EtcdMemberList
		if err := tr.client.List(ctx, &list); err != nil {
			return true, nil
		}
		for _, m := range list.Items {
			if m.Name != "node-1" && m.Status.NodeName == tr.node.Name {
				return false, nil
			}
		}
		n, err := tr.cs.CoreV1().Nodes().Get(ctx, tr.node.Name, metav1.GetOptions{})
		return err != nil || !slices.Contains(n.Finalizers, v1alpha1.FinalizerNode), nil
	})
	m := tr.member("node-1", "still the record of the member that left", func(m *v1alpha1.EtcdMember) bool {
		return !status.IsTrue(m, v1alpha1.ConditionJoined)
	})
	if m.Status.MemberID != tr.nc.Cluster.Member("node-1").IDHex() {
		t.Errorf("node-1's object now records member %s, not the one that left (%s)", m.Status.MemberID, tr.nc.Cluster.Member("node-1").IDHex())
	}
	tr.api.MustKubectl(t, "delete", "node", tr.node.Name, "--wait=false")
	framework.Eventually(t, 10*time.Second, pollEvery, "the re-registered Node deleted at once", func(ctx context.Context) (bool, error) {
		_, err := tr.cs.CoreV1().Nodes().Get(ctx, tr.node.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	tr.assertMembers("node-2", "node-3")
	// The agent's pod went with its Node, and the DaemonSet runs none on the Node that came back
	// without the control-plane label.
	tr.noAgentPods("no agent pod left")
}
