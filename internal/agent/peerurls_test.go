package agent

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestNormalizePeerURL(t *testing.T) {
	cases := []struct {
		in, want string // want "" means an error
	}{
		{"http://10.0.0.1:2380", "http://10.0.0.1:2380"},
		{"https://node-1.example.com:2380", "https://node-1.example.com:2380"},
		{"HTTPS://Node-1.Example.COM:02380/", "https://node-1.example.com:2380"},
		{"http://[2001:DB8::0:1]:2380", "http://[2001:db8::1]:2380"},
		{"http://[::ffff:10.0.0.1]:2380", "http://[::ffff:10.0.0.1]:2380"},
		{"http://under_score:1", "http://under_score:1"},
		{"http://10.0.0.1", ""},                 // no port
		{"http://10.0.0.1:", ""},                // empty port
		{"http://10.0.0.1:0", ""},               // port 0
		{"http://10.0.0.1:65536", ""},           // port out of range
		{"http://:2380", ""},                    // no host
		{"unix://etcd.sock:2380", ""},           // scheme
		{"10.0.0.1:2380", ""},                   // no scheme
		{"", ""},                                // empty
		{"http://u:p@10.0.0.1:2380", ""},        // user info
		{"http://10.0.0.1:2380/peer", ""},       // path
		{"http://10.0.0.1:2380?x=1", ""},        // query
		{"http://10.0.0.1:2380?", ""},           // empty query
		{"http://10.0.0.1:2380#", ""},           // fragment
		{"http://[fe80::1%25eth0]:2380", ""},    // IPv6 zone
		{"http://a%20b:2380", ""},               // escaped space in host
		{"http://10.0.0.1:2380,http://x:1", ""}, // a list is not one URL
	}
	for _, tc := range cases {
		got, err := normalizePeerURL(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("normalizePeerURL(%q) = %q, want an error", tc.in, got)
		case tc.want != "" && err != nil:
			t.Errorf("normalizePeerURL(%q): %v", tc.in, err)
		case got != tc.want:
			t.Errorf("normalizePeerURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNormalizePeerURLs(t *testing.T) {
	got, err := normalizePeerURLs([]string{" http://b:1", "http://a:1", "HTTP://A:1"})
	if err != nil || !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Errorf("got %q, %v; want a sorted set", got, err)
	}
	if got, err := normalizePeerURLs(nil); err != nil || len(got) != 0 {
		t.Errorf("no URLs: got %q, %v; want none and no error", got, err)
	}
	_, err = normalizePeerURLs([]string{"http://a", "http://a:1", "ftp://b:1"})
	if err == nil || !strings.Contains(err.Error(), `"http://a"`) || !strings.Contains(err.Error(), `"ftp://b:1"`) {
		t.Errorf("want an error naming both bad URLs, got %v", err)
	}
}

func TestSamePeerURLs(t *testing.T) {
	want := []string{"http://10.0.0.1:2380", "http://10.0.0.2:2380"}
	cases := []struct {
		recorded []string
		same     bool
	}{
		{[]string{"http://10.0.0.2:2380", "http://10.0.0.1:2380"}, true},
		{[]string{"http://10.0.0.1:2380/", "HTTP://10.0.0.2:2380", "http://10.0.0.1:2380"}, true},
		{[]string{"http://10.0.0.1:2380"}, false},
		{[]string{"http://10.0.0.1:2380", "http://10.0.0.3:2380"}, false},
		{[]string{"http://10.0.0.1:2380", "http://10.0.0.2:2380", "http://10.0.0.3:2380"}, false},
		{nil, false},
		{[]string{"not a url", "http://10.0.0.1:2380"}, false},
	}
	for _, tc := range cases {
		if got := samePeerURLs(tc.recorded, want); got != tc.same {
			t.Errorf("samePeerURLs(%q) = %v, want %v", tc.recorded, got, tc.same)
		}
	}
}

func TestValidateAdvertisePeerURLs(t *testing.T) {
	opts := DefaultOptions()
	opts.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
	opts.AdvertisePeerURLs = []string{"http://10.0.0.1:2380"}
	if err := opts.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	opts.AdvertisePeerURLs = []string{"http://10.0.0.1"}
	if err := opts.Validate(); err == nil || !strings.Contains(err.Error(), "--advertise-peer-urls") {
		t.Errorf("want an error naming --advertise-peer-urls, got %v", err)
	}
}

// FuzzNormalizePeerURL: whatever the input, an accepted URL is an http(s) URL with a host and a
// port that normalizes to itself, so comparing normalized URLs is stable.
func FuzzNormalizePeerURL(f *testing.F) {
	for _, s := range []string{
		"http://10.0.0.1:2380", "https://[::1]:2380", "HTTP://Host:080/", "http://[fe80::1%25eth0]:1",
		"http://a%20b:1", "http://:1", "http://h:1?#", "//h:1", "http://h:99999", "http://1.2.3:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := normalizePeerURL(s)
		if err != nil {
			return
		}
		again, err := normalizePeerURL(n)
		if err != nil || again != n {
			t.Fatalf("normalizePeerURL(%q) = %q, which normalizes to %q, %v", s, n, again, err)
		}
		u, err := url.Parse(n)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" {
			t.Fatalf("normalizePeerURL(%q) = %q: not scheme://host:port (%v)", s, n, err)
		}
	})
}
