package framework_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// The fault self-tests show every kind of fault (Blackhole, Delay, Stall, and on a client link each
// Direction) taking effect on every kind of link and every heal undoing it, each against an effect
// that etcd, the apiserver or the agent reports itself, so that a later test cannot pass because a
// fault was silently never applied. PeerLink faults are also shown to stay on their own direction,
// including while the streams between the two members are dialed again. Every Link is the same
// proxy code, so the Links other than a member's client URL are only cut both ways.

// peerTimeout bounds how long a member takes to notice a peer gone or back, and a follower to
// catch up: a few election timeouts (1s) and redials.
const peerTimeout = 15 * time.Second

// Peer faults are checked on etcd's own counter of the raft bytes a member received from each
// peer, etcd_network_peer_received_bytes_total{From}: exactly one directed link. The leader and a
// follower exchange heartbeats every 100ms, so a link that carries anything makes it grow. (etcd's
// etcd_network_active_peers would be the obvious gauge, but etcd 3.6/3.7 never notices a stream that
// goes silent while its connection stays open, which is what a blackhole does: see doc.go.)

// TestFaultPeerPartition cuts every link to and from a follower: neither side hears the other,
// the follower loses its leader and applies nothing; healed, it follows and catches up.
func TestFaultPeerPartition(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, FaultProxies: true})
	leader := c.Leader(t)
	f := follower(c, leader)
	for _, m := range c.Members() {
		if m.PeerURL() == m.ListenPeerURL() || m.ClientURL() == m.ListenClientURL() {
			t.Fatalf("%s advertises %s and %s, where it listens: no fault proxy in between", m.Name, m.PeerURL(), m.ClientURL())
		}
	}
	hc := metricsClient(t, c)
	fc := f.DirectClient(t)
	waitHears(t, hc, leader, f)
	waitHears(t, hc, f, leader)

	var links []*framework.PeerLink
	for _, o := range c.Members() {
		if o != f {
			links = append(links, c.PeerLink(t, o, f), c.PeerLink(t, f, o))
		}
	}
	for _, l := range links {
		l.Blackhole()
	}
	waitDeaf(t, hc, leader, f)
	waitDeaf(t, hc, f, leader)
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" loses its leader", leads(fc, f, nil))
	put(t, leader, "partitioned", "v")
	framework.Consistently(t, 2*time.Second, retryEvery, f.Name+" applies nothing while partitioned", lacks(fc, "partitioned"))

	for _, l := range links {
		l.Heal()
	}
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" follows "+leader.Name+" once healed", leads(fc, f, leader))
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" catches up once healed", has(fc, "partitioned"))
	waitHears(t, hc, leader, f)
}

// TestFaultPeerOneWay cuts one direction at a time, on a member that re-joined (new ID, same
// peer URL): each cut silences its own direction and leaves the other one talking. With
// leader->follower cut the follower loses its leader and applies nothing; with follower->leader
// cut it still follows and applies.
func TestFaultPeerOneWay(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, FaultProxies: true})
	leader := c.Leader(t)
	f := follower(c, leader)
	oldID := f.ID()
	c.Rejoin(t, f, false)
	if f.ID() == oldID {
		t.Fatalf("rejoined %s kept ID %x", f.Name, oldID)
	}
	if l := c.Leader(t); l != leader {
		t.Fatalf("leader moved from %s to %s during the re-join", leader.Name, l.Name)
	}
	hc := metricsClient(t, c)
	lc, fc := leader.DirectClient(t), f.DirectClient(t)
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" applies before any fault", putAndSee(lc, fc, "before"))
	waitHears(t, hc, leader, f)
	waitHears(t, hc, f, leader)

	toFollower := c.PeerLink(t, leader, f)
	toFollower.Blackhole()
	waitDeaf(t, hc, f, leader)
	// A follower that lost its leader keeps asking the others for (pre-)votes.
	waitHears(t, hc, leader, f)
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" loses its leader with "+toFollower.String()+" cut", leads(fc, f, nil))
	put(t, leader, "one-way", "v")
	framework.Consistently(t, 2*time.Second, retryEvery, f.Name+" applies nothing with "+toFollower.String()+" cut", lacks(fc, "one-way"))
	toFollower.Heal()
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" catches up once "+toFollower.String()+" heals", has(fc, "one-way"))

	toLeader := c.PeerLink(t, f, leader)
	toLeader.Blackhole()
	waitDeaf(t, hc, leader, f)
	waitHears(t, hc, f, leader)
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" still applies with only "+toLeader.String()+" cut",
		putAndSee(lc, fc, "other-way"))
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" still follows "+leader.Name, leads(fc, f, leader))
	toLeader.Heal()
	waitHears(t, hc, leader, f)
}

