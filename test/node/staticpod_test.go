package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// agentKubeconfig is where deploy/static-pod reads the agent's credential (runbooks.md, "Install
// on kubeadm"); /etc is the tier's overlay.
const agentKubeconfig = "/etc/etcdmember/kubeconfig"

// TestStaticPod: deploy/static-pod, image changed only, in the kubelet's staticPodPath after the
// DaemonSet is gone. It reaches etcd on 127.0.0.1:2379 as kubeadm's etcd serves it, registers its
// member bound to the Node, leads, removes a member on request, and its mirror pod is visible with
// system-node-critical's priority.
func TestStaticPod(t *testing.T) {
	tr := newTier(t)
	tr.applyDaemonSet(tr.node.AgentImage)
	tr.agentPod("Ready", podReady)
	tr.api.MustKubectl(t, "delete", "daemonset", "-n", "kube-system", "etcdmember-agent", "--wait=true", "--timeout=60s")

	_, kubeconfig := tr.api.User(t, "etcdmember-agent", "etcdmember:agents")
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(agentKubeconfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentKubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := tr.manifest("static-pod/etcdmember-agent.yaml", tr.node.AgentImage)
	if err := os.WriteFile(filepath.Join(tr.node.ManifestDir(), "etcdmember-agent.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}

	mirror := "etcdmember-agent-" + tr.node.Name
	framework.Eventually(t, settle, pollEvery, "mirror pod "+mirror+" Ready", func(ctx context.Context) (bool, error) {
		pod, err := tr.cs.CoreV1().Pods("kube-system").Get(ctx, mirror, metav1.GetOptions{})
		return err == nil && podReady(pod), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	pod, err := tr.cs.CoreV1().Pods("kube-system").Get(ctx, mirror, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, isMirror := pod.Annotations["kubernetes.io/config.mirror"]; !isMirror {
		t.Errorf("pod %s is not a mirror pod: %v", mirror, pod.Annotations)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority != 2000001000 {
		t.Errorf("mirror pod priority %v, want 2000001000 (system-node-critical)", pod.Spec.Priority)
	}
	if n := restarts(pod); n != 0 {
		t.Errorf("the static pod restarted %d times", n)
	}
	tr.member("node-1", "bound to the Node by the static pod", func(m *v1alpha1.EtcdMember) bool {
		return status.IsTrue(m, v1alpha1.ConditionJoined) && m.Status.NodeName == tr.node.Name
	})
	if leader := tr.api.LeaderAgent(t); leader != tr.podIdentity() {
		t.Fatalf("the leader is %s, not the static pod", leader)
	}
	tr.discovered("node-3")
	tr.leave("node-3")
	tr.assertMembers("node-1", "node-2")
}
