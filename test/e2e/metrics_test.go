package e2e

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestMetricsAndProbes: the leader's metrics follow a refused and then completed leave, and
// every agent answers its health probes.
func TestMetricsAndProbes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	for name, a := range e.agents {
		for _, path := range []string{"healthz", "readyz"} {
			if code, _ := httpGet(t, a.HealthURL(path)); code != http.StatusOK {
				t.Errorf("agent %s /%s: %d", name, path, code)
			}
		}
	}
	leaderName := e.leaderAgent()
	leader := e.agents[leaderName]
	others := nonLeaders(e)
	dead, target := others[0], others[1]

	waitMetric(t, leader, `etcdmember_etcd_members{role="voter"}`, func(v float64) bool { return v == 3 })
	waitMetric(t, leader, `etcdmember_objects{state="joined"}`, func(v float64) bool { return v == 3 })
	if _, body := httpGet(t, e.agents[target.Name].MetricsURL()); strings.Contains(body, "etcdmember_etcd_members{") {
		t.Errorf("a non-leader exports the leader's membership gauges")
	}

	// A probe may have failed before the kill (a timeout on a loaded machine): only errors since count.
	const probeErrors = `etcdmember_etcd_errors_total{method="Probe"}`
	probeErrorsBefore := metricValue(t, leader, probeErrors)
	dead.Kill(t)
	waitMetric(t, leader, `etcdmember_member_healthy{member="`+dead.Name+`"`, func(v float64) bool { return v == 0 })
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	waitMetric(t, leader, `etcdmember_guard_refusals_total{reason="`+v1alpha1.ReasonQuorumAtRisk+`"}`, func(v float64) bool { return v >= 1 })
	waitMetric(t, leader, `etcdmember_leave_requests_total{outcome="refused"}`, func(v float64) bool { return v == 1 })
	waitMetric(t, leader, probeErrors, func(v float64) bool { return v > probeErrorsBefore })

	dead.Start(t)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	waitMetric(t, leader, `etcdmember_leave_requests_total{outcome="removed"}`, func(v float64) bool { return v == 1 })
	waitMetric(t, leader, `etcdmember_leave_duration_seconds_count`, func(v float64) bool { return v == 1 })
	waitMetric(t, leader, `etcdmember_etcd_members{role="voter"}`, func(v float64) bool { return v == 2 })
	waitMetric(t, leader, `etcdmember_objects{state="removed"}`, func(v float64) bool { return v == 1 })
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// waitMetric polls the agent's /metrics until the first series starting with prefix has a value
// that ok accepts.
func waitMetric(t *testing.T, a *framework.Agent, prefix string, ok func(float64) bool) {
	t.Helper()
	last := "absent"
	err := framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		_, body := httpGet(t, a.MetricsURL())
		v, found := seriesValue(body, prefix)
		if found {
			last = strconv.FormatFloat(v, 'g', -1, 64)
		}
		return found && ok(v), nil
	})
	if err != nil {
		t.Fatalf("metric %s of agent %s: last value %s", prefix, a.Name, last)
	}
}

// metricValue reads the first series of the agent's /metrics starting with prefix; 0 when there is
// none, as for a counter nothing has counted yet.
func metricValue(t *testing.T, a *framework.Agent, prefix string) float64 {
	t.Helper()
	_, body := httpGet(t, a.MetricsURL())
	v, _ := seriesValue(body, prefix)
	return v
}

// seriesValue finds the first line of the exposition text whose series starts with prefix.
func seriesValue(exposition, prefix string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		return v, err == nil
	}
	return 0, false
}
