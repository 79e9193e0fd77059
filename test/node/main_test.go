// Package node runs what operators run: the image of `make image` under a real kubelet and
// containerd, through config/default and the manifests of deploy/ with only the image reference
// changed. Its tests run in a network and mount namespace of their own (framework's node tier),
// one at a time: one kubelet node per test, the other members' agents, where a test needs them,
// as host processes.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	callTimeout = 10 * time.Second
	// settle bounds a registration, a leave or a restart under the kubelet.
	settle    = 60 * time.Second
	pollEvery = 200 * time.Millisecond
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	os.Exit(framework.RunInNodeNamespace(m, "test/node"))
}

// tier is one test's cluster: three etcd members on the tier's addresses, the control plane, the
// kubelet nodes, and config/default applied as the README says.
type tier struct {
	t   *testing.T
	nc  *framework.NodeCluster
	api *framework.APIServer
	// node is node-1's kubelet node, where most tests run their one agent pod; nodes are every
	// kubelet node, node first.
	node   *framework.KubeletNode
	nodes  []*framework.KubeletNode
	cs     kubernetes.Interface
	client client.Client
	agents *framework.AgentPods
}

// newTier starts the tier with node-1 the one kubelet node.
func newTier(t *testing.T) *tier {
	t.Helper()
	return startTier(t, 1)
}

// startTier starts the tier with the first kubelets members' nodes as kubelet nodes: node-1's in
// the tier's own namespaces, each other one in namespaces of its own with its etcd member inside.
// Every agent pod is watched until the test ends (framework.WatchAgentPods): a restart the test
// does not expect (tr.agents.ExpectRestarts) fails it.
func startTier(t *testing.T, kubelets int) *tier {
	t.Helper()
	var apart []string
	for i := 2; i <= kubelets; i++ {
		apart = append(apart, fmt.Sprintf("node-%d", i))
	}
	nc := framework.StartNodeCluster(t, 3, apart...)
	tr := &tier{t: t, nc: nc, api: nc.API, cs: nc.API.Clientset(), client: nc.API.ObjectClient(t, 50)}
	for _, m := range nc.Cluster.Members()[:kubelets] {
		tr.nodes = append(tr.nodes, nc.StartKubeletNode(t, m))
	}
	tr.node = tr.nodes[0]
	tr.agents = framework.WatchAgentPods(t, tr.cs, tr.podLogDirs)
	tr.api.InstallEtcdmember(t)
	return tr
}

// manifest reads a file of deploy/ with the image reference replaced, and nothing else changed.
func (tr *tier) manifest(rel, image string) string {
	tr.t.Helper()
	return framework.ShippedManifest(tr.t, rel, image)
}

// applyDaemonSet applies deploy/daemonset with only the image changed, and returns when.
func (tr *tier) applyDaemonSet(image string) time.Time {
	tr.t.Helper()
	path := filepath.Join(tr.t.TempDir(), "daemonset.yaml")
	if err := os.WriteFile(path, []byte(tr.manifest("daemonset/etcdmember-agent.yaml", image)), 0o644); err != nil {
		tr.t.Fatal(err)
	}
	applied := time.Now()
	tr.api.MustKubectl(tr.t, "apply", "-f", path)
	return applied
}

// deleteDaemonSet deletes the DaemonSet and waits until none of its pods is left: kubectl's
// --wait waits for the DaemonSet alone, and its pod, still terminating, would keep the node's
// health and metrics ports from the next agent.
func (tr *tier) deleteDaemonSet() {
	tr.t.Helper()
	tr.api.MustKubectl(tr.t, "delete", "daemonset", "-n", "kube-system", "etcdmember-agent", "--wait=true", "--timeout=60s")
	tr.noAgentPods("no agent pod left after the DaemonSet's deletion")
}

// noAgentPods waits until no agent pod exists.
func (tr *tier) noAgentPods(what string) {
	tr.t.Helper()
	framework.Eventually(tr.t, settle, pollEvery, what, func(ctx context.Context) (bool, error) {
		pods, err := tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err
		}
		var left []string
		for i := range pods.Items {
			left = append(left, describePod(&pods.Items[i]))
		}
		if len(left) > 0 {
			return false, fmt.Errorf("left: %v", left)
		}
		return true, nil
	})
}

// agentPod waits for the one agent pod on the kubelet node that satisfies ok, and returns it.
func (tr *tier) agentPod(what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	tr.t.Helper()
	var found *corev1.Pod
	var last string
	err := framework.Poll(settle, pollEvery, func(ctx context.Context) (bool, error) {
		pods, err := tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d pods", len(pods.Items))
		for i := range pods.Items {
			p := &pods.Items[i]
			last += "; " + describePod(p)
			if p.Spec.NodeName == tr.node.Name && p.DeletionTimestamp == nil && ok(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		tr.t.Fatalf("no agent pod on %s is %s within %s: %v (last: %s)", tr.node.Name, what, settle, err, last)
	}
	return found
}

func describePod(p *corev1.Pod) string {
	s := fmt.Sprintf("%s phase %s ready %v", p.Name, p.Status.Phase, framework.PodReady(p))
	for _, c := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(" restarts %d", c.RestartCount)
		if c.State.Waiting != nil {
			s += " waiting " + c.State.Waiting.Reason + ": " + c.State.Waiting.Message
		}
		if c.LastTerminationState.Terminated != nil {
			s += fmt.Sprintf(" last exit %d (%s)", c.LastTerminationState.Terminated.ExitCode, c.LastTerminationState.Terminated.Message)
		}
	}
	return s
}

// podLogDirs is each kubelet node's podLogsDir, by node name.
func (tr *tier) podLogDirs() map[string]string {
	dirs := map[string]string{}
	for _, n := range tr.nodes {
		dirs[n.Name] = n.PodLogDir()
	}
	return dirs
}

// kubeletNode is the tier's kubelet node name, or nil.
func (tr *tier) kubeletNode(name string) *framework.KubeletNode {
	for _, n := range tr.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// member waits for the EtcdMember name to satisfy ok and returns it.
func (tr *tier) member(name, what string, ok func(*v1alpha1.EtcdMember) bool) *v1alpha1.EtcdMember {
	tr.t.Helper()
	return framework.WaitEtcdMember(tr.t, tr.client, settle, pollEvery, name, what, ok)
}
