// Package kubeadm runs etcdmember on the control plane operators build: kubeadm v1.37 itself
// initializes node-1 with stacked etcd and joins node-2 and node-3 as control-plane nodes, each in
// namespaces of its own (test/framework/kubeadm), with etcd and the control plane as kubeadm's
// static pods under real kubelets. Like kinder's workflows, one cluster is built once, and the
// tasks run on it in order, each a subtest; a task that fails stops the ones after it.
package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

const (
	// settle bounds a registration, a leave or a restart under the kubelet.
	settle    = 60 * time.Second
	pollEvery = 200 * time.Millisecond
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	os.Exit(framework.RunInNodeNamespace(m, "test/kubeadm"))
}

// workflow is the cluster the tasks share, and the test that runs the current task.
type workflow struct {
	t       *testing.T
	cluster *tier.Cluster
	nodes   []*tier.Node
	admin   framework.Admin
	cs      kubernetes.Interface
	client  client.Client
	agents  *framework.AgentPods
}

// newWorkflow makes the three machines and runs `kubeadm init` on node-1; the tasks join the
// others. Every agent pod is watched from then on until the test ends: a restart no task expects
// fails it.
func newWorkflow(t *testing.T) *workflow {
	t.Helper()
	w := &workflow{t: t}
	for i := 1; i <= 3; i++ {
		w.nodes = append(w.nodes, tier.NewNode(t, fmt.Sprintf("node-%d", i)))
	}
	start := time.Now()
	w.cluster = tier.Init(t, w.nodes[0])
	t.Logf("kubeadm init on node-1: %s", time.Since(start).Round(100*time.Millisecond))
	w.admin = w.cluster.Admin(t)
	w.cs = w.admin.Clientset(t)
	w.client = w.admin.ObjectClient(t, 50)
	w.agents = framework.WatchAgentPods(t, w.cs, w.podLogDirs)
	return w
}

// run runs the tasks in order, each a subtest of w's test; a task that fails stops the rest, whose
// cluster would not be the one they expect.
func (w *workflow) run(tasks ...task) {
	parent := w.t
	for _, tk := range tasks {
		if !parent.Run(tk.name, func(t *testing.T) {
			w.t = t
			tk.run(w)
		}) {
			parent.Fatalf("task %q failed; the tasks after it did not run", tk.name)
		}
	}
	w.t = parent
}

type task struct {
	name string
	run  func(*workflow)
}

// podLogDirs is each node's podLogsDir (kubeadm's kubelet default, /var/log/pods), by node name.
func (w *workflow) podLogDirs() map[string]string {
	dirs := map[string]string{}
	for _, n := range w.nodes {
		dirs[n.Name] = n.HostPath(w.t, "/var/log/pods")
	}
	return dirs
}

// applyDaemonSet applies deploy/daemonset with only the image changed and flags added to the
// agent's, and waits for its rollout: a changed template replaces every agent pod, one node at a
// time.
func (w *workflow) applyDaemonSet(flags ...string) {
	w.t.Helper()
	manifest := framework.ShippedManifest(w.t, "daemonset/etcdmember-agent.yaml", w.nodes[0].AgentImage)
	const args = "          args:\n"
	if strings.Count(manifest, args) != 1 {
		w.t.Fatalf("deploy/daemonset/etcdmember-agent.yaml: expected one %q", args)
	}
	for _, f := range flags {
		manifest = strings.Replace(manifest, args, args+"            - "+f+"\n", 1)
	}
	path := filepath.Join(w.t.TempDir(), "daemonset.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.admin.MustKubectl(w.t, "apply", "-f", path)
	w.admin.MustKubectl(w.t, "rollout", "status", "-n", "kube-system", "daemonset/etcdmember-agent", "--timeout=2m")
	w.agentPodsRolledOut()
}

// agentPodsRolledOut waits until every Node of the cluster runs one agent pod, Ready and of the
// DaemonSet's newest revision. `kubectl rollout status` alone is not enough: it reads the
// DaemonSet's status, whose counts are of the nodes the controller then found eligible.
func (w *workflow) agentPodsRolledOut() {
	w.t.Helper()
	framework.Eventually(w.t, 2*settle, pollEvery, "every node's agent pod Ready, of the DaemonSet's newest revision", func(ctx context.Context) (bool, error) {
		revisions, err := w.cs.AppsV1().ControllerRevisions("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err
		}
		var newest *appsv1.ControllerRevision
		for i := range revisions.Items {
			if r := &revisions.Items[i]; newest == nil || r.Revision > newest.Revision {
				newest = r
			}
		}
		if newest == nil {
			return false, errors.New("the DaemonSet has no ControllerRevision")
		}
		hash := newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
		pods, err := w.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err
		}
		nodes, err := w.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var behind []string
		for _, n := range nodes.Items {
			var on []string
			done := false
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Spec.NodeName != n.Name {
					continue
				}
				on = append(on, fmt.Sprintf("%s revision %s ready %t deleting %t", p.Name, p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey],
					framework.PodReady(p), p.DeletionTimestamp != nil))
				done = done || p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash && framework.PodReady(p) && p.DeletionTimestamp == nil
			}
			if !done || len(on) != 1 {
				behind = append(behind, fmt.Sprintf("%s: %v", n.Name, on))
			}
		}
		if len(behind) > 0 {
			return false, fmt.Errorf("revision %s not rolled out on %v; %s", hash, behind, w.nodesAndDaemonSet(ctx, nodes.Items))
		}
		return true, nil
	})
}

// nodesAndDaemonSet says what the DaemonSet controller decides from: each Node's readiness and
// taints, and the DaemonSet's status.
func (w *workflow) nodesAndDaemonSet(ctx context.Context, nodes []corev1.Node) string {
	var b strings.Builder
	for _, n := range nodes {
		ready := "unknown"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		fmt.Fprintf(&b, "Node %s Ready=%s taints %v; ", n.Name, ready, n.Spec.Taints)
	}
	if ds, err := w.cs.AppsV1().DaemonSets("kube-system").Get(ctx, "etcdmember-agent", metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "DaemonSet generation %d status %+v", ds.Generation, ds.Status)
	}
	return b.String()
}

// member waits for the EtcdMember name to satisfy ok and returns it.
func (w *workflow) member(name, what string, ok func(*v1alpha1.EtcdMember) bool) *v1alpha1.EtcdMember {
	w.t.Helper()
	return framework.WaitEtcdMember(w.t, w.client, settle, pollEvery, name, what, ok)
}

// agentPodsReady waits until each of nodes runs a Ready agent pod.
func (w *workflow) agentPodsReady(nodes ...*tier.Node) {
	w.t.Helper()
	framework.Eventually(w.t, settle, pollEvery, "a Ready agent pod on each node", func(ctx context.Context) (bool, error) {
		pods, err := w.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && framework.PodReady(p) {
				ready[p.Spec.NodeName] = true
			}
		}
		for _, n := range nodes {
			if !ready[n.Name] {
				return false, fmt.Errorf("none Ready on %s (%d pods)", n.Name, len(pods.Items))
			}
		}
		return true, nil
	})
}
