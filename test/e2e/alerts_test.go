package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

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
	token := scraperToken(t, e)
	e.refusesScrapesWithoutTheRight(token)

	rules, err := os.ReadFile("../../config/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, a := range e.agents {
		targets = append(targets, a.MetricsAddr())
	}
	prom := framework.StartPrometheus(t, shippedScrapeConfig(t, targets),
		map[string][]byte{"rules.yaml": shortenFor(rules), "token": []byte(token)})
	waitTargetsUp(t, prom, len(targets))
	waitQuery(t, prom, "max(etcdmember_fault_tolerance)", func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	waitQuery(t, prom, "sum(etcdmember_leader)", func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	// Before the first scrapes every series was absent, and EtcdMemberNoLeadingAgent (absent
	// leader gauge) may have fired: a healthy cluster, once scraped, fires nothing.
	waitAlerts(t, prom, "no alert firing on the healthy cluster", func(a map[string]bool) bool { return len(a) == 0 }, time.Now())

	others := nonLeaders(e)
	dead, target := others[0], others[1]
	killed := time.Now()
	dead.Kill(t)
	unhealthy := "EtcdMemberUnhealthy/" + dead.Name
	took := waitAlerts(t, prom, "the dead member's alerts firing", func(a map[string]bool) bool {
		return a[unhealthy] && a["EtcdNoFaultTolerance/"]
	}, killed)
	t.Logf("EtcdMemberUnhealthy and EtcdNoFaultTolerance fired %s after the kill", took.Round(time.Millisecond))

	e.leave(target.Name)
	e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	waitQuery(t, prom, `etcdmember_leave_pending_seconds{member="`+target.Name+`",reason="QuorumAtRisk"}`,
		func(s []framework.Sample) bool { return len(s) == 1 })
	waitQuery(t, prom, "max(etcdmember_leave_requests_pending)", func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 1 })
	// Withdrawn before the member comes back: the leave would otherwise go through and leave two
	// voters, whose fault tolerance is 0 again.
	e.kubectl("patch", "etcdmembers.etcdmember.io", target.Name, "--type", "merge", "-p", `{"spec":{"leave":false}}`)
	waitQuery(t, prom, "max(etcdmember_leave_requests_pending)", func(s []framework.Sample) bool { return len(s) == 1 && s[0].Value == 0 })

	back := time.Now()
	dead.Start(t)
	took = waitAlerts(t, prom, "both alerts resolved", func(a map[string]bool) bool {
		return !a[unhealthy] && !a["EtcdNoFaultTolerance/"]
	}, back)
	t.Logf("both alerts resolved %s after the member came back", took.Round(time.Millisecond))
}

