package e2e

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// runJoin runs "bin/kubectl-etcdmember join" against endpoints of c, with its client certificate under
// TLS, and returns stdout and stderr apart: stdout is the settings.
func runJoin(t *testing.T, c *framework.Cluster, endpoints []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	args = append([]string{"join", "--etcd-endpoints", strings.Join(endpoints, ",")}, args...)
	if files := c.TLS(); files != nil {
		args = append(args, "--etcd-cacert", files.CA, "--etcd-cert", files.ClientCert, "--etcd-key", files.ClientKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.Binary(t, "kubectl-etcdmember"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running kubectl-etcdmember %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// membersWithPeerURL returns etcd's records that have url among their peer URLs.
func membersWithPeerURL(t *testing.T, cli *clientv3.Client, url string) []*etcdserverpb.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	var found []*etcdserverpb.Member
	for _, m := range resp.Members {
		if slices.Contains(m.PeerURLs, url) {
			found = append(found, m)
		}
	}
	return found
}

// wantSettings is the file join must write for pending, added with ID id to the members of c
// (whose names are all distinct and set): members by ID, each under its name.
func wantSettings(c *framework.Cluster, pending *framework.Member, id uint64) string {
	type entry struct {
		id   uint64
		text string
	}
	entries := []entry{{id, pending.EtcdName() + "=" + pending.PeerURL()}}
	for _, m := range c.Members() {
		entries = append(entries, entry{m.ID(), m.EtcdName() + "=" + m.PeerURL()})
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.id, b.id) })
	var initial []string
	for _, e := range entries {
		initial = append(initial, e.text)
	}
	return fmt.Sprintf("ETCD_NAME=%s\nETCD_INITIAL_CLUSTER=%s\nETCD_INITIAL_CLUSTER_STATE=existing\nETCD_INITIAL_ADVERTISE_PEER_URLS=%s\n",
		pending.EtcdName(), strings.Join(initial, ","), pending.PeerURL())
}

// promote promotes the learner once it has caught up with the leader: the product's automatic
// promotion is not under test here, only that the settings produce a member that can be promoted.
func promote(t *testing.T, cli *clientv3.Client, id uint64) {
	t.Helper()
	err := framework.Poll(settle, pollEvery, apiCall(func(ctx context.Context) error {
		_, err := cli.MemberPromote(ctx, id)
		if err != nil && !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			t.Fatalf("promote %x: %v", id, err)
		}
		return err
	}))
	if err != nil {
		t.Fatalf("promote %x: still not in sync: %v", id, err)
	}
}

// TestJoinAddsLearner: join adds the member as a learner and writes settings with which etcd
// starts, joins and can be promoted.
func TestJoinAddsLearner(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	// Only the voters: a client balanced onto the learner would have MemberPromote refused.
	cli := c.Client(t)
	node4 := c.NewPendingMember(t, "node-4")
	file := filepath.Join(t.TempDir(), "join.env")

	stdout, stderr, code := runJoin(t, c, c.Endpoints(), "--name", "node-4", "--peer-urls", node4.PeerURL(), "--output", file)
	if code != 0 || stdout != "" {
		t.Fatalf("join: exit %d, stdout %q, stderr %q; want exit 0 and the settings in %s only", code, stdout, stderr, file)
	}
	added := membersWithPeerURL(t, cli, node4.PeerURL())
	if len(added) != 1 || !added[0].IsLearner || added[0].Name != "" {
		t.Fatalf("etcd records %v for %s, want one learner that has not started", added, node4.PeerURL())
	}
	id := added[0].ID
	if want := fmt.Sprintf("added member %x as a learner", id); !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", file, info.Mode().Perm())
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantSettings(c, node4, id); string(data) != want {
		t.Fatalf("settings:\n%s\nwant:\n%s", data, want)
	}

	node4.StartWithSettings(t, framework.ReadEnvFile(t, file))
	if node4.ID() != id {
		t.Fatalf("node-4 started as member %x, want %x", node4.ID(), id)
	}
	started := membersWithPeerURL(t, cli, node4.PeerURL())
	if len(started) != 1 || !started[0].IsLearner || started[0].Name != "node-4" || len(started[0].ClientURLs) == 0 {
		t.Fatalf("etcd records %v, want the learner node-4, started", started)
	}

	promote(t, cli, id)
	if voter := membersWithPeerURL(t, cli, node4.PeerURL()); len(voter) != 1 || voter[0].IsLearner {
		t.Fatalf("after promotion etcd records %v, want a voter", voter)
	}
	// A linearizable read through node-4 alone: it serves as a voter. The voters commit the
	// promotion; node-4 refuses as a learner until it has applied that entry itself (a CI run of
	// d4bc223 read through it first), and any other refusal fails at once.
	node4cli := node4.Client(t)
	err = framework.Poll(settle, pollEvery, apiCall(func(ctx context.Context) error {
		_, err := node4cli.Get(ctx, "join-test")
		if err != nil && !errors.Is(err, rpctypes.Error(rpctypes.ErrGRPCNotSupportedForLearner)) {
			t.Fatalf("read through node-4: %v", err)
		}
		return err
	}))
	if err != nil {
		t.Fatalf("read through node-4: still a learner there: %v", err)
	}
}