// TestFaultPeerOneWayRestart keeps a cut in place across a restart of the member on its far
// side, which makes every stream between the two be dialed again: the cut must still drop only
// its own direction. Between two followers a and b, a's messages to b are cut, b restarts (it
// follows the leader, a third member) and then takes over the leadership. a must keep hearing
// b's heartbeats and follow it, on streams that a dialed to b after the restart, while b hears
// nothing from a; healed, b hears a again.
func TestFaultPeerOneWayRestart(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, FaultProxies: true})
	leader := c.Leader(t)
	var a, b *framework.Member
	for _, m := range c.Members() {
		switch {
		case m == leader:
		case a == nil:
			a = m
		default:
			b = m
		}
	}
	hc := metricsClient(t, c)
	ac := a.DirectClient(t)

	cut := c.PeerLink(t, a, b)
	cut.Blackhole()
	b.Restart(t)
	if l := c.Leader(t); l != leader {
		t.Fatalf("leader moved from %s to %s during %s's restart", leader.Name, l.Name, b.Name)
	}
	moveLeader(t, leader, b)
	waitHears(t, hc, a, b)
	keepsHearing(t, hc, a, b, 5*time.Second)
	waitDeaf(t, hc, b, a)
	framework.Eventually(t, peerTimeout, retryEvery, a.Name+" follows "+b.Name+" with "+cut.String()+" cut", leads(ac, a, b))

	cut.Heal()
	waitHears(t, hc, b, a)
	keepsHearing(t, hc, b, a, 2*time.Second)
	keepsHearing(t, hc, a, b, 2*time.Second)
}

// moveLeader hands the leadership from leader to m and waits until etcd reports it.
func moveLeader(t *testing.T, leader, m *framework.Member) {
	t.Helper()
	lc := leader.DirectClient(t)
	framework.Eventually(t, peerTimeout, retryEvery, "move the leadership from "+leader.Name+" to "+m.Name,
		framework.PerAttempt(5*time.Second, func(ctx context.Context) (bool, error) {
			st, err := lc.Status(ctx, leader.ListenClientURL())
			if err != nil {
				return false, err
			}
			if st.Leader == m.ID() {
				return true, nil
			}
			_, err = lc.MoveLeader(ctx, m.ID())
			return false, err
		}))
}

// TestFaultPeerDelay delays every peer link: a put, which the leader commits once a follower has
// its entry, takes two delayed trips; healed, puts are fast again.
func TestFaultPeerDelay(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, FaultProxies: true})
	leader := c.Leader(t)
	cli := leader.DirectClient(t)
	const fast = 100 * time.Millisecond
	framework.Eventually(t, 10*time.Second, retryEvery, "a put under "+fast.String()+" before the delay", putWithin(cli, fast))

	var links []*framework.PeerLink
	for _, a := range c.Members() {
		for _, b := range c.Members() {
			if a != b {
				links = append(links, c.PeerLink(t, a, b))
			}
		}
	}
	for _, l := range links {
		l.Delay(200*time.Millisecond, 50*time.Millisecond)
	}
	for i := range 3 {
		d := timedPut(t, cli, fmt.Sprintf("delayed-%d", i))
		if d < 150*time.Millisecond {
			t.Fatalf("put %d took %s with every peer link delayed by 200ms±50ms, want at least 150ms", i, d)
		}
		t.Logf("put %d took %s", i, d.Round(time.Millisecond))
	}
	for _, l := range links {
		l.Heal()
	}
	framework.Eventually(t, 10*time.Second, retryEvery, "a put under "+fast.String()+" once healed", putWithin(cli, fast))
}

