package kubeadm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

const (
	// agentsGroup is the group config/rbac gives the agent's rights to; wrongGroup is a typo of it,
	// which authenticates and is allowed nothing of the agent's.
	agentsGroup = "etcdmember:agents"
	wrongGroup  = "etcdmember:agent"
	// staticPodFile is deploy/static-pod's manifest in kubeadm's staticPodPath.
	staticPodFile = "/etc/kubernetes/manifests/etcdmember-agent.yaml"
	// registeredCheck is the agent's readiness check of its registration, which names the cause
	// when it fails; the manifest binds the health port on the node's loopback.
	registeredCheck = "http://127.0.0.1:9470/readyz/registered"
	// quietFor is how long no alert may fire on the healthy cluster: two of the shortened for: of
	// the shipped rules, so that an alert pending at the start would have fired.
	quietFor = 2 * framework.ShortenedFor
)

// staticPod swaps the DaemonSet for deploy/static-pod on every node, installed as
// docs/runbooks.md "Install on kubeadm" says: the agent's credential from `kubeadm kubeconfig
// user`, the manifest with only its image changed in kubeadm's staticPodPath.
//   - node-1 first gets a credential in the wrong group: its agent runs, says in its readiness and
//     its log that the API refuses its identity and which group config/rbac names, and nothing
//     changes in etcd. Its credential is then made again in the right group, as the runbook
//     renews one (a new file renamed over the old one), and the running agent registers with it,
//     with no restart.
//   - Every node's mirror pod is then Ready (registered) and declares the port named metrics;
//     one static pod agent leads.
//   - A real Prometheus on the shipped scrape configuration, with metrics-reader.yaml's token,
//     scrapes the three agents at their node's address over HTTPS, and no alert fires.
func (w *workflow) staticPod() {
	before := w.etcdMembers()
	w.admin.MustKubectl(w.t, "delete", "-n", "kube-system", "daemonset", "etcdmember-agent", "--timeout=1m")
	w.agentPodsGone()
	manifest := framework.ShippedManifest(w.t, "static-pod/etcdmember-agent.yaml", w.nodes[0].AgentImage)

	first := w.nodes[0]
	first.AgentCredential(w.t, wrongGroup)
	w.writeStaticPod(first, manifest)
	why := w.unregistered(first, agentsGroup)
	w.t.Logf("%s's agent with a credential in %s: %s", first.Name, wrongGroup, why)
	if log := w.agents.Logs(); !strings.Contains(log, "forbidden") || !strings.Contains(log, agentsGroup) {
		w.t.Errorf("the agent's log does not say that the API refused it, naming %s:\n%s", agentsGroup, log)
	}
	w.membersHold(before, first.Name+"'s agent had no rights")
	// It waits for rights and never exits for want of them.
	if p := w.mirrorPod(first); framework.PodRestarts(p) != 0 {
		w.t.Errorf("%s's agent restarted %d times without rights, want none", first.Name, framework.PodRestarts(p))
	}
	// Made again in the right group as the runbook renews a credential: the running agent reads
	// it at its next connection, with no restart (the tier fails on any restart).
	first.AgentCredential(w.t, agentsGroup)
	renewed := time.Now()
	var targets []string
	for _, n := range w.nodes {
		if n != first {
			n.AgentCredential(w.t, agentsGroup)
			w.writeStaticPod(n, manifest)
		}
	}
	for _, n := range w.nodes {
		pod := w.mirrorPodReady(n)
		if n == first {
			w.t.Logf("%s's agent registered %s after its credential was renewed", first.Name, time.Since(renewed).Round(100*time.Millisecond))
		}
		targets = append(targets, framework.MetricsTarget(w.t, pod))
	}
	w.admin.MustKubectl(w.t, "apply", "-f", filepath.Join(framework.MustRepoRoot(w.t), "config", "prometheus", "metrics-reader.yaml"))
	prom := framework.StartShippedPrometheus(w.t, targets, w.admin.ScraperSecretToken(w.t, settle))
	w.t.Logf("Prometheus scraping %v: up after %s", targets, prom.WaitTargetsUp(w.t, len(targets), settle).Round(time.Millisecond))
	prom.WaitQuery(w.t, "sum(etcdmember_leader)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	prom.WaitQuery(w.t, "sum(etcdmember_member_healthy)", settle, func(s []framework.Sample) bool {
		return len(s) == 1 && s[0].Value == float64(len(w.nodes))
	})
	// EtcdMemberNoLeadingAgent may have fired before the first scrape (absent(etcdmember_leader)).
	prom.WaitAlerts(w.t, "no alert firing on the healthy cluster", time.Now(), settle, func(a map[string]bool) bool { return len(a) == 0 })
	// Each attempt with a context of its own: the one Hold passes ends with the window.
	if err := framework.Hold(quietFor, time.Second, func(context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		firing, err := prom.Firing(ctx)
		switch {
		case err != nil:
			return false, err
		case len(firing) > 0:
			return false, fmt.Errorf("firing %v", firing)
		}
		return true, nil
	}); err != nil {
		w.t.Errorf("an alert fired on the healthy cluster: %v (log: %s)", err, prom.LogFile())
	}
	if after := w.etcdMembers(); !maps.Equal(after, before) {
		w.t.Errorf("etcd's members changed when the static pods replaced the DaemonSet: now %v, before %v", after, before)
	}
}

