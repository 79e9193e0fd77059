package etcd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckPeerURL(t *testing.T) {
	const cluster = 0xcdf818194e3a8c32
	serve := func(status int, clusterHeader string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/members" || r.Method != http.MethodGet {
				http.Error(w, "bad path", http.StatusBadRequest)
				return
			}
			if clusterHeader != "" {
				w.Header().Set("X-Etcd-Cluster-ID", clusterHeader)
			}
			w.WriteHeader(status)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	closed := closedURL(t)

	c := &Client{}
	cases := []struct {
		name, url, problem string // problem "" means the check passes
	}{
		{"this cluster", serve(http.StatusOK, IDString(cluster)), ""},
		{"another cluster", serve(http.StatusOK, "1"), "not of this cluster"},
		{"not etcd", serve(http.StatusOK, ""), "not an etcd peer port"},
		{"an error status", serve(http.StatusInternalServerError, IDString(cluster)), "answered HTTP 500"},
		{"a bad header", serve(http.StatusOK, "xyz"), "not a cluster ID"},
		{"nothing listens", closed, "did not answer"},
	}
	for _, tc := range cases {
		err := c.CheckPeerURL(context.Background(), tc.url, cluster)
		var pe *PeerURLError
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.problem == "":
		case !errors.As(err, &pe) || !strings.Contains(pe.Problem, tc.problem) || pe.URL != tc.url:
			t.Errorf("%s: got %v, want a *PeerURLError about %s saying %q", tc.name, err, tc.url, tc.problem)
		}
	}
}

// TestPeerURLHolder: another member's recorded URL, compared normalized, is held; the member's
// own never is.
func TestPeerURLHolder(t *testing.T) {
	members := []Member{
		{ID: 1, Name: "node-1", PeerURLs: []string{"http://10.0.0.1:2380"}},
		{ID: 2, Name: "node-2", PeerURLs: []string{"HTTP://[2001:DB8::0:2]:02380"}},
	}
	cases := []struct {
		urls   []string
		self   uint64
		holder uint64 // 0: none
	}{
		{[]string{"http://10.0.0.1:2380"}, 2, 1},
		{[]string{"http://10.0.0.1:2380"}, 1, 0}, // its own record
		{[]string{"http://[2001:db8::2]:2380"}, 1, 2},
		{[]string{"http://10.0.0.3:2380"}, 1, 0},
		{[]string{"http://[2001:db8::2]:2380", "http://10.0.0.9:2380"}, 2, 0},
		{[]string{"http://10.0.0.9:2380", "http://10.0.0.1:2380"}, 2, 1},
	}
	for _, tc := range cases {
		m, held := PeerURLHolder(members, tc.self, tc.urls)
		if held != (tc.holder != 0) || m.ID != tc.holder {
			t.Errorf("PeerURLHolder(%v, self %d) = %d, %v; want %d", tc.urls, tc.self, m.ID, held, tc.holder)
		}
	}
}
