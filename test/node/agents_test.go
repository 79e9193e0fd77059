package node

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// hostAgents starts the agents of the named members as processes, with the least-privilege
// credential of runbooks.md (a user in the group etcdmember:agents): the members whose nodes run
// no kubelet here.
func (tr *tier) hostAgents(names ...string) {
	tr.t.Helper()
	_, kubeconfig := tr.api.User(tr.t, "etcdmember-agent", "etcdmember:agents")
	for _, name := range names {
		framework.StartAgent(tr.t, tr.nc.Cluster.Member(name), tr.api, "--kubeconfig="+kubeconfig)
	}
}

// installLeading applies the DaemonSet and waits until its pod is Ready and leads: the pod agent
// starts first, so it takes the Lease before the host agents exist.
func (tr *tier) installLeading() {
	tr.t.Helper()
	tr.applyDaemonSet(tr.node.AgentImage)
	tr.agentPod("Ready", framework.PodReady)
	if leader := tr.api.LeaderAgent(tr.t); leader != tr.podIdentity() {
		tr.t.Fatalf("the leader is %s, not the pod agent of %s (%s)", leader, tr.node.Name, tr.podIdentity())
	}
}

// leaseHolder is the leader Lease's holder as the agent wrote it, "<name>_<random>": the suffix is
// new at every start of an agent, so it tells two runs under one name apart.
func (tr *tier) leaseHolder(ctx context.Context) (string, error) {
	lease, err := tr.cs.CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the leader Lease: %w", err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}

// podIdentity is the name the pod agent campaigns under: the manifests set no --name, so it is its
// member's ID.
func (tr *tier) podIdentity() string { return tr.nc.Cluster.Member(tr.node.Name).IDHex() }

// etcdMembers is etcd's member list, by name.
func (tr *tier) etcdMembers() []string {
	tr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := tr.nc.Cluster.Client(tr.t).MemberList(ctx)
	if err != nil {
		tr.t.Fatalf("member list: %v", err)
	}
	var names []string
	for _, m := range resp.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

// assertMembers fails unless etcd lists exactly want.
func (tr *tier) assertMembers(want ...string) {
	tr.t.Helper()
	slices.Sort(want)
	if got := tr.etcdMembers(); !slices.Equal(got, want) {
		tr.t.Errorf("etcd lists %v, want %v", got, want)
	}
}

// removedEvents waits for the Events that say the named member was removed (they are written after
// the status), then counts them once no more came for a few seconds.
func (tr *tier) removedEvents(name string) int {
	tr.t.Helper()
	count := func(ctx context.Context) (int, error) {
		var list eventsv1.EventList
		if err := tr.client.List(ctx, &list, client.InNamespace("kube-system")); err != nil {
			return 0, err
		}
		n := 0
		for _, ev := range list.Items {
			if ev.Regarding.Kind == "EtcdMember" && ev.Regarding.Name == name && ev.Reason == v1alpha1.ReasonRemoved {
				n++
			}
		}
		return n, nil
	}
	n := 0
	framework.Eventually(tr.t, settle, pollEvery, "a Removed Event about "+name, func(ctx context.Context) (bool, error) {
		var err error
		n, err = count(ctx)
		return err == nil && n > 0, nil
	})
	_ = framework.Hold(3*time.Second, pollEvery, func(ctx context.Context) (bool, error) {
		more, err := count(ctx)
		if err == nil && more > n {
			n = more
			return false, nil
		}
		return true, nil
	})
	return n
}

// askLeave sets spec.leave on name, as runbooks.md does without the plugin, and does not wait.
func (tr *tier) askLeave(name string) {
	tr.t.Helper()
	tr.api.MustKubectl(tr.t, "patch", "etcdmembers.etcdmember.io", name, "--type=merge", "-p", `{"spec":{"leave":true}}`)
}

// removedOnce waits until name's member was removed on request, and fails unless exactly one
// Removed Event says so.
func (tr *tier) removedOnce(name string) {
	tr.t.Helper()
	tr.member(name, "removed", func(m *v1alpha1.EtcdMember) bool {
		return status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved)
	})
	if n := tr.removedEvents(name); n != 1 {
		tr.t.Errorf("%d Removed Events for %s, want 1", n, name)
	}
}

// leave asks name to leave with the plugin and waits for it to be out.
func (tr *tier) leave(name string) {
	tr.t.Helper()
	if run := tr.api.Plugin(tr.t, nil, nil, "leave", name); run.Code != 0 {
		tr.t.Fatalf("kubectl etcdmember leave %s: %s", name, run.Output())
	}
	tr.member(name, "removed", func(m *v1alpha1.EtcdMember) bool {
		return status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved)
	})
}

