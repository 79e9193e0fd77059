package framework_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

func TestClusterMembersAgree(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})

	want := expected(c.Members())
	if len(want) != 3 {
		t.Fatalf("cluster has %d members, want 3", len(want))
	}
	seen := map[string]string{}
	for _, m := range c.Members() {
		if ip := m.IP(); ip == "127.0.0.1" || !strings.HasPrefix(ip, "127.") {
			t.Errorf("%s has IP %s, want its own 127.x.y.z", m.Name, ip)
		}
		if other, ok := seen[m.IP()]; ok {
			t.Errorf("%s and %s share IP %s", m.Name, other, m.IP())
		}
		seen[m.IP()] = m.Name
		got := describe(memberList(t, m.Client(t)))
		if !slices.Equal(got, want) {
			t.Errorf("MemberList via %s:\n got %q\nwant %q", m.Name, got, want)
		}
	}
}

func TestClusterSurvivesKilledLeader(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	leader := c.Leader(t)

	leader.Kill(t)

	if leader.Running() {
		t.Fatalf("%s still running after Kill", leader.Name)
	}
	if eps := c.Endpoints(); len(eps) != 2 || slices.Contains(eps, leader.ClientURL()) {
		t.Fatalf("Endpoints() = %v, want the two survivors", eps)
	}
	for _, m := range c.Members() {
		if m == leader {
			continue
		}
		if got := memberList(t, m.Client(t)); len(got) != 3 {
			t.Errorf("MemberList via %s has %d members, want 3", m.Name, len(got))
		}
	}
	// The survivors need an election first.
	cli := c.Client(t)
	framework.Eventually(t, 15*time.Second, retryEvery, "put after killing the leader", retried(func(ctx context.Context) error {
		_, err := cli.Put(ctx, "after-kill", "ok")
		return err
	}))
	if newLeader := c.Leader(t); newLeader == leader {
		t.Errorf("leader is still the killed %s", leader.Name)
	}
}

func TestMemberMoveToThenMemberUpdate(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	m := c.Member("node-2")
	oldIP, oldPeer := m.IP(), m.PeerURL()

	m.MoveTo(t)

	if m.IP() == oldIP {
		t.Fatalf("MoveTo kept IP %s", oldIP)
	}
	cli := c.Client(t)
	if rec := framework.FindMember(memberList(t, cli), m.ID()); rec == nil || !slices.Equal(rec.PeerURLs, []string{oldPeer}) {
		t.Fatalf("before MemberUpdate etcd's record is %v, want the old peer URL %s", rec, oldPeer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.MemberUpdate(ctx, m.ID(), []string{m.PeerURL()}); err != nil {
		t.Fatalf("member update: %v", err)
	}

	own := m.Client(t)
	framework.Eventually(t, 15*time.Second, retryEvery, "linearizable read on the new client URL", retried(func(ctx context.Context) error {
		_, err := own.Get(ctx, "any")
		return err
	}))
	for _, other := range c.Members() {
		rec := framework.FindMember(memberList(t, other.Client(t)), m.ID())
		if rec == nil || !slices.Equal(rec.PeerURLs, []string{m.PeerURL()}) {
			t.Errorf("MemberList via %s shows %v, want peer URL %s", other.Name, rec, m.PeerURL())
		}
	}
}

func TestLearnerAddedAndPromoted(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})

	learner := c.AddMember(t, "node-4", true)

	cli := c.Client(t)
	if rec := framework.FindMember(memberList(t, cli), learner.ID()); rec == nil || !rec.IsLearner {
		t.Fatalf("node-4 record is %v, want a learner", rec)
	}
	framework.Eventually(t, 30*time.Second, retryEvery, "promote node-4", retried(func(ctx context.Context) error {
		_, err := cli.MemberPromote(ctx, learner.ID())
		if errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			return err
		}
		if err != nil {
			t.Fatalf("promote node-4: %v", err)
		}
		return nil
	}))
	for _, m := range c.Members() {
		got := describe(memberList(t, m.Client(t)))
		if want := expected(c.Members()); !slices.Equal(got, want) {
			t.Errorf("MemberList via %s:\n got %q\nwant %q", m.Name, got, want)
		}
	}
}

func TestRejoinGetsNewID(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	m := c.Member("node-3")
	oldID := m.ID()

	c.Rejoin(t, m, false)

	if m.ID() == oldID {
		t.Fatalf("rejoined member kept ID %x", oldID)
	}
	got := describe(memberList(t, c.Client(t)))
	if want := expected(c.Members()); !slices.Equal(got, want) {
		t.Fatalf("after rejoin MemberList:\n got %q\nwant %q", got, want)
	}
	cli := m.Client(t)
	framework.Eventually(t, 15*time.Second, retryEvery, "put via the rejoined member", retried(func(ctx context.Context) error {
		_, err := cli.Put(ctx, "rejoined", fmt.Sprint(m.ID()))
		return err
	}))
}

func TestMemberLifecycle(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	m := c.Member("node-1")

	m.Pause(t)
	if !m.Running() || slices.Contains(c.Endpoints(), m.ClientURL()) {
		t.Fatalf("paused member: Running()=%v, Endpoints()=%v; want running but not an endpoint", m.Running(), c.Endpoints())
	}
	m.Resume(t)
	m.Pause(t)
	// Stop must reach a paused process too.
	m.Stop(t)
	if m.Running() {
		t.Fatalf("%s still running after Stop", m.Name)
	}
	id := m.ID()
	m.Start(t)
	m.Restart(t)
	if m.ID() != id {
		t.Errorf("restart from the data dir changed ID %x to %x", id, m.ID())
	}
	cli := m.Client(t)
	framework.Eventually(t, 15*time.Second, retryEvery, "put via the restarted member", retried(func(ctx context.Context) error {
		_, err := cli.Put(ctx, "restarted", "ok")
		return err
	}))
}

