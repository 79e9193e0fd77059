package join

import (
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

func TestMatch(t *testing.T) {
	want := []string{"http://10.0.0.4:2380", "http://10.0.0.5:2380"}
	cases := []struct {
		name    string
		member  etcd.Member
		found   bool
		wantErr string
	}{
		{"other URLs", member(1, "node-1", false, "http://10.0.0.1:2380"), false, ""},
		{"added, not started", member(4, "", true, "http://10.0.0.5:2380", "http://10.0.0.4:2380"), true, ""},
		{"started as this name", member(4, "node-4", true, "http://10.0.0.4:2380", "http://10.0.0.5:2380"), true, ""},
		{"promoted", member(4, "node-4", false, "http://10.0.0.4:2380", "http://10.0.0.5:2380"), true, ""},
		{"recorded in another spelling", member(4, "", true, "HTTP://10.0.0.4:02380", "http://10.0.0.5:2380"), true, ""},
		{"started as another name", member(4, "node-5", false, "http://10.0.0.4:2380", "http://10.0.0.5:2380"), false,
			`member 4 already has peer URLs http://10.0.0.4:2380,http://10.0.0.5:2380 and started as "node-5", not "node-4"`},
		{"some of the URLs", member(4, "", true, "http://10.0.0.4:2380"), false,
			`member 4 (not started, learner) has peer URLs http://10.0.0.4:2380, which overlap`},
		{"more than the URLs", member(4, "node-4", false, "http://10.0.0.4:2380", "http://10.0.0.5:2380", "http://10.0.0.6:2380"), false,
			`member 4 ("node-4", voter) has peer URLs`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			members := []etcd.Member{member(1, "node-1", false, "http://10.0.0.1:2380"), tc.member}
			got, found, err := Match(members, "node-4", want)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case found != tc.found:
				t.Fatalf("found = %v, want %v", found, tc.found)
			case found && got.ID != tc.member.ID:
				t.Fatalf("found member %x, want %x", got.ID, tc.member.ID)
			}
		})
	}
}

func TestNamesakes(t *testing.T) {
	members := []etcd.Member{
		member(1, "node-4", false, "http://10.0.0.1:2380"),
		member(2, "node-2", false, "http://10.0.0.2:2380"),
		member(4, "node-4", true, "http://10.0.0.4:2380"),
	}
	got := namesakes(members, 4, "node-4")
	if len(got) != 1 || got[0].ID != 1 {
		t.Errorf("got %+v, want member 1 only", got)
	}
}
