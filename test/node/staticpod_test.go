package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	tr.installLeading()
	var daemonSetTerm string
	framework.Eventually(t, callTimeout, pollEvery, "reading the leader Lease", framework.Succeeds(func(ctx context.Context) error {
		var err error
		daemonSetTerm, err = tr.leaseHolder(ctx)
		return err
	}))
	tr.deleteDaemonSet()
	// The DaemonSet's agent bound node-1's object to this very Node: unbound, only the static
	// pod's own registration can bind it again.
	tr.api.MustKubectl(t, "patch", "etcdmembers.etcdmember.io", "node-1", "--subresource=status", "--type=json",
		"-p", `[{"op":"remove","path":"/status/nodeName"}]`)

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
		return err == nil && framework.PodReady(pod), nil
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
	tr.member("node-1", "bound to the Node by the static pod", func(m *v1alpha1.EtcdMember) bool {
		return status.IsTrue(m, v1alpha1.ConditionJoined) && m.Status.NodeName == tr.node.Name
	})
	// The static pod campaigns under the DaemonSet pod's name (its member's ID): only the Lease's
	// random suffix tells its term from one the DaemonSet's agent left behind.
	framework.Eventually(t, settle, pollEvery, "the static pod holding the leader Lease", func(ctx context.Context) (bool, error) {
		holder, err := tr.leaseHolder(ctx)
		if err != nil {
			return false, err
		}
		if name, _, _ := strings.Cut(holder, "_"); name != tr.podIdentity() || holder == daemonSetTerm {
			return false, fmt.Errorf("held by %q; the DaemonSet's agent held it as %q", holder, daemonSetTerm)
		}
		return true, nil
	})
	tr.discovered("node-3")
	tr.leave("node-3")
	tr.assertMembers("node-1", "node-2")
}
