package node

import (
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// podAlertBound is how long after a member's death its alerts must fire in the test's Prometheus,
// with the DaemonSet's own timings (the manifest sets none): the leader's probe finds the member
// unhealthy within two rounds of the default --probe-interval (5 s) and its 1 s timeout, then a
// scrape and a rule evaluation (1 s each) and the alerts' for: shortened to 5 s; the rest is
// margin for a loaded CI machine.
const podAlertBound = 45 * time.Second

// TestMetricsAndAlertsFromThePod: monitoring as docs/install.md "Monitoring" sets it up for a
// stand-alone Prometheus. metrics-reader.yaml applied with kubectl, the token its Secret gets from
// kube-controller-manager read as scrape.yaml says, a real Prometheus on the shipped scrape.yaml
// (the one target: the agent pod's $(HOST_IP):9469) and rules.yaml (for: shortened). The pod
// serves /metrics over HTTPS only, refuses a scrape without the token (401) or with a token not
// allowed /metrics (403); Prometheus's target is up; killing another node's etcd member fires
// EtcdMemberUnhealthy for it and EtcdNoFaultTolerance.
func TestMetricsAndAlertsFromThePod(t *testing.T) {
	tr := newTier(t)
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	tr.api.MustKubectl(t, "apply", "-f", filepath.Join(root, "config", "prometheus", "metrics-reader.yaml"))
	tr.installLeading()
	target := tr.metricsTarget(tr.agentPod("Ready", framework.PodReady))
	token := tr.api.Admin().ScraperSecretToken(t, settle)
	if err := tr.api.CheckMetricsAccess(t, token, settle, target); err != nil {
		t.Errorf("the pod agent's /metrics: %v", err)
	}

	prom := framework.StartShippedPrometheus(t, []string{target}, token)
	t.Logf("Prometheus ready to target %s up: %s", target, prom.WaitTargetsUp(t, 1, settle).Round(time.Millisecond))
	prom.WaitQuery(t, "sum(etcdmember_member_healthy)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 3 })
	prom.WaitQuery(t, "max(etcdmember_fault_tolerance)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	prom.WaitQuery(t, "sum(etcdmember_leader)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	// EtcdMemberNoLeadingAgent may have fired on the absent leader gauge before the first scrape.
	prom.WaitAlerts(t, "no alert firing on the healthy cluster", time.Now(), podAlertBound, func(a map[string]bool) bool { return len(a) == 0 })

	dead := tr.nc.Cluster.Member("node-3")
	killed := time.Now()
	dead.Kill(t)
	unhealthy := "EtcdMemberUnhealthy/" + dead.Name
	took := prom.WaitAlerts(t, "node-3's alerts firing", killed, podAlertBound, func(a map[string]bool) bool {
		return a[unhealthy] && a["EtcdNoFaultTolerance/"]
	})
	t.Logf("EtcdMemberUnhealthy/%s and EtcdNoFaultTolerance fired %s after the kill (bound %s)",
		dead.Name, took.Round(time.Millisecond), podAlertBound)
}

// metricsTarget is where the pod's agent serves /metrics (framework.MetricsTarget), on the
// node's address.
func (tr *tier) metricsTarget(pod *corev1.Pod) string {
	tr.t.Helper()
	if pod.Status.HostIP != tr.node.IP {
		tr.t.Fatalf("the agent pod's host IP is %q, want the node's %s", pod.Status.HostIP, tr.node.IP)
	}
	return framework.MetricsTarget(tr.t, pod)
}
