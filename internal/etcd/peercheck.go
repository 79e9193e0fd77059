package etcd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
)

// Header says who answered a call: the cluster and the member that served it.
type Header struct {
	ClusterID uint64
	MemberID  uint64
}

// MemberListHeader is MemberList (a linearizable read) with the answer's header: an agent that
// must tell its own cluster from another, or one member from another behind a shared address,
// needs to know who answered.
func (c *Client) MemberListHeader(ctx context.Context) ([]Member, Header, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.cli.MemberList(ctx)
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("MemberList").Inc()
		return nil, Header{}, fmt.Errorf("etcd member list: %w", err)
	}
	return membersFromProto(resp.Members), Header{ClusterID: resp.Header.ClusterId, MemberID: resp.Header.MemberId}, nil
}

// PeerURLHolder returns a member other than self whose recorded peer URLs include one of urls
// (normalized URLs). The agent refuses to publish such a URL, since the local etcd answering
// there proves nothing when another member answers for the same cluster; the leader refuses to
// make etcd record it, since etcd would refuse the update anyway.
func PeerURLHolder(members []Member, self uint64, urls []string) (Member, bool) {
	for _, m := range members {
		if m.ID == self {
			continue
		}
		for _, recorded := range m.PeerURLs {
			if n, err := peerurl.Normalize(recorded); err == nil && slices.Contains(urls, n) {
				return m, true
			}
		}
	}
	return Member{}, false
}

// PeerCheckTimeout bounds one CheckPeerURL: a peer URL that does not answer within it is as good
// as one that does not answer at all, and the registrar waits for the check.
const PeerCheckTimeout = 2 * time.Second

// PeerURLError says why a peer URL failed CheckPeerURL. Problem is worded to stay the same from
// one check to the next for the same cause (no addresses, ports or timings), so that callers can
// tell a new failure from a repeated one; Err carries the detail.
type PeerURLError struct {
	URL     string
	Problem string
	Err     error
}

func (e *PeerURLError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("peer URL %s %s", e.URL, e.Problem)
	}
	return fmt.Sprintf("peer URL %s %s: %v", e.URL, e.Problem, e.Err)
}

func (e *PeerURLError) Unwrap() error { return e.Err }

// CheckPeerURL asks etcd's peer API at url for the member list (GET <url>/members) and returns nil
// when it answers 200 for the cluster clusterID (its X-Etcd-Cluster-ID header), else a
// *PeerURLError. It uses the client's TLS files: the CA verifies the peer's certificate, and the
// client certificate, if any, is presented, as a peer listening with --peer-client-cert-auth needs.
func (c *Client) CheckPeerURL(ctx context.Context, url string, clusterID uint64) error {
	tlsConfig, err := c.cfg.tlsConfig()
	if err != nil {
		return &PeerURLError{URL: url, Problem: "could not be checked", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, PeerCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/members", nil)
	if err != nil {
		return &PeerURLError{URL: url, Problem: "is not a URL", Err: err}
	}
	// No proxy from the environment: peers dial each other directly, so that is what to check.
	// No keep-alive: the connection is not reused before the next sync.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return &PeerURLError{URL: url, Problem: "did not answer as an etcd peer", Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	header := resp.Header.Get("X-Etcd-Cluster-ID")
	switch {
	case header == "":
		return &PeerURLError{URL: url, Problem: fmt.Sprintf("answered HTTP %d without X-Etcd-Cluster-ID: it is not an etcd peer port", resp.StatusCode)}
	case resp.StatusCode != http.StatusOK:
		return &PeerURLError{URL: url, Problem: fmt.Sprintf("answered HTTP %d, not etcd's member list", resp.StatusCode)}
	}
	got, err := strconv.ParseUint(header, 16, 64)
	if err != nil {
		return &PeerURLError{URL: url, Problem: fmt.Sprintf("sent X-Etcd-Cluster-ID %q, which is not a cluster ID", header), Err: err}
	}
	if got != clusterID {
		return &PeerURLError{URL: url, Problem: fmt.Sprintf("is served by a member of etcd cluster %s, not of this cluster %s", IDString(got), IDString(clusterID))}
	}
	return nil
}