// TestPodAgentLeaves: the pod agent, leading, removes another node's member; its own member's leave
// goes through the hand-over to an agent on another node.
func TestPodAgentLeaves(t *testing.T) {
	tr := newTier(t)
	tr.installLeading()
	tr.hostAgents("node-2", "node-3")

	tr.leave("node-3")
	if leader := tr.api.LeaderAgent(t); leader != tr.podIdentity() {
		t.Errorf("the leader after node-3's leave is %s, not the pod agent", leader)
	}
	tr.assertMembers("node-1", "node-2")

	tr.leave("node-1")
	tr.assertMembers("node-2")
	if one, three := tr.removedEvents("node-1"), tr.removedEvents("node-3"); one != 1 || three != 1 {
		t.Errorf("want one Removed Event each for node-1 and node-3, got %d and %d", one, three)
	}
	if holder := tr.api.LeaderAgent(t); holder == tr.podIdentity() {
		t.Errorf("the pod agent still leads after its own member left: no hand-over")
	}
}

// discovered waits until the leading agent has made the object of a member that runs no agent,
// and recorded it in etcd: labelled discovered, so that no agent's registration passes for it.
func (tr *tier) discovered(name string) {
	tr.t.Helper()
	tr.member(name, "discovered", func(m *v1alpha1.EtcdMember) bool {
		return m.Labels[v1alpha1.LabelDiscovered] == "true" && status.IsTrue(m, v1alpha1.ConditionJoined)
	})
}

// TestPodAgentCrash: SIGKILL of the agent container's process; the kubelet restarts it and it is
// Ready again, and a leave asked for while it was down completes exactly once.
func TestPodAgentCrash(t *testing.T) {
	tr := newTier(t)
	tr.agents.ExpectRestarts(1, "the test SIGKILLs the agent's process once")
	tr.installLeading()
	tr.discovered("node-3")
	pod := tr.agentPod("Ready", framework.PodReady)
	pid := tr.node.ContainerPID(t, pod.Status.ContainerStatuses[0].ContainerID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	killed := time.Now()
	tr.askLeave("node-3")

	tr.agentPod("Ready after a restart", func(p *corev1.Pod) bool { return framework.PodReady(p) && framework.PodRestarts(p) >= 1 })
	t.Logf("SIGKILL to Ready again: %s", time.Since(killed).Round(10*time.Millisecond))
	tr.removedOnce("node-3")
	tr.assertMembers("node-1", "node-2")
}

// Liveness of the shipped manifests: periodSeconds × failureThreshold, and the grace a frozen
// process cannot use.
const (
	livenessWindow   = 10 * 3 * time.Second
	terminationGrace = 5 * time.Second
	// restartSlack is the kubelet's own share: the probe's timeout, its sync of the pod, and the
	// container's start.
	restartSlack = 10 * time.Second
)

// TestPodAgentWedged: SIGSTOP of the agent's process. The liveness probe makes the kubelet replace
// it within the probe window plus the termination grace and the kubelet's own slack, and the
// frozen agent changes nothing meanwhile: a leave asked for while it is frozen is made once, by the
// agent that takes over.
func TestPodAgentWedged(t *testing.T) {
	tr := newTier(t)
	tr.agents.ExpectRestarts(1, "the test freezes the agent's process, and the liveness probe has it replaced once")
	tr.installLeading()
	tr.hostAgents("node-2")
	tr.discovered("node-3")
	pod := tr.agentPod("Ready", framework.PodReady)
	pid := tr.node.ContainerPID(t, pod.Status.ContainerStatuses[0].ContainerID)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	stopped := time.Now()
	tr.askLeave("node-3")

	pod = tr.agentPod("running again", func(p *corev1.Pod) bool {
		return framework.PodRestarts(p) >= 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	replaced := pod.Status.ContainerStatuses[0].State.Running.StartedAt.Sub(stopped)
	t.Logf("SIGSTOP to a new container: %s (bound %s)", replaced.Round(10*time.Millisecond), livenessWindow+terminationGrace+restartSlack)
	if replaced > livenessWindow+terminationGrace+restartSlack {
		t.Errorf("the frozen agent was replaced %s after SIGSTOP, bound %s", replaced, livenessWindow+terminationGrace+restartSlack)
	}
	tr.removedOnce("node-3")
	tr.agentPod("Ready", framework.PodReady)
	tr.assertMembers("node-1", "node-2")
}
