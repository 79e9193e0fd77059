package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// prometheusPort is where a test's Prometheus serves its API, on an address of its own.
const prometheusPort = 9090

// prometheusReadyTimeout bounds a Prometheus start: it replays an empty TSDB and loads its rules.
const prometheusReadyTimeout = 60 * time.Second

// Prometheus is a real Prometheus server (bin/prometheus, built from Go modules by make testbin)
// that scrapes what its configuration says and evaluates its rule files.
type Prometheus struct {
	dir  string
	url  string
	proc *process
}

// StartPrometheus writes config (a prometheus.yml) and files (name to content; rule files, token
// files) into a directory of their own, starts Prometheus on them and waits until it is ready.
// The configuration refers to the files by bare name: Prometheus resolves them next to it.
func StartPrometheus(t TB, config string, files map[string][]byte) *Prometheus {
	t.Helper()
	bin := Binary(t, "prometheus")
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatalf("prometheus: %v", err)
		}
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	ip, err := allocateIP(prometheusPort)
	if err != nil {
		t.Fatalf("prometheus address: %v", err)
	}
	p := &Prometheus{dir: dir, url: "http://" + net.JoinHostPort(ip, strconv.Itoa(prometheusPort))}
	p.proc = newProcess(t, "prometheus", filepath.Join(dir, "prometheus.log"))
	if err := p.proc.start(bin,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+net.JoinHostPort(ip, strconv.Itoa(prometheusPort)),
	); err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	p.proc.waitReady(t, prometheusReadyTimeout, "waiting for /-/ready", func(ctx context.Context) error {
		return p.get(ctx, "/-/ready", nil)
	})
	return p
}

// Alert is one alert as Prometheus's /api/v1/alerts reports it.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	// State is "pending" (its expression holds, its for: not yet) or "firing".
	State string `json:"state"`
}

// Alerts returns the alerts Prometheus has pending or firing now.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var out struct {
		Data struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &out); err != nil {
		return nil, err
	}
	return out.Data.Alerts, nil
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query.
func (p *Prometheus) Query(ctx context.Context, query string) ([]Sample, error) {
	var out struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				// [ unix time, "value" ]
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/query?query="+url.QueryEscape(query), &out); err != nil {
		return nil, err
	}
	samples := make([]Sample, 0, len(out.Data.Result))
	for _, r := range out.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", query, r.Value[1], err)
		}
		samples = append(samples, Sample{Metric: r.Metric, Value: v})
	}
	return samples, nil
}

// Targets returns each scrape target's URL with its health ("up", "down", "unknown") and its last
// scrape error.
func (p *Prometheus) Targets(ctx context.Context) (map[string][2]string, error) {
	var out struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/targets", &out); err != nil {
		return nil, err
	}
	targets := map[string][2]string{}
	for _, t := range out.Data.ActiveTargets {
		targets[t.ScrapeURL] = [2]string{t.Health, t.LastError}
	}
	return targets, nil
}

// LogFile is Prometheus's log.
func (p *Prometheus) LogFile() string { return p.proc.logPath }

func (p *Prometheus) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if into == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