// TestFaultPeerIngressTLS: under TLS the sender of a peer connection is hidden, so faults go on
// the destination's ingress. Cutting a follower's ingress silences it toward the leader, whose
// streams from it the leader dialed, while the follower, reading the leader on connections it
// dialed itself, still applies; healed, the leader hears it again.
func TestFaultPeerIngressTLS(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, TLS: true, FaultProxies: true})
	leader := c.Leader(t)
	f := follower(c, leader)
	hc := metricsClient(t, c)
	lc, fc := leader.DirectClient(t), f.DirectClient(t)
	waitHears(t, hc, leader, f)

	if msg := fails(func(tb framework.TB) { c.PeerLink(tb, leader, f) }); !strings.Contains(msg, "use PeerIngress") {
		t.Fatalf("PeerLink on a TLS cluster failed with %q, want a pointer to PeerIngress", msg)
	}

	in := f.PeerIngress(t)
	in.Blackhole(framework.BothWays)
	waitDeaf(t, hc, leader, f)
	framework.Eventually(t, peerTimeout, retryEvery, f.Name+" still applies with its ingress cut", putAndSee(lc, fc, "ingress-cut"))
	in.Heal()
	waitHears(t, hc, leader, f)
}

// TestFaultClientLink cuts, delays and stalls a member's advertised client URL, in each direction: calls
// through it fail or slow down while its real URL serves on; healed, it works again. A FaultProxies member refuses
// MoveTo, whose new address its links could not follow.
func TestFaultClientLink(t *testing.T) {
	t.Parallel()
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			t.Parallel()
			c := framework.NewCluster(t, framework.ClusterConfig{Size: 1, TLS: tlsOn, FaultProxies: true})
			m := c.Members()[0]
			link := m.ClientLink(t)
			if m.ClientURL() != link.URL() || m.ClientURL() == m.ListenClientURL() || !slices.Equal(c.Endpoints(), []string{link.URL()}) {
				t.Fatalf("ClientURL %s, link %s, ListenClientURL %s, Endpoints %v: want the link everywhere but the listen URL",
					m.ClientURL(), link.URL(), m.ListenClientURL(), c.Endpoints())
			}
			if rec := framework.FindMember(memberList(t, m.DirectClient(t)), m.ID()); rec == nil || !slices.Equal(rec.ClientURLs, []string{link.URL()}) {
				t.Fatalf("etcd records %v, want client URL %s", rec, link.URL())
			}
			through, direct := m.Client(t), m.DirectClient(t)
			framework.Eventually(t, 10*time.Second, retryEvery, "status through the client link", status(through, m.ClientURL()))

			// Requests or answers alone lost fail a call as surely as both.
			for _, dir := range []framework.Direction{framework.BothWays, framework.ToMember, framework.FromMember} {
				link.Blackhole(dir)
				framework.Eventually(t, 10*time.Second, retryEvery, "status through the client link cut "+dir.String()+" fails",
					failing(status(through, m.ClientURL())))
				framework.Eventually(t, 10*time.Second, retryEvery, "status on the listen URL while the link is cut "+dir.String(),
					status(direct, m.ListenClientURL()))
				link.Heal()
				framework.Eventually(t, 10*time.Second, retryEvery, "status through the client link healed after a cut "+dir.String(),
					status(through, m.ClientURL()))
			}

			// A call takes one delayed trip in either direction.
			for _, dir := range []framework.Direction{framework.ToMember, framework.FromMember} {
				link.Delay(300*time.Millisecond, 0, dir)
				if d := timedStatus(t, through, m.ClientURL()); d < 250*time.Millisecond {
					t.Fatalf("status took %s with the link delayed by 300ms %s, want at least 250ms", d, dir)
				}
				link.Heal()
				framework.Eventually(t, 10*time.Second, retryEvery, "status under 100ms once the delay "+dir.String()+" is healed",
					func(ctx context.Context) (bool, error) {
						start := time.Now()
						if _, err := through.Status(ctx, m.ClientURL()); err != nil {
							return false, err
						}
						return time.Since(start) < 100*time.Millisecond, nil
					})
			}

			// A stall holds a call without failing it, in either direction, and the call lands once
			// healed: a write sent into the stall is in etcd afterwards.
			for _, dir := range []framework.Direction{framework.ToMember, framework.FromMember} {
				link.Stall(dir)
				key := "stalled-" + strconv.Itoa(int(dir))
				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, err := through.Put(ctx, key, "landed")
					done <- err
				}()
				select {
				case err := <-done:
					t.Fatalf("a put through the link stalled %s returned within 2s (%v), want it held", dir, err)
				case <-time.After(2 * time.Second):
				}
				link.Heal()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("the put held by the stall %s failed once healed: %v", dir, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("the put held by the stall %s did not complete within 10s of the heal", dir)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := direct.Get(ctx, key)
				cancel()
				if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "landed" {
					t.Fatalf("after the stall %s, %s on the listen URL: %v, %v", dir, key, resp, err)
				}
			}

			if msg := fails(m.MoveTo); !strings.Contains(msg, "not supported in a FaultProxies cluster") {
				t.Fatalf("MoveTo in a FaultProxies cluster failed with %q, want a refusal", msg)
			}
		})
	}
}

