package join

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

func member(id uint64, name string, learner bool, peerURLs ...string) etcd.Member {
	return etcd.Member{ID: id, Name: name, PeerURLs: peerURLs, IsLearner: learner}
}

func TestSettings(t *testing.T) {
	three := []etcd.Member{
		member(0x30, "node-3", false, "http://10.0.0.3:2380"),
		member(0x10, "node-1", false, "http://10.0.0.1:2380"),
		member(0x20, "node-2", false, "http://10.0.0.2:2380"),
	}
	newcomer := member(0x40, "", true, "http://10.0.0.4:2380")
	cases := []struct {
		name    string
		members []etcd.Member
		self    uint64
		as      string
		want    string // the file; "" when an error is expected
		wantErr string
	}{
		{
			name: "just added", members: append(three, newcomer), self: 0x40, as: "node-4",
			want: `ETCD_NAME=node-4
ETCD_INITIAL_CLUSTER=node-1=http://10.0.0.1:2380,node-2=http://10.0.0.2:2380,node-3=http://10.0.0.3:2380,node-4=http://10.0.0.4:2380
ETCD_INITIAL_CLUSTER_STATE=existing
ETCD_INITIAL_ADVERTISE_PEER_URLS=http://10.0.0.4:2380
`,
		},
		{
			name: "started and promoted: the same text", self: 0x40, as: "node-4",
			members: append(three, member(0x40, "node-4", false, "http://10.0.0.4:2380")),
			want: `ETCD_NAME=node-4
ETCD_INITIAL_CLUSTER=node-1=http://10.0.0.1:2380,node-2=http://10.0.0.2:2380,node-3=http://10.0.0.3:2380,node-4=http://10.0.0.4:2380
ETCD_INITIAL_CLUSTER_STATE=existing
ETCD_INITIAL_ADVERTISE_PEER_URLS=http://10.0.0.4:2380
`,
		},
		{
			name: "several peer URLs", self: 0x40, as: "node-4",
			members: []etcd.Member{
				member(0x10, "node-1", false, "http://10.0.0.1:2380", "http://[fd00::1]:2380"),
				member(0x40, "", true, "http://10.0.0.4:2380", "http://[fd00::4]:2380"),
			},
			want: `ETCD_NAME=node-4
ETCD_INITIAL_CLUSTER="node-1=http://10.0.0.1:2380,node-1=http://[fd00::1]:2380,node-4=http://10.0.0.4:2380,node-4=http://[fd00::4]:2380"
ETCD_INITIAL_CLUSTER_STATE=existing
ETCD_INITIAL_ADVERTISE_PEER_URLS="http://10.0.0.4:2380,http://[fd00::4]:2380"
`,
		},
		{
			// Never started, shared, the newcomer's own, another member's ID, unparsable by etcd:
			// each would merge two members, so each is listed under its ID.
			name: "names that cannot be used", self: 0x40, as: "node-4",
			members: []etcd.Member{
				member(0x10, "node-1", false, "http://10.0.0.1:2380"),
				member(0x11, "", true, "http://10.0.0.11:2380"),
				member(0x12, "twin", false, "http://10.0.0.12:2380"),
				member(0x13, "twin", false, "http://10.0.0.13:2380"),
				member(0x14, "node-4", false, "http://10.0.0.14:2380"),
				member(0x15, "10", false, "http://10.0.0.15:2380"),
				member(0x16, "a,b", false, "http://10.0.0.16:2380"),
				member(0x40, "", true, "http://10.0.0.4:2380"),
			},
			want: `ETCD_NAME=node-4
ETCD_INITIAL_CLUSTER=node-1=http://10.0.0.1:2380,11=http://10.0.0.11:2380,12=http://10.0.0.12:2380,13=http://10.0.0.13:2380,14=http://10.0.0.14:2380,15=http://10.0.0.15:2380,16=http://10.0.0.16:2380,node-4=http://10.0.0.4:2380
ETCD_INITIAL_CLUSTER_STATE=existing
ETCD_INITIAL_ADVERTISE_PEER_URLS=http://10.0.0.4:2380
`,
		},
		{
			name: "a name that needs quotes", members: append(three, newcomer), self: 0x40, as: `it's "$HOME"`,
			want: `ETCD_NAME="it's \"\$HOME\""
ETCD_INITIAL_CLUSTER="node-1=http://10.0.0.1:2380,node-2=http://10.0.0.2:2380,node-3=http://10.0.0.3:2380,it's \"\$HOME\"=http://10.0.0.4:2380"
ETCD_INITIAL_CLUSTER_STATE=existing
ETCD_INITIAL_ADVERTISE_PEER_URLS=http://10.0.0.4:2380
`,
		},
		{
			name: "the name is another member's ID", members: []etcd.Member{member(0x11, "", true, "http://10.0.0.11:2380"), newcomer},
			self: 0x40, as: "11", wantErr: `members 11 and 40 would both be listed as "11"`,
		},
		{
			name: "not in the list", members: three, self: 0x40, as: "node-4", wantErr: "member 40 is not in the member list",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vars, err := Settings(tc.members, tc.self, tc.as)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := Format(vars); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestFormatReadBackByShell: the file must mean the same to "set -a; . FILE" as what was
// rendered, whatever the characters. (systemd's EnvironmentFile= parser follows the same rules
// for the bare and double-quoted forms used.)
func TestFormatReadBackByShell(t *testing.T) {
	values := []string{
		"plain", "", "with space", `it's`, `say "hi"`, "$HOME", "${HOME}", "`id`", `back\slash`, `\$`,
		"~root", "a:~root", "*", "#hash", "a #b", "!bang", "a;b", "a&b", "a|b", "<>", "(x)", "[x]", "{x}",
		"tab\tin", "knoten-ä", "trailing\\", "node-1=http://10.0.0.1:2380,node-2=http://[fd00::2]:2380",
	}
	var vars []Var
	for i, v := range values {
		vars = append(vars, Var{Key: fmt.Sprintf("V%d", i), Value: v})
	}
	file := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(file, []byte(Format(vars)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `set -a; . "$1"; exec env -0`, "sh", file)
	cmd.Env = []string{"HOME=/nonexistent-home"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sourcing %s:\n%s\n%v", file, Format(vars), err)
	}
	env := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, v := range vars {
		if got, ok := env[v.Key]; !ok || got != v.Value {
			t.Errorf("%s=%q reads back as %q (line %s)", v.Key, v.Value, got, strings.TrimSpace(Format([]Var{v})))
		}
	}
}
