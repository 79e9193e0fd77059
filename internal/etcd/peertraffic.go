package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// The metrics PeerTraffic reads, as etcd 3.5 to 3.7 export them on every client URL:
//
//	etcd_server_id{server_id="91ed3ca951db2f5d"} 1
//	etcd_network_active_peers{Local="91ed3ca951db2f5d",Remote="c4fadcd2f2569328"} 1
//	etcd_network_peer_received_bytes_total{From="c4fadcd2f2569328"} 48213
//
// IDs are hex as IDString formats them. rafthttp sets the gauge to 1 when a stream or pipeline to
// the peer connects and back to 0 when one fails (a refused dial, a reset connection), so a peer
// that was never connected has no series at all. The counter grows by every raft message received
// from the peer; rafthttp's own link heartbeats carry no sender and count under From="0".
const (
	metricServerID      = "etcd_server_id"
	metricActivePeers   = "etcd_network_active_peers"
	metricReceivedBytes = "etcd_network_peer_received_bytes_total"
)

// Traffic is what one member's metrics say about its raft link from another.
type Traffic struct {
	// Active: the member has an active raft connection to the peer. It stays true while the
	// connection is open, even when nothing comes through it (the peer frozen, its machine hung).
	Active bool
	// Received is the bytes of raft messages received from the peer since the member started.
	// Only a member the peer sends to sees it grow: raft's leader hears every voter (heartbeat
	// answers, ten a second by default), a follower hears only the leader.
	Received float64
}

// maxMetricsBytes bounds what PeerTraffic reads of one /metrics answer. etcd 3.6 sends about
// 170 kB; anything far larger is not etcd's answer.
const maxMetricsBytes = 8 << 20

// ErrMetricsOfAnother is wrapped by PeerTraffic's error when the observer's client URLs are
// answered by another member (a VIP, a shared or reused address): its word is not the observer's.
var ErrMetricsOfAnother = errors.New("metrics answered by another member")

// PeerTraffic reads what observer's own /metrics on its client URLs say about its raft link from
// member peer: etcd's view of whether peer is heard, which does not depend on the leader's own
// network path to peer. It reads within the pool's call timeout, or ctx's if shorter, with the
// pool's TLS credentials: etcd serves /metrics on a TLS client URL only to a client with a
// certificate when it runs with --client-cert-auth. It fails when no client URL of observer
// answered with metrics that observer itself exported.
func (p *Pool) PeerTraffic(ctx context.Context, observer Member, peer uint64) (Traffic, error) {
	if len(observer.ClientURLs) == 0 {
		return Traffic{}, errors.New("member has no client URLs: it has never started")
	}
	hc, err := p.metricsClient()
	if err != nil {
		return Traffic{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.base.timeout)
	defer cancel()
	var errs []error
	for _, u := range observer.ClientURLs {
		traffic, err := peerTraffic(ctx, hc, u, observer.ID, peer)
		if err == nil {
			return traffic, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	metrics.EtcdErrors.WithLabelValues("PeerTraffic").Inc()
	return Traffic{}, errors.Join(errs...)
}

// metricsClient returns the pool's HTTP client for /metrics, made at the first use: most terms
// never read a member's metrics.
func (p *Pool) metricsClient() (*http.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.http != nil {
		return p.http, nil
	}
	tlsConfig, err := p.base.cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	p.http = &http.Client{Transport: &http.Transport{
		// No proxy from the environment: the question is what the member itself says, and the
		// probes dial it directly too.
		Proxy:           nil,
		TLSClientConfig: tlsConfig,
		// One connection per member, kept between reads: an outage is re-checked every
		// --recheck-interval, and a TLS handshake each time would cost more than the read.
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
		// etcd gzips /metrics when asked (about 10 kB instead of 170 kB); the transport asks and
		// unpacks on its own.
	}}
	return p.http, nil
}

// peerTraffic reads one client URL's /metrics and looks up what observer exports about peer.
func peerTraffic(ctx context.Context, hc *http.Client, clientURL string, observer, peer uint64) (Traffic, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/metrics", nil)
	if err != nil {
		return Traffic{}, fmt.Errorf("metrics of %s: %w", clientURL, err)
	}
	// The text format: every etcd serves it, and it is what the gzip above shrinks best.
	req.Header.Set("Accept", `text/plain;version=0.0.4`)
	resp, err := hc.Do(req)
	if err != nil {
		return Traffic{}, fmt.Errorf("metrics of %s: %w", clientURL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return Traffic{}, fmt.Errorf("metrics of %s: HTTP %d", clientURL, resp.StatusCode)
	}
	format := expfmt.ResponseFormat(resp.Header)
	if format.FormatType() == expfmt.TypeUnknown {
		return Traffic{}, fmt.Errorf("metrics of %s: answered Content-Type %q, not Prometheus metrics", clientURL, resp.Header.Get("Content-Type"))
	}
	body := &io.LimitedReader{R: resp.Body, N: maxMetricsBytes + 1}
	families, err := decodeFamilies(expfmt.NewDecoder(body, format), metricServerID, metricActivePeers, metricReceivedBytes)
	if err != nil {
		return Traffic{}, fmt.Errorf("metrics of %s: %w", clientURL, err)
	}
	if body.N <= 0 {
		return Traffic{}, fmt.Errorf("metrics of %s: more than %d bytes, not etcd's metrics", clientURL, maxMetricsBytes)
	}
	traffic, err := lookUpTraffic(families, observer, peer)
	if err != nil {
		return Traffic{}, fmt.Errorf("metrics of %s: %w", clientURL, err)
	}
	return traffic, nil
}

// decodeFamilies decodes a whole metrics answer and keeps the families named.
func decodeFamilies(dec expfmt.Decoder, names ...string) (map[string]*dto.MetricFamily, error) {
	keep := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return keep, nil
		}
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if mf.GetName() == n {
				keep[n] = mf
			}
		}
	}
}

// lookUpTraffic finds observer's gauge and counter for peer. Every answer must say it is
// observer's: by etcd_server_id, or, where that is missing (before etcd 3.5), by the Local label
// of the gauge itself. An answer that names no member at all proves nothing, so it is an error,
// not "inactive". A peer never heard has no counter series: 0 bytes.
func lookUpTraffic(families map[string]*dto.MetricFamily, observer, peer uint64) (Traffic, error) {
	self, remote := IDString(observer), IDString(peer)
	identified := false
	if mf := families[metricServerID]; mf != nil {
		for _, m := range mf.GetMetric() {
			if m.GetGauge().GetValue() != 1 {
				continue
			}
			id := label(m, "server_id")
			if id != self {
				return Traffic{}, fmt.Errorf("%w: %s %s, not %s", ErrMetricsOfAnother, metricServerID, id, self)
			}
			identified = true
		}
	}
	var t Traffic
	for _, m := range families[metricActivePeers].GetMetric() {
		local := label(m, "Local")
		if local != self {
			return Traffic{}, fmt.Errorf("%w: %s{Local=%q}, not %s", ErrMetricsOfAnother, metricActivePeers, local, self)
		}
		identified = true
		if label(m, "Remote") == remote && m.GetGauge().GetValue() > 0 {
			t.Active = true
		}
	}
	if !identified {
		return Traffic{}, fmt.Errorf("neither %s nor %s names the member that answered: not etcd's metrics", metricServerID, metricActivePeers)
	}
	for _, m := range families[metricReceivedBytes].GetMetric() {
		if label(m, "From") == remote {
			t.Received = m.GetCounter().GetValue()
		}
	}
	return t, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
