package etcd

import (
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	cases := map[string]uint64{"1": 1, "8e9e05c52164694d": 0x8e9e05c52164694d, "ffffffffffffffff": ^uint64(0)}
	for in, want := range cases {
		got, err := ParseID(in)
		if err != nil || got != want {
			t.Errorf("ParseID(%q) = %x, %v; want %x", in, got, err, want)
		}
		if IDString(got) != in {
			t.Errorf("IDString(%x) = %q, want %q", got, IDString(got), in)
		}
	}
	for _, bad := range []string{"", "0", "xyz", "-1", "1ffffffffffffffff", " 1"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

// FuzzParseID: member IDs come from objects anyone with write access can edit. Whatever parses
// must be a valid ID that formats back to the same lowercase text etcdctl prints.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1", "8e9e05c52164694d", "0", "", "DEADBEEF", "ffffffffffffffff0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		if id == 0 {
			t.Fatalf("ParseID(%q) returned the invalid ID 0", s)
		}
		if back, err := ParseID(IDString(id)); err != nil || back != id {
			t.Fatalf("round trip of %q: %x, %v", s, back, err)
		}
		if strings.ToLower(strings.TrimLeft(s, "0")) != IDString(id) {
			t.Fatalf("ParseID(%q) = %s: not the same ID text", s, IDString(id))
		}
	})
}