// TestFaultAPIServerLink: cutting every member's client URL leaves the apiserver's own links
// alone; cutting those fails its etcd readiness check until healed.
func TestFaultAPIServerLink(t *testing.T) {
	t.Parallel()
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			t.Parallel()
			c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, TLS: tlsOn, FaultProxies: true})
			api := framework.StartAPIServer(t, c)
			etcdReady := func(ctx context.Context) error {
				body, err := api.Clientset().Discovery().RESTClient().Get().AbsPath("/readyz/etcd").DoRaw(ctx)
				if err != nil {
					return fmt.Errorf("%w: %s", err, body)
				}
				return nil
			}

			for _, m := range c.Members() {
				m.ClientLink(t).Blackhole(framework.BothWays)
			}
			framework.Consistently(t, 3*time.Second, 500*time.Millisecond, "apiserver's etcd check with every client URL cut",
				framework.PerAttempt(5*time.Second, framework.Succeeds(etcdReady)))
			for _, m := range c.Members() {
				m.ClientLink(t).Heal()
			}

			for _, m := range c.Members() {
				api.EtcdLink(t, m).Blackhole(framework.BothWays)
			}
			framework.Eventually(t, 20*time.Second, 500*time.Millisecond, "apiserver's etcd check fails with its links cut",
				failing(framework.PerAttempt(5*time.Second, framework.Succeeds(etcdReady))))
			for _, m := range c.Members() {
				api.EtcdLink(t, m).Heal()
			}
			framework.Eventually(t, 20*time.Second, 500*time.Millisecond, "apiserver's etcd check once healed",
				framework.PerAttempt(5*time.Second, framework.Succeeds(etcdReady)))
		})
	}
}

