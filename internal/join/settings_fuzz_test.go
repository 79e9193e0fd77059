package join

import (
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// FuzzSettings feeds the settings renderer what it gets from outside: the name an operator typed
// and the names and peer URLs etcd returned for the other members (which etcd accepts from anyone
// with access). Whenever it renders settings, etcd must be able to read them back: every member's
// peer URLs under exactly one name, the joining member's under its own, and each line of the file
// unquoting to the value it was made from.
func FuzzSettings(f *testing.F) {
	f.Add("node-4", "node-1", "node-2", "http://10.0.0.1:2380", "http://10.0.0.2:2380", "http://10.0.0.4:2380")
	f.Add("node-4", "", "node-1", "http://10.0.0.1:2380", "https://[::1]:2380", "http://10.0.0.4:2380")
	f.Add("n\"$`\\ 4", "a=b", "c,d", "http://x:1", "http://y:2", "http://z:3")
	f.Add("node-4", "node-4", "node-4", "http://10.0.0.1:2380", "http://10.0.0.2:2380", "http://10.0.0.4:2380")
	f.Fuzz(func(t *testing.T, name, other1, other2, url1, url2, ownURL string) {
		if CheckName(name) != nil {
			return
		}
		members := []etcd.Member{
			{ID: 0x11, Name: other1, PeerURLs: []string{url1}},
			{ID: 0x22, Name: other2, PeerURLs: []string{url2}},
			{ID: 0x44, PeerURLs: []string{ownURL}},
		}
		vars, err := Settings(members, 0x44, name)
		if err != nil {
			return
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSuffix(Format(vars), "\n"), "\n") {
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("line %q has no =", line)
			}
			got[key] = unquote(t, value)
		}
		for _, v := range vars {
			if got[v.Key] != v.Value {
				t.Fatalf("%s reads back as %q, was %q", v.Key, got[v.Key], v.Value)
			}
		}
		if got["ETCD_NAME"] != name {
			t.Fatalf("ETCD_NAME %q, want %q", got["ETCD_NAME"], name)
		}
		// etcd splits ETCD_INITIAL_CLUSTER at commas, then each entry at its first "=", and
		// groups the URLs by name.
		byName := map[string][]string{}
		for entry := range strings.SplitSeq(got["ETCD_INITIAL_CLUSTER"], ",") {
			n, u, ok := strings.Cut(entry, "=")
			if !ok {
				t.Fatalf("entry %q of ETCD_INITIAL_CLUSTER has no =", entry)
			}
			byName[n] = append(byName[n], u)
		}
		if len(byName) != len(members) {
			t.Fatalf("ETCD_INITIAL_CLUSTER %q lists %d names for %d members", got["ETCD_INITIAL_CLUSTER"], len(byName), len(members))
		}
		if urls := byName[name]; len(urls) != 1 || urls[0] != ownURL {
			t.Fatalf("ETCD_INITIAL_CLUSTER lists %v under %q, want [%s]", urls, name, ownURL)
		}
	})
}

// unquote reads a value the way a POSIX shell reads the subset Format writes: bare, or in double
// quotes with \ " $ ` escaped by a backslash.
func unquote(t *testing.T, v string) string {
	if !strings.HasPrefix(v, `"`) {
		if strings.IndexFunc(v, needsQuotes) >= 0 {
			t.Fatalf("bare value %q holds a character a shell or systemd would read differently", v)
		}
		return v
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		t.Fatalf("value %q opens a quote it does not close", v)
	}
	var b strings.Builder
	body := v[1 : len(v)-1]
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body) && strings.IndexByte("\\\"$`", body[i+1]) >= 0:
			i++
			b.WriteByte(body[i])
		case strings.IndexByte("\"$`", c) >= 0:
			t.Fatalf("value %q has an unescaped %q inside quotes", v, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
