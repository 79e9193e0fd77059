package framework

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Direction picks the bytes of a Link a fault applies to. Every Link leads to an etcd member, so
// the directions are named after it.
type Direction int

const (
	// BothWays is requests and answers alike.
	BothWays Direction = iota
	// ToMember is the bytes the dialing side sends: requests, and a peer's raft messages.
	ToMember
	// FromMember is the bytes the member sends back: answers, watch events, and on a peer
	// connection the raft messages of the member that was dialed.
	FromMember
)

func (d Direction) String() string {
	switch d {
	case BothWays:
		return "both ways"
	case ToMember:
		return "to the member"
	case FromMember:
		return "from the member"
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

// halves maps d onto the proxy's halves. A Direction outside the constants is a bug in the test,
// not a state of the system under test, hence the panic.
func (d Direction) halves() []half {
	switch d {
	case BothWays:
		return []half{tx, rx}
	case ToMember:
		return []half{tx}
	case FromMember:
		return []half{rx}
	}
	panic(fmt.Sprintf("framework: unknown %s", d))
}

// Link is the path of one kind of client to one etcd member, through a fault proxy of its own:
// a member's client URL (Member.ClientLink), one agent's etcd endpoint (Agent.EtcdLink), the
// apiserver's connection to one member (APIServer.EtcdLink), or the peer connections into a
// member that no PeerLink carries (Member.PeerIngress). Faults stay until healed; the proxy
// closes at the cleanup of the test that started what it serves.
type Link struct {
	name string
	url  string
	p    *faultProxy
}

func (l *Link) String() string { return l.name }

// URL is where the link's clients dial: the member's address with the link's own port.
func (l *Link) URL() string { return l.url }

// Blackhole drops the bytes going dir, while the connections stay open: calls time out rather
// than fail.
func (l *Link) Blackhole(dir Direction) {
	for _, h := range dir.halves() {
		l.p.blackhole(h)
	}
}

// Stall holds the bytes going dir, the connections open, until Heal: nothing is lost, calls
// neither fail nor complete meanwhile, and every one sent before or during the stall goes on in
// order once healed, as through a control plane that answers slowly but answers.
func (l *Link) Stall(dir Direction) {
	for _, h := range dir.halves() {
		l.p.stall(h)
	}
}

// Delay holds every chunk of bytes going dir for latency before passing it on; 0 removes the
// delay. etcd's proxy draws the latency once, per direction, from latency ± jitter (a jitter
// above latency counts as latency/10); it does not vary from chunk to chunk.
func (l *Link) Delay(latency, jitter time.Duration, dir Direction) {
	for _, h := range dir.halves() {
		l.p.delay(h, latency, jitter)
	}
}

// Heal lifts every fault. After a Blackhole (in either direction) it closes every connection the
// link carries before the bytes flow again, those that lost no bytes too, as a network partition
// that outlasts TCP's patience would close them, rather than let them resume with a hole in their
// stream; the clients dial again.
func (l *Link) Heal() {
	l.p.heal(tx)
	l.p.heal(rx)
}

// PeerLink is the directed path of one member's raft messages to another. rafthttp carries a
// member's messages to a peer on two kinds of connection, and the peer fronts route each kind
// through proxies of its own, per dialing and dialed member:
//
//   - posts: the pipeline (POST /raft) and snapshot (POST /raft/snapshot) requests the sender
//     dials to the receiver, whose bodies are the sender's messages; the receiver only acks them.
//   - streams: the GET /raft/stream/{msgapp,message}/<receiver's ID> requests the receiver dials
//     to the sender, whose response bodies are the sender's messages.
//
// A PeerLink's faults apply to the requests of the sender's posts and to the responses of the
// receiver's streams from the sender, and to nothing else. The requests that open streams and
// the acks to posts carry no messages and no PeerLink faults them: PeerLink(a, b) never touches
// b's messages to a, not even when the streams that carry them, which a dials to b, are dialed
// again while a's messages to b are cut.
type PeerLink struct {
	name string
	// posts carries the posts from dials to to (its tx is from's messages); streams carries the
	// streams to dials to from (its rx is from's messages).
	posts, streams *faultProxy
}

func (l *PeerLink) String() string { return l.name }

// Blackhole drops the sender's messages.
func (l *PeerLink) Blackhole() {
	l.posts.blackhole(tx)
	l.streams.blackhole(rx)
}

// Delay holds the sender's messages for latency ± jitter, drawn once as Link.Delay says; 0
// removes the delay.
func (l *PeerLink) Delay(latency, jitter time.Duration) {
	l.posts.delay(tx, latency, jitter)
	l.streams.delay(rx, latency, jitter)
}

// Heal lifts the link's faults and, after a Blackhole, closes every connection the link carries
// before the sender's messages flow again: the sender's posts to the receiver and the receiver's
// streams from the sender, which rafthttp dials again. The connections of the other direction are not the link's and stay open.
func (l *PeerLink) Heal() {
	l.posts.heal(tx)
	l.streams.heal(rx)
}

// peerConnKind is what a peer connection carries, which decides whose messages it carries.
type peerConnKind int

const (
	// postConn is a connection whose requests carry the dialing member's messages (pipeline and
	// snapshot posts), and every other one that names its sender.
	postConn peerConnKind = iota
	// streamConn is a connection that opens a rafthttp stream, whose response carries the
	// dialed member's messages to the dialing one.
	streamConn
)

func (k peerConnKind) String() string {
	if k == streamConn {
		return "streams from"
	}
	return "posts to"
}

// peerConn names the proxy of one kind of connection one member dials to another.
type peerConn struct {
	dialer, dialed *Member
	kind           peerConnKind
}

// clusterFaults is the links of a FaultProxies cluster.
type clusterFaults struct {
	net *faultNet

	mu sync.Mutex
	// byPeerURL finds a member by the peer URL it advertises, its peer front's, including
	// members that are pending and not in the cluster's list yet.
	byPeerURL map[string]*Member
	// peerConns carries each kind of connection one member dials to another, made on first use.
	peerConns map[peerConn]*faultProxy
}

// memberLinks are a member's fronts, fixed for its life: MoveTo is refused on such a member.
type memberLinks struct {
	peerURL   string
	clientURL string
	ingress   *faultProxy
	client    *faultProxy
}

func newClusterFaults(t TB, dir string) *clusterFaults {
	t.Helper()
	return &clusterFaults{
		net:       newFaultNet(t, filepath.Join(dir, "faults.log")),
		byPeerURL: map[string]*Member{},
		peerConns: map[peerConn]*faultProxy{},
	}
}

// addMember gives m, whose address is assigned, its peer and client fronts.
func (f *clusterFaults) addMember(t TB, m *Member) {
	t.Helper()
	ip, scheme := m.IP(), m.c.scheme()
	ingress, err := f.net.newProxy(m.Name+" peer ingress", net.JoinHostPort(ip, strconv.Itoa(etcdPeerPort)))
	if err != nil {
		t.Fatalf("member %s: %v", m.Name, err)
	}
	peerAddr, err := f.net.newFront(ip, f.routePeer(m, ingress))
	if err != nil {
		t.Fatalf("member %s: %v", m.Name, err)
	}
	client, clientAddr, err := f.net.newLink(m.Name+" client", ip, net.JoinHostPort(ip, strconv.Itoa(etcdClientPort)))
	if err != nil {
		t.Fatalf("member %s: %v", m.Name, err)
	}
	links := &memberLinks{
		peerURL:   scheme + "://" + peerAddr,
		clientURL: scheme + "://" + clientAddr,
		ingress:   ingress,
		client:    client,
	}
	f.mu.Lock()
	f.byPeerURL[links.peerURL] = m
	f.mu.Unlock()
	m.mu.Lock()
	m.links = links
	m.mu.Unlock()
}

// peerProxy returns the proxy of the connections of kind k that dialer dials to dialed.
func (f *clusterFaults) peerProxy(dialer, dialed *Member, k peerConnKind) (*faultProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := peerConn{dialer: dialer, dialed: dialed, kind: k}
	if p := f.peerConns[key]; p != nil {
		return p, nil
	}
	p, err := f.net.newProxy(dialer.Name+" "+k.String()+" "+dialed.Name, net.JoinHostPort(dialed.IP(), strconv.Itoa(etcdPeerPort)))
	if err != nil {
		return nil, err
	}
	f.peerConns[key] = p
	return p, nil
}

// faultsFor returns the cluster's links, failing t when the cluster was started without
// FaultProxies.
func (c *Cluster) faultsFor(t TB, what string) *clusterFaults {
	t.Helper()
	if c.faults == nil {
		t.Fatalf("%s needs a cluster started with ClusterConfig.FaultProxies", what)
	}
	return c.faults
}

// PeerLink returns the directed link that carries from's raft messages to to. It needs a
// plaintext cluster: the dialer and kind of a peer connection are read from its first request,
// which TLS hides; under TLS, PeerIngress faults all of a member's incoming peer connections at
// once.
func (c *Cluster) PeerLink(t TB, from, to *Member) *PeerLink {
	t.Helper()
	f := c.faultsFor(t, "PeerLink")
	if c.tls != nil {
		t.Fatalf("PeerLink(%s, %s): a TLS cluster hides which member sent a peer connection; use PeerIngress", from.Name, to.Name)
	}
	if from == to || from.c != c || to.c != c {
		t.Fatalf("PeerLink(%s, %s) needs two different members of this cluster", from.Name, to.Name)
	}
	posts, err := f.peerProxy(from, to, postConn)
	if err != nil {
		t.Fatalf("PeerLink(%s, %s): %v", from.Name, to.Name, err)
	}
	streams, err := f.peerProxy(to, from, streamConn)
	if err != nil {
		t.Fatalf("PeerLink(%s, %s): %v", from.Name, to.Name, err)
	}
	return &PeerLink{name: from.Name + "->" + to.Name, posts: posts, streams: streams}
}

// memberLinks returns m's fronts, failing t when its cluster has none.
func (m *Member) memberLinks(t TB, what string) *memberLinks {
	t.Helper()
	m.c.faultsFor(t, what)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.links
}

// PeerIngress returns the link of the peer connections dialed to m that no PeerLink carries:
// under TLS all of them, in a plaintext cluster those whose request names no member (version
// checks, member-list calls, probes). ToMember is the dialing members' bytes, FromMember m's
// answers, including the messages m streams back to them.
func (m *Member) PeerIngress(t TB) *Link {
	t.Helper()
	l := m.memberLinks(t, "PeerIngress")
	return &Link{name: m.Name + " peer ingress", url: l.peerURL, p: l.ingress}
}

// ClientLink returns the link behind m's advertised client URL, ClientURL(): the one agents
// probe, Endpoints() and Client use, and etcd lists. The apiserver and m's own agent have links
// of their own, and ListenClientURL bypasses every link.
func (m *Member) ClientLink(t TB) *Link {
	t.Helper()
	l := m.memberLinks(t, "ClientLink")
	return &Link{name: m.Name + " client URL", url: l.clientURL, p: l.client}
}

// EtcdLink returns the link between the agent and its own member, which the agent's
// --etcd-endpoints names: the agent can lose its local etcd while the member stays reachable for
// its peers, the other agents and the apiserver.
func (a *Agent) EtcdLink(t TB) *Link {
	t.Helper()
	a.member.c.faultsFor(t, "Agent.EtcdLink")
	return a.link
}

// EtcdLink returns the link between the apiserver and member m, one of its --etcd-servers. It
// exists for the members of the cluster when the apiserver started.
func (a *APIServer) EtcdLink(t TB, m *Member) *Link {
	t.Helper()
	a.c.faultsFor(t, "APIServer.EtcdLink")
	l := a.etcdLinks[m]
	if l == nil {
		t.Fatalf("APIServer.EtcdLink: %s was not a member when the apiserver started", m.Name)
	}
	return l
}
