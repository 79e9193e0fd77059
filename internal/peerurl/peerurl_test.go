package peerurl

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

func TestNormalize(t *testing.T) {
	cases := []struct {
		in, want string // want "" means an error
	}{
		{"http://10.0.0.4:2380", "http://10.0.0.4:2380"},
		{"https://node-4.example.com:2380", "https://node-4.example.com:2380"},
		{"HTTPS://Node-4.Example.COM:02380", "https://node-4.example.com:2380"},
		{"http://[2001:DB8::0:4]:2380", "http://[2001:db8::4]:2380"},
		{"http://under_score:1", "http://under_score:1"},
		{"http://[::ffff:10.0.0.1]:2380", "http://[::ffff:10.0.0.1]:2380"},
		{"http://10.0.0.4", ""},                 // no port
		{"http://10.0.0.4:", ""},                // empty port
		{"http://10.0.0.4:0", ""},               // port 0
		{"http://10.0.0.4:65536", ""},           // port out of range
		{"http://10.0.0.4:http", ""},            // named port
		{"http://:2380", ""},                    // no host
		{"unix://etcd.sock:2380", ""},           // scheme
		{"10.0.0.4:2380", ""},                   // no scheme
		{"", ""},                                // empty
		{"http://u:p@10.0.0.4:2380", ""},        // user info
		{"http://10.0.0.4:2380/", ""},           // path, even an empty one: etcd refuses it
		{"http://10.0.0.4:2380/peer", ""},       // path
		{"http://10.0.0.4:2380?x=1", ""},        // query
		{"http://10.0.0.4:2380?", ""},           // empty query
		{"http://10.0.0.4:2380#", ""},           // fragment
		{"http:10.0.0.4:2380", ""},              // opaque
		{"http://[fe80::1%25eth0]:2380", ""},    // IPv6 zone
		{"http://a%20b:2380", ""},               // escaped space in host
		{"http://a$b:2380", ""},                 // shell character in host
		{"http://10.0.0.4:2380,http://x:1", ""}, // a list is not one URL
	}
	for _, tc := range cases {
		got, err := Normalize(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("Normalize(%q) = %q, want an error", tc.in, got)
		case tc.want != "" && err != nil:
			t.Errorf("Normalize(%q): %v", tc.in, err)
		case got != tc.want:
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNormalizeList(t *testing.T) {
	got, err := NormalizeList([]string{" http://b:1", "http://a:1"})
	if err != nil || !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Errorf("got %q, %v; want them trimmed and sorted", got, err)
	}
	if got, err := NormalizeList(nil); err != nil || len(got) != 0 {
		t.Errorf("no URLs: got %q, %v; want none and no error", got, err)
	}
	_, err = NormalizeList([]string{"http://a", "http://a:1", "HTTP://A:1", "ftp://b:1"})
	for _, want := range []string{`"http://a" needs an explicit port`, `"HTTP://A:1" is given twice`, `"ftp://b:1": scheme`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error containing %q", err, want)
		}
	}
}

func TestSameSet(t *testing.T) {
	want := []string{"http://10.0.0.1:2380", "http://10.0.0.2:2380"}
	cases := []struct {
		recorded []string
		same     bool
	}{
		{[]string{"http://10.0.0.2:2380", "HTTP://10.0.0.1:2380"}, true},
		{[]string{"http://10.0.0.1:2380"}, false},
		{[]string{"http://10.0.0.1:2380", "http://10.0.0.2:2380", "http://10.0.0.3:2380"}, false},
		{[]string{"http://10.0.0.1:2380", "http://10.0.0.2:2380/x"}, false},
	}
	for _, tc := range cases {
		if got := SameSet(tc.recorded, want); got != tc.same {
			t.Errorf("SameSet(%q) = %v, want %v", tc.recorded, got, tc.same)
		}
	}
}

// FuzzNormalize: Peer URLs come from operators' flags. Whatever it accepts,
// etcd must accept too, with nothing but scheme://host:port, and normalizing must be stable so
// that a second run matches the first one's record.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"http://10.0.0.4:2380", "HTTPS://Node-4.Example.COM:02380", "http://[2001:DB8::0:4]:2380",
		"http://10.0.0.4", "http://[fe80::1%25eth0]:2380", "http://10.0.0.4:2380/", "http://u@h:1",
		"http://h:1?", "http://h:1#", "http:h:1", "http://a%20b:1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Normalize(s)
		if err != nil {
			return
		}
		if again, err := Normalize(n); err != nil || again != n {
			t.Fatalf("Normalize(%q) = %q, which normalizes to %q, %v", s, n, again, err)
		}
		u, err := url.Parse(n)
		if err != nil || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Port() == "" {
			t.Fatalf("Normalize(%q) = %q: not scheme://host:port", s, n)
		}
		if _, err := types.NewURLs([]string{n}); err != nil {
			t.Fatalf("Normalize(%q) = %q, which etcd refuses: %v", s, n, err)
		}
		if strings.ContainsAny(n, ",= \t\n\"'$`\\") {
			t.Fatalf("Normalize(%q) = %q would break ETCD_INITIAL_CLUSTER or the environment file", s, n)
		}
	})
}