// A member that etcd removes exits by itself. Stopping it right after the removal, or killing,
// pausing and resuming it once it has gone, must never fail the test that does so.
func TestRemovedMemberStopsWithoutError(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	cli := c.Client(t)
	remove := func(m *framework.Member) {
		t.Helper()
		// etcd refuses a removal until the others have been connected for a while after start.
		framework.Eventually(t, 30*time.Second, retryEvery, "remove "+m.Name, retried(func(ctx context.Context) error {
			_, err := cli.MemberRemove(ctx, m.ID())
			if errors.Is(err, rpctypes.ErrMemberNotFound) {
				return nil
			}
			return err
		}))
	}

	stopped := c.Member("node-3")
	remove(stopped)
	stopped.Stop(t)
	if stopped.Running() {
		t.Fatalf("%s still running after Stop", stopped.Name)
	}

	gone := c.Member("node-2")
	remove(gone)
	framework.Eventually(t, 30*time.Second, retryEvery, gone.Name+" exits by itself", retried(func(context.Context) error {
		if gone.Running() {
			return errors.New("still running")
		}
		return nil
	}))
	gone.Pause(t)
	gone.Resume(t)
	gone.Kill(t)
	gone.Stop(t)

	if got := memberList(t, c.Member("node-1").Client(t)); len(got) != 1 {
		t.Errorf("member list after two removals: %q, want node-1 alone", describe(got))
	}
}

// TestStartUnlessRemovedAfterRemovalWhileDown: a member removed while it was down, then started
// (what the chaos run's dead-member policy and its "heal etcd" step do), is reported removed
// whatever status it exits with; a member stopped but not removed starts and serves.
func TestStartUnlessRemovedAfterRemovalWhileDown(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	cli := c.Client(t)
	removed, kept := c.Member("node-3"), c.Member("node-2")
	removed.Stop(t)
	framework.Eventually(t, 30*time.Second, retryEvery, "remove "+removed.Name, retried(func(ctx context.Context) error {
		_, err := cli.MemberRemove(ctx, removed.ID())
		return err
	}))
	if removed.StartUnlessRemoved(t) {
		t.Errorf("%s serves after its removal", removed.Name)
	}
	kept.Stop(t)
	if !kept.StartUnlessRemoved(t) {
		t.Errorf("%s, stopped but never removed, was reported removed", kept.Name)
	}
}

// TestClusterRunsChosenEtcd: every way a member starts (the first start, a restart, an added
// learner, a re-join) runs the binary the cluster was configured with, so a test of etcd 3.5
// cannot quietly run 3.6 on the members it adds later.
func TestClusterRunsChosenEtcd(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, EtcdBinary: "etcd-3.5"})
	assertVersions(t, c, "3.5.")

	c.Member("node-1").Restart(t)
	learner := c.AddMember(t, "node-4", true)
	c.Rejoin(t, c.Member("node-2"), false)
	assertVersions(t, c, "3.5.")
	// A learner refuses MemberList, so ask a voter.
	if rec := framework.FindMember(memberList(t, c.Member("node-1").Client(t)), learner.ID()); rec == nil || !rec.IsLearner {
		t.Fatalf("node-4 record is %v, want a learner", rec)
	}
}

// TestClusterRunsEtcd34: etcd 3.4 lacks a flag every newer member gets; the framework must still
// start it, for the tests that prove the agents refuse to lead it.
func TestClusterRunsEtcd34(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 1, EtcdBinary: "etcd-3.4"})
	assertVersions(t, c, "3.4.")
}

// assertVersions checks that every member says it runs a version starting with prefix.
func assertVersions(t *testing.T, c *framework.Cluster, prefix string) {
	t.Helper()
	for _, m := range c.Members() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := m.Client(t).Status(ctx, m.ClientURL())
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", m.Name, err)
		}
		if !strings.HasPrefix(st.Version, prefix) {
			t.Errorf("%s runs etcd %s, want %s*", m.Name, st.Version, prefix)
		}
	}
}

// TestClusterMissingEtcdBinaryFailsNamingMakeTestbin: a configured etcd that was never built
// fails the test with the command that builds it, before anything starts.
func TestClusterMissingEtcdBinaryFailsNamingMakeTestbin(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("ETCDMEMBER_BIN_DIR", empty)
	rec := &exitingTB{T: t}
	done := make(chan struct{})
	// Fatalf ends the goroutine it runs in, as testing.T's does, so NewCluster stops there.
	go func() {
		defer close(done)
		framework.NewCluster(rec, framework.ClusterConfig{Size: 1, EtcdBinary: "etcd-3.5"})
	}()
	<-done
	want := fmt.Sprintf(`bin/etcd-3.5 not found (looked in %s): run "make testbin"`, empty)
	if len(rec.fatals) != 1 || rec.fatals[0] != want {
		t.Fatalf("Fatalf calls %q, want exactly %q", rec.fatals, want)
	}
}

// exitingTB records Fatalf and then ends the calling goroutine, like testing.T.
type exitingTB struct {
	*testing.T
	fatals []string
}

func (r *exitingTB) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
