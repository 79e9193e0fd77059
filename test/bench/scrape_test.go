//go:build bench

package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// families is one scrape of a Prometheus endpoint, by metric name.
type families map[string]*dto.MetricFamily

func parseFamilies(body []byte) (families, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return fams, nil
}

// scrapeURL reads a plain-HTTP /metrics endpoint: an agent's, or an etcd member's client URL.
func scrapeURL(ctx context.Context, url string) (families, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return parseFamilies(body)
}

// scrapeAPIServer reads the apiserver's own /metrics with the admin credential.
func (e *env) scrapeAPIServer(ctx context.Context) (families, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	body, err := e.api.Clientset().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET apiserver /metrics: %w", err)
	}
	return parseFamilies(body)
}

// sumBy adds up the samples of a counter or gauge per key; key picks a sample's key from its
// labels, or rejects the sample.
func (f families) sumBy(name string, key func(labels map[string]string) (string, bool)) map[string]float64 {
	out := map[string]float64{}
	fam, ok := f[name]
	if !ok {
		return out
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if k, keep := key(labels); keep {
			out[k] += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return out
}

// sum adds up the samples of name whose labels include every pair of match (label, value, ...).
func (f families) sum(name string, match ...string) float64 {
	return f.sumBy(name, func(labels map[string]string) (string, bool) {
		for i := 0; i+1 < len(match); i += 2 {
			if labels[match[i]] != match[i+1] {
				return "", false
			}
		}
		return "", true
	})[""]
}

// mustScrape scrapes an agent, failing the test on error.
func (e *env) mustScrape(ctx context.Context, a *framework.Agent) families {
	e.t.Helper()
	f, err := scrapeURL(ctx, a.MetricsURL())
	if err != nil {
		e.t.Fatalf("agent %s: %v", a.Name, err)
	}
	return f
}

// memberRemoveErrors sums the failed MemberRemove calls every agent counted.
func (e *env) memberRemoveErrors() float64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var n float64
	for _, a := range e.agents {
		n += e.mustScrape(ctx, a).sum("etcdmember_etcd_errors_total", "method", "MemberRemove")
	}
	return n
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procUsage is what the kernel accounts to a process.
type procUsage struct {
	cpu time.Duration
	rss int64 // bytes
}

// agentPIDs finds each agent's process by its command line, which names its member's client
// URL: the framework keeps PIDs to itself.
func (e *env) agentPIDs() map[string]int {
	e.t.Helper()
	byURL := map[string]string{}
	for _, m := range e.cluster.Members() {
		byURL["--etcd-endpoints="+m.ClientURL()] = m.Name
	}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		e.t.Fatal(err)
	}
	pids := map[string]int{}
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue // exited meanwhile, or not ours to read
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != "kubectl-etcdmember" || args[1] != "serve" {
			continue
		}
		for _, arg := range args {
			if name, ok := byURL[arg]; ok {
				pids[name], _ = strconv.Atoi(filepath.Base(dir))
			}
		}
	}
	if len(pids) != len(e.agents) {
		e.t.Fatalf("found %d agent processes, want %d: %v", len(pids), len(e.agents), pids)
	}
	return pids
}

func readUsage(pid int) (procUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, err
	}
	// The command name in parentheses may hold spaces; the fields after it do not. utime and
	// stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
	_, rest, _ := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	rss, err := vmRSS(pid)
	if err != nil {
		return procUsage{}, err
	}
	return procUsage{cpu: time.Duration(utime+stime) * time.Second / clockTicks, rss: rss}, nil
}

func vmRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}
