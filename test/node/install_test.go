package node

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestInstall installs as the README says, on an empty cluster: config/default, then the DaemonSet
// with only its image changed. The agent pod runs the image's entrypoint as the manifest's user
// with every capability dropped, a read-only root and seccomp, reads the hostPath certificates,
// reaches the apiserver through the "kubernetes" Service with its ServiceAccount, and registers its
// member bound to the kubelet's Node, which `kubectl etcdmember list` shows.
func TestInstall(t *testing.T) {
	tr := newTier(t)
	applied := tr.applyDaemonSet(tr.node.AgentImage)
	pod := tr.agentPod("Ready", framework.PodReady)
	readyAfter := readySince(pod).Sub(applied)
	t.Logf("apply to Ready: %s", readyAfter.Round(10*time.Millisecond))

	m := tr.member("node-1", "registered by the pod, bound to its Node", func(m *v1alpha1.EtcdMember) bool {
		return status.IsTrue(m, v1alpha1.ConditionJoined) && m.Status.NodeName == tr.node.Name
	})
	if m.Status.MemberID != tr.nc.Cluster.Member("node-1").IDHex() {
		t.Errorf("node-1's object records member %s, etcd says %s", m.Status.MemberID, tr.nc.Cluster.Member("node-1").IDHex())
	}
	run := tr.api.Plugin(t, nil, nil, "list")
	if run.Code != 0 || !strings.Contains(run.Stdout, "node-1") {
		t.Errorf("kubectl etcdmember list (exit %d) does not show node-1:\n%s", run.Code, run.Output())
	}
}

// readySince is when the pod's Ready condition last turned true.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