// TestJoinIsIdempotent: running join again finds the member it added and prints the same
// settings, before and after the member started; the same peer URLs under another name are
// someone else's. With TLS, so that the certificate flags are exercised too.
func TestJoinIsIdempotent(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, TLS: true})
	voters := c.Endpoints()
	cli := c.Client(t)
	node4 := c.NewPendingMember(t, "node-4")
	args := []string{"--name", "node-4", "--peer-urls", node4.PeerURL()}

	first, stderr, code := runJoin(t, c, voters, args...)
	if code != 0 {
		t.Fatalf("first join: exit %d, stderr %q", code, stderr)
	}
	second, stderr, code := runJoin(t, c, voters, args...)
	if code != 0 || second != first {
		t.Fatalf("second join: exit %d, stderr %q, stdout:\n%s\nwant the first run's:\n%s", code, stderr, second, first)
	}
	if !strings.Contains(stderr, "already has peer URLs") || !strings.Contains(stderr, "nothing added") {
		t.Errorf("second join's stderr %q, want it to say that nothing was added", stderr)
	}
	added := membersWithPeerURL(t, cli, node4.PeerURL())
	if len(added) != 1 {
		t.Fatalf("etcd records %d members with %s, want exactly 1", len(added), node4.PeerURL())
	}
	if want := wantSettings(c, node4, added[0].ID); first != want {
		t.Fatalf("settings:\n%s\nwant:\n%s", first, want)
	}

	file := filepath.Join(t.TempDir(), "join.env")
	if err := os.WriteFile(file, []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	node4.StartWithSettings(t, framework.ReadEnvFile(t, file))
	if again, stderr, code := runJoin(t, c, voters, args...); code != 0 || again != first {
		t.Fatalf("join after the start: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, again, first)
	}

	stdout, stderr, code := runJoin(t, c, voters, "--name", "node-5", "--peer-urls", node4.PeerURL())
	want := fmt.Sprintf(`member %x already has peer URLs %s and started as "node-4", not "node-5"`, added[0].ID, node4.PeerURL())
	if code == 0 || stdout != "" || !strings.Contains(stderr, want) {
		t.Errorf("join as node-5: exit %d, stdout %q, stderr %q; want a non-zero exit and %q", code, stdout, stderr, want)
	}
	if n := len(membersWithPeerURL(t, cli, node4.PeerURL())); n != 1 {
		t.Errorf("etcd records %d members with %s, want still 1", n, node4.PeerURL())
	}
}

// TestJoinRefusesBadInput: input that cannot work is refused before etcd is asked, so no cluster
// is needed: the endpoint does not exist.
func TestJoinRefusesBadInput(t *testing.T) {
	t.Parallel()
	base := []string{"join", "--etcd-endpoints", "http://127.0.0.1:1", "--timeout", "2s"}
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no name", []string{"--peer-urls", "http://127.0.0.1:2380"}, "--name is required"},
		{"empty name", []string{"--name", "", "--peer-urls", "http://127.0.0.1:2380"}, "--name is required"},
		{"URL without port", []string{"--name", "node-4", "--peer-urls", "http://10.0.0.4"}, `peer URL "http://10.0.0.4" needs an explicit port`},
		{"URL with a path", []string{"--name", "node-4", "--peer-urls", "http://10.0.0.4:2380/peer"}, "only scheme://host:port is allowed"},
		{"no peer URLs", []string{"--name", "node-4"}, "--peer-urls is required"},
		{"missing output directory", []string{"--name", "node-4", "--peer-urls", "http://10.0.0.4:2380", "--output", filepath.Join(dir, "nope", "join.env")},
			"directory " + filepath.Join(dir, "nope") + " does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runAgentCLI(t, append(slices.Clone(base), tc.args...)...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, output %q; want a non-zero exit and %q", code, out, tc.want)
			}
		})
	}
	out, code := runAgentCLI(t, "join", "--name", "node-4", "--peer-urls", "http://10.0.0.4:2380")
	if code == 0 || !strings.Contains(out, "--etcd-endpoints is required") {
		t.Errorf("no endpoints: exit %d, output %q", code, out)
	}
}
