package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestActivePeerReadsTheGauge: ActivePeer's reading of a /metrics answer, on answers shaped like
// etcd 3.6's (checked against bin/etcd: the gauge, its labels and etcd_server_id as printed
// below), and on answers it must not trust.
func TestActivePeerReadsTheGauge(t *testing.T) {
	const (
		self = 0x91ed3ca951db2f5d
		peer = 0xdfef65aafe03c226
	)
	const text = "text/plain; version=0.0.4; charset=utf-8"
	serverID := "# HELP etcd_server_id Server or member ID in hexadecimal format.\n# TYPE etcd_server_id gauge\n" +
		`etcd_server_id{server_id="91ed3ca951db2f5d"} 1` + "\n"
	gauge := func(lines ...string) string {
		return "# HELP etcd_network_active_peers The current number of active peer connections.\n# TYPE etcd_network_active_peers gauge\n" +
			strings.Join(lines, "\n") + "\n"
	}
	toPeer := func(v string) string {
		return `etcd_network_active_peers{Local="91ed3ca951db2f5d",Remote="dfef65aafe03c226"} ` + v
	}
	other := `etcd_network_active_peers{Local="91ed3ca951db2f5d",Remote="c4fadcd2f2569328"} 1`
	serve := func(status int, contentType, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	closed := closedURL(t)

	for _, tc := range []struct {
		name   string
		urls   []string
		active bool
		// problem is part of the error; "" when the read must succeed.
		problem string
	}{
		{"active", []string{serve(200, text, serverID+gauge(other, toPeer("1")))}, true, ""},
		{"deactivated", []string{serve(200, text, serverID+gauge(other, toPeer("0")))}, false, ""},
		{"never connected: no series", []string{serve(200, text, serverID+gauge(other))}, false, ""},
		{"no peers at all: no gauge", []string{serve(200, text, serverID)}, false, ""},
		{"before etcd_server_id: the gauge's Local label says who answered", []string{serve(200, text, gauge(toPeer("1")))}, true, ""},
		{"the first URL fails, the second answers", []string{closed, serve(200, text, serverID+gauge(toPeer("1")))}, true, ""},
		{"another member answered", []string{serve(200, text, strings.ReplaceAll(serverID, "91ed", "aaaa")+gauge(toPeer("1")))}, false, "answered by another member"},
		{"another member's gauge", []string{serve(200, text, gauge(strings.ReplaceAll(toPeer("1"), "91ed", "aaaa")))}, false, "answered by another member"},
		{"nothing names the member", []string{serve(200, text, "# TYPE up gauge\nup 1\n")}, false, "not etcd's metrics"},
		{"refused", []string{serve(403, "text/plain", "forbidden")}, false, "HTTP 403"},
		{"not metrics", []string{serve(200, "text/html", "<html></html>")}, false, "not Prometheus metrics"},
		{"garbled", []string{serve(200, text, "etcd_network_active_peers{Local=\n")}, false, "metrics of"},
		{"nothing listens", []string{closed}, false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(&Client{timeout: 5 * time.Second})
			defer p.Close()
			active, err := p.ActivePeer(context.Background(), Member{ID: self, ClientURLs: tc.urls}, peer)
			switch {
			case tc.problem == "" && err != nil:
				t.Fatalf("error %v, want %t", err, tc.active)
			case tc.problem == "" && active != tc.active:
				t.Fatalf("active = %t, want %t", active, tc.active)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Fatalf("active = %t, error %v; want an error saying %q", active, err, tc.problem)
			}
		})
	}
}

// TestActivePeerTimesOut: a member whose /metrics never answers costs the caller its context's
// deadline, and no more.
func TestActivePeerTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	p := NewPool(&Client{timeout: 5 * time.Second})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.ActivePeer(ctx, Member{ID: 1, ClientURLs: []string{srv.URL}}, 2)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("after %s: %v, want the context's deadline", time.Since(start), err)
	}
}

// TestActivePeerOnRealEtcd: against real etcd members, a running peer is active for the others,
// and stops being so once it is killed; the answer is checked to be the observer's own. With TLS,
// /metrics needs the client certificate, as the Pool's probes do.
func TestActivePeerOnRealEtcd(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "TLS"
		}
		t.Run(name, func(t *testing.T) {
			c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, TLS: withTLS})
			cfg := Config{Endpoints: c.Endpoints()}
			if files := c.TLS(); files != nil {
				cfg.CACert, cfg.Cert, cfg.Key = files.CA, files.ClientCert, files.ClientKey
			}
			base, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = base.Close() }()
			pool := NewPool(base)
			defer pool.Close()
			member := func(name string) Member {
				m := c.Member(name)
				return Member{ID: m.ID(), Name: name, ClientURLs: []string{m.ClientURL()}}
			}
			observer, target := member("node-1"), member("node-3")
			// waitActive polls until observer's answer about target is want, for up to 10 s: etcd
			// notices a killed peer when the next write or dial to it fails.
			waitActive := func(want bool) {
				t.Helper()
				framework.Eventually(t, 10*time.Second, 200*time.Millisecond, fmt.Sprintf("node-1 says node-3 active = %t", want),
					framework.PerAttempt(2*time.Second, func(ctx context.Context) (bool, error) {
						active, err := pool.ActivePeer(ctx, observer, target.ID)
						if err != nil || active == want {
							return err == nil, err
						}
						return false, fmt.Errorf("active = %t", active)
					}))
			}
			waitActive(true)

			// node-2's identity on node-1's URL: the answer is node-1's, not node-2's word.
			impostor := member("node-2")
			impostor.ClientURLs = observer.ClientURLs
			if _, err := pool.ActivePeer(context.Background(), impostor, target.ID); !errors.Is(err, ErrMetricsOfAnother) {
				t.Errorf("node-1's metrics read as node-2's: %v, want ErrMetricsOfAnother", err)
			}
			if withTLS {
				files := c.TLS()
				noCert, err := New(Config{Endpoints: c.Endpoints(), CACert: files.CA})
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = noCert.Close() }()
				pool := NewPool(noCert)
				defer pool.Close()
				_, err = pool.ActivePeer(context.Background(), observer, target.ID)
				if err == nil {
					t.Fatal("read /metrics of a --client-cert-auth member without a client certificate")
				}
				t.Logf("without a client certificate: %v", err)
			}

			c.Member("node-3").Kill(t)
			waitActive(false)
		})
	}
}
