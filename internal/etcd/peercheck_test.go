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