// TestFaultAgentLink cuts one agent's link to its member: the agent can no longer sync and goes
// unready, while the member serves on through its client URL; healed, the agent is ready again.
func TestFaultAgentLink(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 1, FaultProxies: true})
	m := c.Members()[0]
	api := framework.StartAPIServer(t, c)
	api.InstallEtcdmember(t)
	a := framework.StartAgent(t, m, api)
	link := a.EtcdLink(t)
	if a.EtcdEndpoint() != link.URL() || link.URL() == m.ClientURL() {
		t.Fatalf("agent dials %s, link %s, member's client URL %s: want the agent on a link of its own",
			a.EtcdEndpoint(), link.URL(), m.ClientURL())
	}
	viaLink := clientOn(t, c, link.URL())
	framework.Eventually(t, 10*time.Second, retryEvery, "status through the agent link", status(viaLink, link.URL()))

	link.Blackhole(framework.BothWays)
	framework.Eventually(t, 20*time.Second, retryEvery, "agent unready with its etcd link cut", func(context.Context) (bool, error) {
		return !framework.ReadyzOK(a.HealthURL("readyz"), time.Second), nil
	})
	framework.Eventually(t, 10*time.Second, retryEvery, "status through the cut agent link fails", failing(status(viaLink, link.URL())))
	framework.Eventually(t, 10*time.Second, retryEvery, "status through the member's client URL", status(m.Client(t), m.ClientURL()))
	link.Heal()
	framework.Eventually(t, 20*time.Second, retryEvery, "agent ready once its link heals", func(context.Context) (bool, error) {
		return framework.ReadyzOK(a.HealthURL("readyz"), time.Second), nil
	})
	framework.Eventually(t, 10*time.Second, retryEvery, "status through the healed agent link", status(viaLink, link.URL()))
}

// follower returns a member other than leader.
func follower(c *framework.Cluster, leader *framework.Member) *framework.Member {
	for _, m := range c.Members() {
		if m != leader {
			return m
		}
	}
	return nil
}

func put(t *testing.T, m *framework.Member, key, value string) {
	t.Helper()
	cli := m.DirectClient(t)
	framework.Eventually(t, 10*time.Second, retryEvery, "put "+key+" through "+m.Name, retried(func(ctx context.Context) error {
		_, err := cli.Put(ctx, key, value)
		return err
	}))
}

// has and lacks read key from the member cli talks to alone, without asking the leader.
func has(cli *clientv3.Client, key string) framework.Condition {
	return framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		resp, err := cli.Get(ctx, key, clientv3.WithSerializable())
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) == 0 {
			return false, fmt.Errorf("%s not there", key)
		}
		return true, nil
	})
}

func lacks(cli *clientv3.Client, key string) framework.Condition {
	return framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		resp, err := cli.Get(ctx, key, clientv3.WithSerializable())
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) > 0 {
			return false, fmt.Errorf("%s is there", key)
		}
		return true, nil
	})
}

// putAndSee puts key through the leader's client lc and checks that the member cli talks to has
// it; every attempt puts again, which also carries the previous put's commit index.
func putAndSee(lc, cli *clientv3.Client, key string) framework.Condition {
	return framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		if _, err := lc.Put(ctx, key, "v"); err != nil {
			return false, err
		}
		return has(cli, key)(ctx)
	})
}

// failing is done when cond, tried once, is not.
func failing(cond framework.Condition) framework.Condition {
	return func(ctx context.Context) (bool, error) {
		if done, _ := cond(ctx); done {
			return false, errors.New("still succeeds")
		}
		return true, nil
	}
}

func status(cli *clientv3.Client, endpoint string) framework.Condition {
	return retried(func(ctx context.Context) error {
		_, err := cli.Status(ctx, endpoint)
		return err
	})
}

func timedStatus(t *testing.T, cli *clientv3.Client, endpoint string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := cli.Status(ctx, endpoint); err != nil {
		t.Fatalf("status of %s: %v", endpoint, err)
	}
	return time.Since(start)
}

func timedPut(t *testing.T, cli *clientv3.Client, key string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := cli.Put(ctx, key, "v"); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return time.Since(start)
}

func putWithin(cli *clientv3.Client, limit time.Duration) framework.Condition {
	return framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		start := time.Now()
		if _, err := cli.Put(ctx, "timed", "v"); err != nil {
			return false, err
		}
		if d := time.Since(start); d >= limit {
			return false, fmt.Errorf("put took %s", d)
		}
		return true, nil
	})
}

// tlsConfig is the cluster's client side, nil for a plain cluster.
func tlsConfig(t *testing.T, c *framework.Cluster) *tls.Config {
	t.Helper()
	files := c.TLS()
	if files == nil {
		return nil
	}
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", files.CA)
	}
	cert, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// clientOn returns a client of url alone, closed at t's cleanup.
