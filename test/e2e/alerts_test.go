package e2e

import (
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// alertBound is how long after a member's death (or return) both of its alerts must have fired
// (or resolved) in the test's Prometheus. Its parts: the leader's probe turns Healthy to
// NotServing on the second failed round (2 x the tests' 2 s --probe-interval), the scrape and
// the rule evaluation (1 s each), and the alerts' for: shortened to 5 s; the rest is margin for a
// loaded CI machine.
const alertBound = 30 * time.Second

// TestAlertsFireInARealPrometheus: a real Prometheus scrapes the agents over HTTPS with a
// ServiceAccount token, as config/prometheus ships it, and evaluates the shipped rules (their
// for: shortened to 5 s). Killing one member of three fires EtcdMemberUnhealthy and
// EtcdNoFaultTolerance; a leave the guard refuses meanwhile shows in the pending-leave series;
// bringing the member back resolves both alerts. A scrape without a token, or with one not
// allowed /metrics, is refused.
func TestAlertsFireInARealPrometheus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agentArgs: []string{"--metrics-secure"}})
	e.kubectl("apply", "-f", "../../config/prometheus/metrics-reader.yaml")
	token := e.api.ScraperToken(t)
	var targets []string
	for _, a := range e.agents {
		targets = append(targets, a.MetricsAddr())
	}
	if err := e.api.CheckMetricsAccess(t, token, settle, targets...); err != nil {
		t.Error(err)
	}

	prom := framework.StartShippedPrometheus(t, targets, token)
	prom.WaitTargetsUp(t, len(targets), settle)
	prom.WaitQuery(t, "max(etcdmember_fault_tolerance)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	prom.WaitQuery(t, "sum(etcdmember_leader)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	// Before the first scrapes every series was absent, and EtcdMemberNoLeadingAgent (absent
	// leader gauge) may have fired: a healthy cluster, once scraped, fires nothing.
	prom.WaitAlerts(t, "no alert firing on the healthy cluster", time.Now(), alertBound, func(a map[string]bool) bool { return len(a) == 0 })

	others := nonLeaders(e)
	dead, target := others[0], others[1]
	killed := time.Now()
	dead.Kill(t)
	unhealthy := "EtcdMemberUnhealthy/" + dead.Name
	took := prom.WaitAlerts(t, "the dead member's alerts firing", killed, alertBound, func(a map[string]bool) bool {
		return a[unhealthy] && a["EtcdNoFaultTolerance/"]
	})
	t.Logf("EtcdMemberUnhealthy and EtcdNoFaultTolerance fired %s after the kill", took.Round(time.Millisecond))

	e.leave(target.Name)
	e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	prom.WaitQuery(t, `etcdmember_leave_pending_seconds{member="`+target.Name+`",reason="QuorumAtRisk"}`, settle,
		func(s []framework.Sample) bool { return len(s) == 1 })
	prom.WaitQuery(t, "max(etcdmember_leave_requests_pending)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	// Withdrawn before the member comes back: the leave would otherwise go through and leave two
	// voters, whose fault tolerance is 0 again.
	e.kubectl("patch", "etcdmembers.etcdmember.io", target.Name, "--type", "merge", "-p", `{"spec":{"leave":false}}`)
	prom.WaitQuery(t, "max(etcdmember_leave_requests_pending)", settle, func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 0 })

	back := time.Now()
	dead.Start(t)
	took = prom.WaitAlerts(t, "both alerts resolved", back, alertBound, func(a map[string]bool) bool {
		return !a[unhealthy] && !a["EtcdNoFaultTolerance/"]
	})
	t.Logf("both alerts resolved %s after the member came back", took.Round(time.Millisecond))
}
