package etcd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestPeerTrafficReadsTheMetrics: PeerTraffic's reading of a /metrics answer, on answers shaped
// like etcd 3.6's and 3.7's (checked against bin/etcd: the gauge, the counter, their labels and
// etcd_server_id as printed below), and on answers it must not trust.
func TestPeerTrafficReadsTheMetrics(t *testing.T) {
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
	received := "# HELP etcd_network_peer_received_bytes_total The total number of bytes received from peers.\n# TYPE etcd_network_peer_received_bytes_total counter\n" +
		`etcd_network_peer_received_bytes_total{From="0"} 120` + "\n" +
		`etcd_network_peer_received_bytes_total{From="c4fadcd2f2569328"} 9000` + "\n" +
		`etcd_network_peer_received_bytes_total{From="dfef65aafe03c226"} 48213` + "\n"
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
		name string
		urls []string
		want Traffic
		// problem is part of the error; "" when the read must succeed.
		problem string
	}{
		{"active", []string{serve(200, text, serverID+gauge(other, toPeer("1"))+received)}, Traffic{Active: true, Received: 48213}, ""},
		{"deactivated", []string{serve(200, text, serverID+gauge(other, toPeer("0"))+received)}, Traffic{Received: 48213}, ""},
		{"never connected: no series", []string{serve(200, text, serverID+gauge(other))}, Traffic{}, ""},
		{"no peers at all: no gauge", []string{serve(200, text, serverID)}, Traffic{}, ""},
		{"before etcd_server_id: the gauge's Local label says who answered", []string{serve(200, text, gauge(toPeer("1"))+received)}, Traffic{Active: true, Received: 48213}, ""},
		{"the first URL fails, the second answers", []string{closed, serve(200, text, serverID+gauge(toPeer("1")))}, Traffic{Active: true}, ""},
		{"another member answered", []string{serve(200, text, strings.ReplaceAll(serverID, "91ed", "aaaa")+gauge(toPeer("1")))}, Traffic{}, "answered by another member"},
		{"another member's gauge", []string{serve(200, text, gauge(strings.ReplaceAll(toPeer("1"), "91ed", "aaaa")))}, Traffic{}, "answered by another member"},
		{"nothing names the member", []string{serve(200, text, "# TYPE up gauge\nup 1\n"+received)}, Traffic{}, "not etcd's metrics"},
		{"refused", []string{serve(403, "text/plain", "forbidden")}, Traffic{}, "HTTP 403"},
		{"not metrics", []string{serve(200, "text/html", "<html></html>")}, Traffic{}, "not Prometheus metrics"},
		{"garbled", []string{serve(200, text, "etcd_network_active_peers{Local=\n")}, Traffic{}, "metrics of"},
		{"nothing listens", []string{closed}, Traffic{}, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(&Client{timeout: 5 * time.Second})
			defer p.Close()
			got, err := p.PeerTraffic(context.Background(), Member{ID: self, ClientURLs: tc.urls}, peer)
			switch {
			case tc.problem == "" && err != nil:
				t.Fatalf("error %v, want %+v", err, tc.want)
			case tc.problem == "" && got != tc.want:
				t.Fatalf("traffic = %+v, want %+v", got, tc.want)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Fatalf("traffic = %+v, error %v; want an error saying %q", got, err, tc.problem)
			}
		})
	}
}

// TestPeerTrafficTimesOut: a member whose /metrics never answers costs the caller its context's
// deadline, and no more.
func TestPeerTrafficTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	p := NewPool(&Client{timeout: 5 * time.Second})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.PeerTraffic(ctx, Member{ID: 1, ClientURLs: []string{srv.URL}}, 2)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("after %s: %v, want the context's deadline", time.Since(start), err)
	}
}

// TestPeerTrafficOnRealEtcd: against real etcd members, what the dead-member policy relies on.
// etcd's leader receives from a running follower all the time; once the follower is frozen
// (SIGSTOP: its connections stay open) the leader still counts it active but receives nothing
// from it, and once it is killed it is no longer active. The answer is checked to be the
// observer's own, and with TLS /metrics needs the client certificate, as the Pool's probes do.
func TestPeerTrafficOnRealEtcd(t *testing.T) {
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
			member := func(m *framework.Member) Member {
				return Member{ID: m.ID(), Name: m.Name, ClientURLs: []string{m.ClientURL()}}
			}
			leader := c.Leader(t)
			var follower *framework.Member
			for _, m := range c.Members() {
				if m != leader {
					follower = m
				}
			}
			observer, target := member(leader), member(follower)
			read := func() Traffic {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				traffic, err := pool.PeerTraffic(ctx, observer, target.ID)
				if err != nil {
					t.Fatal(err)
				}
				return traffic
			}
			// heardOver reads twice, window apart, and tells whether the leader received from
			// the follower in between; the gauge must say active at both reads.
			heardOver := func(window time.Duration) bool {
				t.Helper()
				before := read()
				time.Sleep(window)
				after := read()
				if !before.Active || !after.Active {
					t.Fatalf("%s not active for the leader: %+v then %+v", follower.Name, before, after)
				}
				return after.Received > before.Received
			}
			// Raft's leader sends heartbeats every 100 ms, each answered: half a second is five.
			if !heardOver(500 * time.Millisecond) {
				t.Fatalf("the leader received nothing from running %s in 500 ms", follower.Name)
			}

			// Another member's identity on the leader's URL: the answer is the leader's, not its word.
			impostor := member(follower)
			impostor.ClientURLs = observer.ClientURLs
			if _, err := pool.PeerTraffic(context.Background(), impostor, target.ID); !errors.Is(err, ErrMetricsOfAnother) {
				t.Errorf("the leader's metrics read as %s's: %v, want ErrMetricsOfAnother", follower.Name, err)
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
				_, err = pool.PeerTraffic(context.Background(), observer, target.ID)
				if err == nil {
					t.Fatal("read /metrics of a --client-cert-auth member without a client certificate")
				}
				t.Logf("without a client certificate: %v", err)
			}

			// Frozen: the connection stays open, so the gauge stays 1, but nothing comes.
			follower.Pause(t)
			time.Sleep(200 * time.Millisecond) // what was in flight when it stopped
			if heardOver(2 * time.Second) {
				t.Fatalf("the leader received from %s while it was stopped", follower.Name)
			}

			follower.Kill(t)
			framework.Eventually(t, 10*time.Second, 200*time.Millisecond, "the leader no longer counts the killed follower active",
				framework.PerAttempt(2*time.Second, func(ctx context.Context) (bool, error) {
					traffic, err := pool.PeerTraffic(ctx, observer, target.ID)
					return err == nil && !traffic.Active, err
				}))
		})
	}
}
