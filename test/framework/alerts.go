package framework

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The monitoring config/prometheus ships, run as an operator runs it: a real Prometheus
// (StartPrometheus) on scrape.yaml filled in with static targets, evaluating rules.yaml, and
// scraping with the token of metrics-reader.yaml's ServiceAccount; then the waits on what it
// scrapes and fires. The e2e tier points it at host-process agents, the node tier at the
// DaemonSet's pod.

const (
	// ScraperNamespace and ScraperAccount name config/prometheus/metrics-reader.yaml's
	// ServiceAccount, which that file allows to get /metrics.
	ScraperNamespace = "kube-system"
	ScraperAccount   = "etcdmember-metrics-scraper"
	// ScraperSecret is the account's long-lived token Secret in metrics-reader.yaml, which a
	// token controller (kube-controller-manager's) fills and scrape.yaml says to read.
	ScraperSecret = "etcdmember-metrics-scraper-token"

	// ShortenedFor is the for: ShippedRules gives every alert whose shipped for: is not zero, so
	// that a test sees an alert fire in seconds rather than minutes.
	ShortenedFor = 5 * time.Second
	// PrometheusInterval is ShippedScrapeConfig's scrape and evaluation interval.
	PrometheusInterval = time.Second

	// rulesFile and tokenFile are the names StartShippedPrometheus gives the rules and the
	// token next to the configuration, which refers to them by these names.
	rulesFile, tokenFile = "rules.yaml", "token"
	// promPollInterval is how often the waits below ask Prometheus, or an agent, again.
	promPollInterval = 200 * time.Millisecond
)

// shippedPrometheusFile reads a file of config/prometheus.
func shippedPrometheusFile(t TB, name string) []byte {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatalf("cannot find the repository root (the directory with %s's go.mod) above the working directory", modulePath)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "prometheus", name))
	if err != nil {
		t.Fatalf("%v", err)
	}
	return data
}

// ShippedScrapeConfig is config/prometheus/scrape.yaml as an operator fills it in: these targets
// (host:port of each agent's metrics address), and the rules and token files next to the
// configuration, as StartShippedPrometheus writes them. Only the scrape and evaluation intervals
// are the test's own, PrometheusInterval.
func ShippedScrapeConfig(t TB, targets []string) string {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(shippedPrometheusFile(t, "scrape.yaml"), &cfg); err != nil {
		t.Fatalf("scrape.yaml: %v", err)
	}
	interval := PrometheusInterval.String()
	cfg["global"] = map[string]any{"scrape_interval": interval, "evaluation_interval": interval}
	cfg["rule_files"] = []string{rulesFile}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("scrape.yaml has %d scrape configs, want the one job", len(jobs))
	}
	job, _ := jobs[0].(map[string]any)
	job["static_configs"] = []any{map[string]any{"targets": targets}}
	auth, _ := job["authorization"].(map[string]any)
	if auth["credentials_file"] == nil {
		t.Fatalf("scrape.yaml's job authenticates with no credentials file: %v", job["authorization"])
	}
	auth["credentials_file"] = tokenFile
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatalf("scrape.yaml: %v", err)
	}
	return string(out)
}

// forClause matches a rule's non-zero for:.
var forClause = regexp.MustCompile(`(?m)^(\s+for: )[1-9][0-9]*[smh]$`)

// ShippedRules is config/prometheus/rules.yaml with every non-zero for: shortened to
// ShortenedFor; nothing else of the shipped rules changes.
func ShippedRules(t TB) []byte {
	t.Helper()
	return forClause.ReplaceAll(shippedPrometheusFile(t, "rules.yaml"), []byte("${1}"+ShortenedFor.String()))
}

// StartShippedPrometheus starts a Prometheus on ShippedScrapeConfig for targets, evaluating
// ShippedRules and scraping with token (the scraper's: ScraperToken, or ScraperSecret's).
func StartShippedPrometheus(t TB, targets []string, token string) *Prometheus {
	t.Helper()
	return StartPrometheus(t, ShippedScrapeConfig(t, targets),
		map[string][]byte{rulesFile: ShippedRules(t), tokenFile: []byte(token)})
}