// agentPodsGone waits until no agent pod is left.
func (w *workflow) agentPodsGone() {
	w.t.Helper()
	framework.Eventually(w.t, settle, pollEvery, "no agent pod left", func(ctx context.Context) (bool, error) {
		pods, err := w.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil || len(pods.Items) > 0 {
			return false, fmt.Errorf("%d pods: %w", len(pods.Items), err)
		}
		return true, nil
	})
}

// writeStaticPod puts the static pod's manifest into n's staticPodPath, as step 3 of the runbook.
func (w *workflow) writeStaticPod(n *tier.Node, manifest string) {
	w.t.Helper()
	if err := os.WriteFile(n.HostPath(w.t, staticPodFile), []byte(manifest), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// unregistered waits until n's agent answers its registration check with a failure naming want,
// and returns the answer.
func (w *workflow) unregistered(n *tier.Node, want string) string {
	w.t.Helper()
	var last string
	framework.Eventually(w.t, settle, pollEvery, n.Name+"'s agent saying why it is not registered", func(context.Context) (bool, error) {
		out, err := n.Run(w.t, "curl", "-sS", "--max-time", "2", registeredCheck)
		last = out
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, out)
		}
		if !strings.Contains(out, want) {
			return false, fmt.Errorf("answered %q", out)
		}
		return true, nil
	})
	return last
}

// mirrorPodName is the name of the mirror pod of n's static pod agent: the kubelet appends the
// node's name to the manifest's.
func mirrorPodName(n *tier.Node) string { return "etcdmember-agent-" + n.Name }

// mirrorPod is n's static pod agent's mirror pod, as it is now.
func (w *workflow) mirrorPod(n *tier.Node) *corev1.Pod {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := w.cs.CoreV1().Pods("kube-system").Get(ctx, mirrorPodName(n), metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

// mirrorPodReady waits until n's static pod agent is Ready, as its mirror pod says, and returns
// the mirror pod.
func (w *workflow) mirrorPodReady(n *tier.Node) *corev1.Pod {
	w.t.Helper()
	mirror := mirrorPodName(n)
	var pod *corev1.Pod
	framework.Eventually(w.t, settle, pollEvery, "mirror pod "+mirror+" Ready", func(ctx context.Context) (bool, error) {
		p, err := w.cs.CoreV1().Pods("kube-system").Get(ctx, mirror, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return framework.PodReady(p), nil
	})
	if _, ok := pod.Annotations["kubernetes.io/config.mirror"]; !ok {
		w.t.Errorf("pod %s is not a mirror pod: %v", mirror, pod.Annotations)
	}
	return pod
}
