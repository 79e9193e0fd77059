// Package alerts checks the shipped alerting rules (config/prometheus) with Prometheus's own
// promtool, and checks that they only name what etcdmember exports and link to runbooks that
// exist. test/e2e/alerts_test.go fires them in a real Prometheus.
package alerts

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const dir = "../../config/prometheus"

// ruleFile is what the tests read of a rules file.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(framework.Binary(t, "promtool"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestRulesCheck: both shipped files pass promtool check rules; the PrometheusRule's spec is
// what promtool reads, since the Operator hands exactly that to Prometheus.
func TestRulesCheck(t *testing.T) {
	promtool(t, "check", "rules", filepath.Join(dir, "rules.yaml"))

	raw, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Spec       json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rule.APIVersion, rule.Kind)
	}
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(spec, rule.Spec, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", spec)
}

// TestScrapeConfigChecks: the stand-alone scrape configuration passes promtool check config once
// its files are where it says (here a directory of the test's own), and scrapes over HTTPS with
// a bearer token.
func TestScrapeConfigChecks(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dir, "scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const files = "/etc/prometheus/etcdmember/"
	if !strings.Contains(string(raw), files) {
		t.Fatalf("scrape.yaml no longer keeps its files in %s; update this test", files)
	}
	tmp := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"rules.yaml":  rules,
		"token":       []byte("a-token"),
		"scrape.yaml": []byte(strings.ReplaceAll(string(raw), files, tmp+"/")),
	} {
		if err := os.WriteFile(filepath.Join(tmp, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	promtool(t, "check", "config", filepath.Join(tmp, "scrape.yaml"))

	var cfg struct {
		ScrapeConfigs []struct {
			Scheme        string `json:"scheme"`
			Authorization struct {
				Type            string `json:"type"`
				CredentialsFile string `json:"credentials_file"`
			} `json:"authorization"`
		} `json:"scrape_configs"`
	}
	readYAML(t, filepath.Join(dir, "scrape.yaml"), &cfg)
	for _, c := range cfg.ScrapeConfigs {
		if c.Scheme != "https" || c.Authorization.Type != "Bearer" || c.Authorization.CredentialsFile == "" {
			t.Errorf("scrape config %+v: want https with a bearer token from a file", c)
		}
	}
}

// TestOperatorObjectsMatchTheDaemonSet: podmonitor.yaml and prometheusrule.yaml decode strictly
// as the Prometheus Operator's types (a misspelt field fails), and the PodMonitor selects the
// pods of deploy/daemonset by their labels and named port, with the token Secret that
// metrics-reader.yaml creates.
func TestOperatorObjectsMatchTheDaemonSet(t *testing.T) {
	var rule monitoringv1.PrometheusRule
	readStrict(t, filepath.Join(dir, "prometheusrule.yaml"), &rule)
	if len(rule.Spec.Groups) == 0 || len(rule.Spec.Groups[0].Rules) != len(alerts(t)) {
		t.Errorf("the PrometheusRule has groups %+v, want rules.yaml's %d alerts", rule.Spec.Groups, len(alerts(t)))
	}
	var pm monitoringv1.PodMonitor
	readStrict(t, filepath.Join(dir, "podmonitor.yaml"), &pm)
	var ds appsv1.DaemonSet
	readStrict(t, "../../deploy/daemonset/etcdmember-agent.yaml", &ds)
	selector, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !selector.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("the PodMonitor's selector %s does not select the DaemonSet's pods %v", selector, ds.Spec.Template.Labels)
	}
	ports := map[string]bool{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
	}
	secret := readSecretName(t)
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if ep.Port == nil || !ports[*ep.Port] {
			t.Errorf("the PodMonitor scrapes port %v, which the DaemonSet's pods do not name (%v)", ep.Port, ports)
		}
		if ep.Scheme == nil || *ep.Scheme != "https" {
			t.Errorf("the PodMonitor scrapes with scheme %v, want https", ep.Scheme)
		}
		if ep.Authorization == nil || ep.Authorization.Credentials == nil || ep.Authorization.Credentials.Name != secret {
			t.Errorf("the PodMonitor authenticates with %+v, want the token Secret %s", ep.Authorization, secret)
		}
	}
}

// readSecretName returns the name of the token Secret metrics-reader.yaml creates.
func readSecretName(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "metrics-reader.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		var s corev1.Secret
		if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatal(err)
		}
		if s.Kind == "Secret" && s.Type == corev1.SecretTypeServiceAccountToken {
			return s.Name
		}
	}
	t.Fatal("metrics-reader.yaml creates no ServiceAccount token Secret")
	return ""
}

// TestRulesUnitTests runs config/prometheus/rules_test.yaml, and checks that it tests every alert
// both firing and silent.
func TestRulesUnitTests(t *testing.T) {
	promtool(t, "test", "rules", filepath.Join(dir, "rules_test.yaml"))

	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				AlertName string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, filepath.Join(dir, "rules_test.yaml"), &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				silent[a.AlertName] = true
			}
		}
	}
	for _, alert := range alerts(t) {
		if !fires[alert] || !silent[alert] {
			t.Errorf("rules_test.yaml has alert %s firing: %t, silent: %t; want a case of each", alert, fires[alert], silent[alert])
		}
	}
}

// TestRulesNameWhatEtcdmemberExports: every alert has a severity, a summary and a runbook_url
// whose anchor is a heading of docs/runbooks.md, and every etcdmember_ metric it reads is one
// internal/metrics defines.
func TestRulesNameWhatEtcdmemberExports(t *testing.T) {
	src, err := os.ReadFile("../../internal/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`Name:\s+"(etcdmember_[a-z_]+)"`).FindAllSubmatch(src, -1) {
		defined[string(m[1])] = true
	}
	anchors := runbookAnchors(t)
	const runbooks = "https://github.com/etcdmember/kubectl-etcdmember/blob/main/docs/runbooks.md#"

	var f ruleFile
	readYAML(t, filepath.Join(dir, "rules.yaml"), &f)
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: severity %q, summary %q; want both", r.Alert, r.Labels["severity"], r.Annotations["summary"])
			}
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbooks)
			if !ok || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a section of docs/runbooks.md", r.Alert, url)
			}
			for _, name := range regexp.MustCompile(`etcdmember_[a-z_]+`).FindAllString(r.Expr, -1) {
				if !defined[name] {
					t.Errorf("alert %s reads %s, which internal/metrics does not define", r.Alert, name)
				}
			}
		}
	}
}

// alerts lists the alert names of rules.yaml.
func alerts(t *testing.T) []string {
	var f ruleFile
	readYAML(t, filepath.Join(dir, "rules.yaml"), &f)
	var names []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	if len(names) == 0 {
		t.Fatal("rules.yaml defines no alert")
	}
	return names
}

// runbookAnchors returns the anchors GitHub gives the headings of docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	raw, err := os.ReadFile("../../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	fenced := false
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		// A "#" in a code block is a shell comment, not a heading.
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(title, ""), " ", "-")] = true
	}
	return anchors
}

// readYAML decodes the file into what the test reads of it; readStrict also fails on any field
// into does not have.
func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	decodeFile(t, path, func(raw []byte) error { return yaml.Unmarshal(raw, into) })
}

func readStrict(t *testing.T, path string, into any) {
	t.Helper()
	decodeFile(t, path, func(raw []byte) error { return yaml.UnmarshalStrict(raw, into) })
}

func decodeFile(t *testing.T, path string, decode func([]byte) error) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := decode(raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