// ScraperSecretToken is the token a token controller (kube-controller-manager's) writes into
// ScraperSecret once metrics-reader.yaml is applied: what scrape.yaml tells an operator to read.
func (k Admin) ScraperSecretToken(t TB, timeout time.Duration) string {
	t.Helper()
	var token string
	// Once a second: each attempt is a kubectl process.
	Eventually(t, timeout, time.Second, "the token controller filling "+ScraperSecret, func(context.Context) (bool, error) {
		out, err := k.Kubectl(t, "-n", ScraperNamespace, "get", "secret", ScraperSecret, "-o", "jsonpath={.data.token}")
		if err != nil {
			return false, err
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
		if err != nil {
			return false, err
		}
		token = string(raw)
		return token != "", nil
	})
	return token
}

// ScraperToken is a token of the scraper's ServiceAccount (apply metrics-reader.yaml first) from
// the TokenRequest API, as a projected token would be: for an apiserver with no token controller
// to fill ScraperSecret.
func (a *APIServer) ScraperToken(t TB) string {
	t.Helper()
	var token string
	Eventually(t, callTimeout, promPollInterval, "a token of "+ScraperNamespace+"/"+ScraperAccount,
		PerAttempt(callTimeout, Succeeds(func(ctx context.Context) error {
			tr, err := a.clientset.CoreV1().ServiceAccounts(ScraperNamespace).CreateToken(ctx, ScraperAccount,
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
				metav1.CreateOptions{})
			if err != nil {
				return err
			}
			token = tr.Status.Token
			return nil
		})))
	return token
}

// CheckMetricsAccess checks the agents' /metrics at each of addrs (host:port) over HTTPS: 401 to
// a scrape with no token, 403 to a token whose account may not get /metrics (a ServiceAccount
// kube-system/not-a-scraper it makes, so call it once per apiserver), 200 to token; and no answer
// over plain HTTP. An agent caches a review's answer but asks again after a refusal, so each case
// is polled for up to timeout, for RBAC to reach the apiserver's authorizer. It returns every
// case that did not hold.
func (a *APIServer) CheckMetricsAccess(t TB, token string, timeout time.Duration, addrs ...string) error {
	t.Helper()
	stranger := a.Token(t, "not-a-scraper", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}}})
	var errs []error
	for _, addr := range addrs {
		url := "https://" + addr + "/metrics"
		for _, c := range []struct {
			who, token string
			want       int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"a token not allowed /metrics", stranger, http.StatusForbidden},
			{"the scraper's token", token, http.StatusOK},
		} {
			var got int
			err := Poll(timeout, promPollInterval, PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
				var err error
				got, err = Scrape(ctx, url, c.token)
				return got == c.want, err
			}))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s, scrape with %s: status %d, want %d: %w", url, c.who, got, c.want, err))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		// An error is the answer hoped for: nothing speaks plain HTTP there.
		if code, _ := Scrape(ctx, "http://"+addr+"/metrics", ""); code == http.StatusOK {
			errs = append(errs, fmt.Errorf("%s served its metrics over plain HTTP on its HTTPS address", addr))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// Scrape GETs url with token as bearer token (none when empty), over HTTPS without verifying the
// certificate (an agent's default one is self-signed, made at its start), or over plain HTTP for
// an http URL, and returns the status code.
func Scrape(ctx context.Context, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// WaitTargetsUp waits up to timeout for n of Prometheus's targets to be up, fails t otherwise,
// and returns how long it waited.
func (p *Prometheus) WaitTargetsUp(t TB, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last map[string][2]string
	err := Poll(timeout, promPollInterval, PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		var err error
		if last, err = p.Targets(ctx); err != nil {
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
		t.Fatalf("Prometheus scraping %d targets: %v; targets: %v (log: %s)", n, err, last, p.LogFile())
	}
	return time.Since(start)
}

// WaitQuery waits up to timeout for the instant query's result to satisfy ok, and fails t
// otherwise.
func (p *Prometheus) WaitQuery(t TB, query string, timeout time.Duration, ok func([]Sample) bool) {
	t.Helper()
	var last []Sample
	err := Poll(timeout, promPollInterval, PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		var err error
		if last, err = p.Query(ctx, query); err != nil {
			return false, err
		}
		return ok(last), nil
	}))
	if err != nil {
		t.Fatalf("query %s: %v; last result: %v", query, err, last)
	}
}

// Firing names the alerts firing now as alertname/member ("EtcdNoFaultTolerance/" for an alert
// without a member label).
func (p *Prometheus) Firing(ctx context.Context) (map[string]bool, error) {
	alerts, err := p.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]+"/"+a.Labels["member"]] = true
		}
	}
	return out, nil
}

// WaitAlerts waits until the firing alerts (Firing) satisfy ok, at most until bound after since
// (the event that should fire or resolve them), fails t naming what otherwise, and returns how
// long after since ok held.
func (p *Prometheus) WaitAlerts(t TB, what string, since time.Time, bound time.Duration, ok func(map[string]bool) bool) time.Duration {
	t.Helper()
	var last map[string]bool
	err := Poll(bound-time.Since(since), promPollInterval, PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		firing, err := p.Firing(ctx)
		if err != nil {
			return false, err
		}
		last = firing
		return ok(firing), nil
	}))
	if err != nil {
		t.Fatalf("%s: not within %s: %v; firing: %v (log: %s)", what, bound, err, last, p.LogFile())
	}
	return time.Since(since)
}