func clientOn(t *testing.T, c *framework.Cluster, url string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsConfig(t, c), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// metricsClient reads members' /metrics, which etcd serves on the client URL and, under TLS,
// only to a client certificate.
func metricsClient(t *testing.T, c *framework.Cluster) *http.Client {
	t.Helper()
	return &http.Client{Timeout: attemptTimeout, Transport: &http.Transport{TLSClientConfig: tlsConfig(t, c)}}
}

// waitHears waits until local's count of raft bytes received from peer grows.
func waitHears(t *testing.T, hc *http.Client, local, peer *framework.Member) {
	t.Helper()
	last := -1.0
	framework.Eventually(t, peerTimeout, 700*time.Millisecond, local.Name+" hears from "+peer.Name, func(ctx context.Context) (bool, error) {
		v, err := receivedFrom(ctx, hc, local, peer)
		if err != nil {
			return false, err
		}
		prev := last
		last = v
		if prev < 0 || v <= prev {
			return false, fmt.Errorf("received %v bytes, then %v", prev, v)
		}
		return true, nil
	})
}

// keepsHearing checks that local's count of raft bytes received from peer grows between every
// two reads for window. The leader and a follower exchange heartbeats every 100ms, so a link that
// carries them grows between any two reads; one that was cut, or that let a few messages through
// before stalling, does not.
func keepsHearing(t *testing.T, hc *http.Client, local, peer *framework.Member, window time.Duration) {
	t.Helper()
	last := -1.0
	framework.Consistently(t, window, 700*time.Millisecond, local.Name+" keeps hearing from "+peer.Name,
		framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
			v, err := receivedFrom(ctx, hc, local, peer)
			if err != nil {
				return false, err
			}
			prev := last
			last = v
			if prev >= 0 && v <= prev {
				return false, fmt.Errorf("received %v bytes, then %v", prev, v)
			}
			return true, nil
		}))
}

// waitDeaf waits until local's count of raft bytes received from peer stops, and checks that it
// stays stopped: what was in flight when the fault began may still arrive.
func waitDeaf(t *testing.T, hc *http.Client, local, peer *framework.Member) {
	t.Helper()
	what := local.Name + " hears nothing from " + peer.Name
	last := -1.0
	framework.Eventually(t, peerTimeout, 700*time.Millisecond, what, func(ctx context.Context) (bool, error) {
		v, err := receivedFrom(ctx, hc, local, peer)
		if err != nil {
			return false, err
		}
		prev := last
		last = v
		if v != prev {
			return false, fmt.Errorf("received %v bytes, then %v", prev, v)
		}
		return true, nil
	})
	framework.Consistently(t, 2*time.Second, 500*time.Millisecond, what, framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		v, err := receivedFrom(ctx, hc, local, peer)
		if err != nil {
			return false, err
		}
		if v != last {
			return false, fmt.Errorf("received %v bytes, then %v", last, v)
		}
		return true, nil
	}))
}

// receivedFrom reads local's etcd_network_peer_received_bytes_total for peer; no sample yet
// reads as 0.
func receivedFrom(ctx context.Context, hc *http.Client, local, peer *framework.Member) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, local.ListenClientURL()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics of %s: %s", local.Name, resp.Status)
	}
	sample := `etcd_network_peer_received_bytes_total{From="` + peer.IDHex() + `"} `
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// leads is done when the member cli talks to names want as its leader, or none for nil.
func leads(cli *clientv3.Client, m, want *framework.Member) framework.Condition {
	return framework.PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		st, err := cli.Status(ctx, m.ListenClientURL())
		if err != nil {
			return false, err
		}
		var id uint64
		if want != nil {
			id = want.ID()
		}
		if st.Leader != id {
			return false, fmt.Errorf("%s follows %x", m.Name, st.Leader)
		}
		return true, nil
	})
}
