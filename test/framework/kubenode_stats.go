package framework

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// kubeletPort is where the kubelet serves its authenticated API (the default of --port).
const kubeletPort = "10250"

// ServingCertFile is the kubelet's self-signed serving certificate, with the CA that signed it:
// it serves no certificate of its own, so it wrote one to --cert-dir at its first start.
func (n *KubeletNode) ServingCertFile() string { return filepath.Join(n.dir, "pki", "kubelet.crt") }

// KubeletStats reads one kubelet's summary API (/stats/summary), as metrics-server and
// `kubectl top` do: over HTTPS, the kubelet's certificate verified, with a client certificate the
// apiserver's CA signed and RBAC allows get on nodes/stats and nothing else.
type KubeletStats struct {
	url    string
	client *http.Client
}

// ContainerUsage is one container's CPU and memory as the kubelet's summary API reports them:
// cadvisor's sample (taken at its housekeeping interval, not at the request), not a reading made
// for this call.
type ContainerUsage struct {
	Name string
	// Started is the container's start, which changes when the kubelet restarts it.
	Started time.Time
	// MemoryTime and CPUTime are when the kubelet took the samples (one-second resolution).
	MemoryTime, CPUTime time.Time
	// WorkingSetBytes is what the kubelet evicts and `kubectl top` reports by: the cgroup's usage
	// less its inactive file pages. UsageBytes includes them; RSSBytes is anonymous memory.
	WorkingSetBytes, UsageBytes, RSSBytes uint64
	// UsageNanoCores is the CPU rate between the kubelet's last two samples;
	// UsageCoreNanoSeconds the CPU time since the container started.
	UsageNanoCores, UsageCoreNanoSeconds uint64
}

// Stats returns a reader of the node's summary API, with a credential of its own (the user
// kubelet-stats:<node>). Call it once per node.
func (n *KubeletNode) Stats(t TB) *KubeletStats {
	t.Helper()
	cfg, _ := n.nc.API.Restricted(t, "kubelet-stats:"+n.Name, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes/stats"}, Verbs: []string{"get"}},
	})
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatalf("node %s: kubelet client: %v", n.Name, err)
	}
	// The kubelet's certificate is its own, not the apiserver CA's; it names the node.
	pem, err := os.ReadFile(n.ServingCertFile())
	if err != nil {
		t.Fatalf("node %s: kubelet serving certificate: %v", n.Name, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("node %s: no certificate in %s", n.Name, n.ServingCertFile())
	}
	tlsCfg.RootCAs = roots
	tlsCfg.ServerName = n.Name
	return &KubeletStats{
		url:    "https://" + net.JoinHostPort(n.IP, kubeletPort) + "/stats/summary?only_cpu_and_memory=true",
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: callTimeout},
	}
}

// kubeletSummary is the part of the kubelet's stats/v1alpha1 Summary that Pod reads (the kubelet
// module is not a dependency of this one).
type kubeletSummary struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		Containers []struct {
			Name      string    `json:"name"`
			StartTime time.Time `json:"startTime"`
			CPU       *struct {
				Time                 time.Time `json:"time"`
				UsageNanoCores       *uint64   `json:"usageNanoCores"`
				UsageCoreNanoSeconds *uint64   `json:"usageCoreNanoSeconds"`
			} `json:"cpu"`
			Memory *struct {
				Time            time.Time `json:"time"`
				UsageBytes      *uint64   `json:"usageBytes"`
				WorkingSetBytes *uint64   `json:"workingSetBytes"`
				RSSBytes        *uint64   `json:"rssBytes"`
			} `json:"memory"`
		} `json:"containers"`
	} `json:"pods"`
}

// Pod returns the usage of each container of the pod, by the kubelet's latest samples. A pod the
// kubelet has no stats for yet, or a container without CPU or memory figures (it just started),
// is an error.
func (s *KubeletStats) Pod(ctx context.Context, namespace, name string) ([]ContainerUsage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet summary: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("kubelet summary: %s: %s", resp.Status, body)
	}
	var sum kubeletSummary
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
		return nil, fmt.Errorf("kubelet summary: %w", err)
	}
	for _, p := range sum.Pods {
		if p.PodRef.Namespace != namespace || p.PodRef.Name != name {
			continue
		}
		var out []ContainerUsage
		for _, c := range p.Containers {
			if c.CPU == nil || c.Memory == nil || c.CPU.UsageCoreNanoSeconds == nil || c.Memory.WorkingSetBytes == nil {
				return nil, fmt.Errorf("kubelet summary: container %s of pod %s/%s has no CPU or memory figures yet", c.Name, namespace, name)
			}
			out = append(out, ContainerUsage{
				Name: c.Name, Started: c.StartTime, MemoryTime: c.Memory.Time, CPUTime: c.CPU.Time,
				WorkingSetBytes: *c.Memory.WorkingSetBytes, UsageBytes: ptr.Deref(c.Memory.UsageBytes, 0), RSSBytes: ptr.Deref(c.Memory.RSSBytes, 0),
				UsageNanoCores: ptr.Deref(c.CPU.UsageNanoCores, 0), UsageCoreNanoSeconds: *c.CPU.UsageCoreNanoSeconds,
			})
		}
		return out, nil
	}
	return nil, fmt.Errorf("kubelet summary: no pod %s/%s", namespace, name)
}