// shippedScrapeConfig is config/prometheus/scrape.yaml as an operator would fill it in: these
// targets, and the rule and token files next to the configuration. Only the scrape and
// evaluation intervals are the test's own, 1 s.
func shippedScrapeConfig(t *testing.T, targets []string) string {
	t.Helper()
	raw, err := os.ReadFile("../../config/prometheus/scrape.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	cfg["rule_files"] = []string{"rules.yaml"}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("scrape.yaml has %d scrape configs, want the one job", len(jobs))
	}
	job := jobs[0].(map[string]any)
	job["static_configs"] = []any{map[string]any{"targets": targets}}
	auth, _ := job["authorization"].(map[string]any)
	if auth["credentials_file"] == nil {
		t.Fatalf("scrape.yaml's job authenticates with no credentials file: %v", job["authorization"])
	}
	auth["credentials_file"] = "token"
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// shortenFor shortens every non-zero for: of a rules file to 5 s, so that a test sees an alert
// fire in seconds rather than minutes; nothing else of the shipped rules changes.
func shortenFor(rules []byte) []byte {
	return regexp.MustCompile(`(?m)^(\s+for: )[1-9][0-9]*[smh]$`).ReplaceAll(rules, []byte("${1}5s"))
}

// scraperToken is a token of config/prometheus/metrics-reader.yaml's ServiceAccount, which that
// file allows to get /metrics. The test bed runs no token controller to fill the account's
// Secret, so the token comes from the TokenRequest API, as a projected token would.
func scraperToken(t *testing.T, e *env) string {
	t.Helper()
	var token string
	e.retry("token of etcdmember-metrics-scraper", func(ctx context.Context) error {
		tr, err := e.api.Clientset().CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "etcdmember-metrics-scraper",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		token = tr.Status.Token
		return nil
	})
	return token
}

// refusesScrapesWithoutTheRight: over HTTPS, an agent answers 401 to a scrape with no token, 403
// to a token whose account may not get /metrics, and 200 to the scraper's token.
func (e *env) refusesScrapesWithoutTheRight(token string) {
	e.t.Helper()
	stranger := e.api.Token(e.t, "not-a-scraper", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}}})
	for name, a := range e.agents {
		url := "https://" + a.MetricsAddr() + "/metrics"
		for _, tc := range []struct {
			who, token string
			want       int
		}{{"no token", "", http.StatusUnauthorized}, {"a token not allowed /metrics", stranger, http.StatusForbidden}, {"the scraper's token", token, http.StatusOK}} {
			// The agent caches a review's answer; a refusal is asked again, so wait for RBAC to
			// reach the apiserver's authorizer rather than failing on the first try.
			var got int
			err := framework.Poll(settle, pollEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
				var err error
				got, err = scrape(ctx, url, tc.token)
				return got == tc.want, err
			}))
			if err != nil {
				e.t.Errorf("agent %s, scrape with %s: status %d, want %d: %v", name, tc.who, got, tc.want, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		// An error is the answer hoped for: nothing speaks plain HTTP there.
		if code, _ := scrape(ctx, "http://"+a.MetricsAddr()+"/metrics", ""); code == http.StatusOK {
			e.t.Errorf("agent %s served its metrics over plain HTTP on its HTTPS address", name)
		}
		cancel()
	}
}

// scrape GETs url with token as bearer token (none when empty), over HTTPS without verifying
// the certificate, or over plain HTTP for an http URL, and returns the status code.
func scrape(ctx context.Context, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The agent's certificate is self-signed, made at its start.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func waitTargetsUp(t *testing.T, prom *framework.Prometheus, n int) {
	t.Helper()
	var last map[string][2]string
	err := framework.Poll(settle, pollEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		var err error
		if last, err = prom.Targets(ctx); err != nil {
			return false, err
		}
		up := 0
		for _, h := range last {
			if h[0] == "up" {
				up++
			}
		}
		return up == n, nil
	}))
	if err != nil {
		t.Fatalf("Prometheus scraping %d agents: %v; targets: %v (log: %s)", n, err, last, prom.LogFile())
	}
}

func waitQuery(t *testing.T, prom *framework.Prometheus, query string, ok func([]framework.Sample) bool) {
	t.Helper()
	var last []framework.Sample
	err := framework.Poll(settle, pollEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		var err error
		if last, err = prom.Query(ctx, query); err != nil {
			return false, err
		}
		return ok(last), nil
	}))
	if err != nil {
		t.Fatalf("query %s: %v; last result: %v", query, err, last)
	}
}

// firing names the alerts firing now as alertname/member.
func firing(t *testing.T, prom *framework.Prometheus) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	alerts, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatalf("reading Prometheus's alerts: %v", err)
	}
	out := map[string]bool{}
	for _, a := range alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]+"/"+a.Labels["member"]] = true
		}
	}
	return out
}

// waitAlerts polls the firing alerts until ok holds, within alertBound of since, and returns how
// long after since it held.
func waitAlerts(t *testing.T, prom *framework.Prometheus, what string, ok func(map[string]bool) bool, since time.Time) time.Duration {
	t.Helper()
	var last map[string]bool
	err := framework.Poll(alertBound-time.Since(since), pollEvery, func(context.Context) (bool, error) {
		last = firing(t, prom)
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %v; firing: %v", what, alertBound, err, last)
	}
	return time.Since(since)
}
