package framework

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one etcd process of a Cluster. Its address, certificates and ID
// change over its life (MoveTo, Rejoin); its name and directory do not.
type Member struct {
	Name string

	// etcdName is the member's --name when it differs from Name (AddMemberAs); set before the
	// first start and never changed.
	etcdName string

	c    *Cluster
	dir  string
	proc *process

	mu             sync.Mutex
	ip             string
	id             uint64
	certs          *keyPair // nil without TLS
	initialCluster string
	clusterState   string
	// advertiseClient, when set, is the client URL the member publishes instead of its own.
	advertiseClient string
	// links are the member's fault proxy fronts, set once before it first starts in a
	// FaultProxies cluster, nil otherwise.
	links *memberLinks
}

// AdvertiseClientURL makes the member publish url as its client URL from its next start, while it
// still listens on its own: a member behind a VIP, or one whose recorded address another member
// now holds. Empty restores its own URL.
func (m *Member) AdvertiseClientURL(url string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advertiseClient = url
}

// EtcdName is the member's name in etcd: Name unless AddMemberAs gave another.
func (m *Member) EtcdName() string {
	if m.etcdName != "" {
		return m.etcdName
	}
	return m.Name
}

// newMember allocates an address (and, with TLS, a certificate) for a member
// that has not started yet, and registers it with the cluster.
func (c *Cluster) newMember(t TB, name string) *Member {
	t.Helper()
	m := &Member{Name: name, c: c, dir: filepath.Join(c.dir, name)}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		t.Fatalf("member directory: %v", err)
	}
	logPath := filepath.Join(m.dir, "etcd.log")
	// Registered before the process's own cleanup, so that it reads the log once the member is
	// gone, and before the directory's removal, registered earlier still.
	c.owner.Cleanup(func() { noteSlowRequests(c.owner.Name(), name, logPath) })
	m.proc = newProcess(c.owner, "etcd "+name, logPath)
	m.assignAddress(t)
	if c.faults != nil {
		c.faults.addMember(t, m)
	}
	c.mu.Lock()
	c.members = append(c.members, m)
	c.mu.Unlock()
	return m
}

// assignAddress gives m a fresh loopback address (at its first start, the address
// ClusterConfig.IPs fixes for it, if any), re-issuing its certificate for that
// address when the cluster uses TLS.
func (m *Member) assignAddress(t TB) {
	t.Helper()
	ip, fixed := m.c.fixedIPs[m.Name]
	if !fixed || m.IP() != "" {
		var err error
		if ip, err = allocateIP(etcdClientPort, etcdPeerPort); err != nil {
			t.Fatalf("address for member %s: %v", m.Name, err)
		}
	}
	var certs *keyPair
	if m.c.tls != nil {
		// A member dialling a peer's loopback address connects from 127.0.0.1,
		// the kernel's source address for 127.0.0.0/8, and etcd verifies a
		// client certificate's IP SANs against the connection's source; so
		// the certificate names 127.0.0.1 besides the member's own address.
		ips := []net.IP{net.ParseIP(ip), net.IPv4(127, 0, 0, 1)}
		// On a non-loopback interface the kernel's source address for a local destination is the
		// destination itself, so a member dialling a peer at a fixed address connects from the
		// peer's address: every member's certificate names all of them.
		for _, fixedIP := range m.c.fixedIPs {
			ips = append(ips, net.ParseIP(fixedIP))
		}
		var err error
		if certs, err = m.c.ca.issueServing(m.dir, "member", ips); err != nil {
			t.Fatalf("certificate for member %s: %v", m.Name, err)
		}
	}
	m.mu.Lock()
	m.ip, m.certs = ip, certs
	m.mu.Unlock()
}

// ID returns the etcd member ID, learned from the member's own Status answer
// when it last started.
func (m *Member) ID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}

// IDHex returns the ID in hex, as etcdctl prints it.
func (m *Member) IDHex() string { return strconv.FormatUint(m.ID(), 16) }

// IP returns the member's own loopback address (never 127.0.0.1).
func (m *Member) IP() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ip
}

// ClientURL returns the client URL the member advertises (unless AdvertiseClientURL replaced
// it): the one etcd lists, Endpoints() and Client use, and the agents probe. It is
// ListenClientURL, except in a FaultProxies cluster, where it is the front of ClientLink.
func (m *Member) ClientURL() string {
	if l := m.faultLinks(); l != nil {
		return l.clientURL
	}
	return m.ListenClientURL()
}

// ListenClientURL returns scheme://IP:2379, where the member itself listens for clients. No
// fault proxy stands in front of it; the framework reaches members there to start and watch them.
func (m *Member) ListenClientURL() string { return m.url(etcdClientPort) }

// PeerURL returns the peer URL the member advertises: ListenPeerURL, except in a FaultProxies
// cluster, where it is the member's peer front, which routes each connection to its PeerLink.
// After MoveTo, etcd's record keeps the old peer URL until someone calls MemberUpdate.
func (m *Member) PeerURL() string {
	if l := m.faultLinks(); l != nil {
		return l.peerURL
	}
	return m.ListenPeerURL()
}

// ListenPeerURL returns scheme://IP:2380, where the member itself listens for its peers.
func (m *Member) ListenPeerURL() string { return m.url(etcdPeerPort) }

func (m *Member) faultLinks() *memberLinks {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.links
}

func (m *Member) url(port int) string {
	return m.c.scheme() + "://" + net.JoinHostPort(m.IP(), strconv.Itoa(port))
}

// DataDir returns the member's data directory.
func (m *Member) DataDir() string { return filepath.Join(m.dir, "data") }

// LogFile returns the path of the member's log, kept across restarts.
func (m *Member) LogFile() string { return m.proc.logPath }

// Running reports whether the member's process is alive (paused included).
func (m *Member) Running() bool { return m.proc.running() }

// Client returns a client for this member's endpoint only, closed at t's
// cleanup.
func (m *Member) Client(t TB) *clientv3.Client {
	t.Helper()
	return testClient(t, []string{m.ClientURL()}, m.c.tlsCfg)
}

// DirectClient returns a client for ListenClientURL, past every fault proxy, closed at t's
// cleanup.
func (m *Member) DirectClient(t TB) *clientv3.Client {
	t.Helper()
	return testClient(t, []string{m.ListenClientURL()}, m.c.tlsCfg)
}

// Stop sends SIGTERM and waits for the process to exit.
func (m *Member) Stop(t TB) {
	t.Helper()
	if err := m.proc.stop(); err != nil {
		t.Fatalf("stop member %s: %v", m.Name, err)
	}
}

// Kill sends SIGKILL and waits for the process to exit. A member that exited
// on its own, as a removed one does, counts as killed.
func (m *Member) Kill(t TB) {
	t.Helper()
	if err := m.proc.kill(); err != nil {
		t.Fatalf("kill member %s: %v", m.Name, err)
	}
}

// Pause freezes the process with SIGSTOP: it keeps its connections but
// answers nothing, like a hung machine. A member that exited on its own (a
// removed one does) answers nothing either, so that is no error.
func (m *Member) Pause(t TB) {
	t.Helper()
	if err := m.proc.signal(syscall.SIGSTOP); err != nil && !errors.Is(err, errNotRunning) {
		t.Fatalf("pause member %s: %v", m.Name, err)
	}
}

// Resume continues a paused process with SIGCONT; one that has exited has
// nothing to continue.
func (m *Member) Resume(t TB) {
	t.Helper()
	if err := m.proc.signal(syscall.SIGCONT); err != nil && !errors.Is(err, errNotRunning) {
		t.Fatalf("resume member %s: %v", m.Name, err)
	}
}

// Start starts the member again from its data dir and waits until it serves.
// It waits for a leader only when a majority of the cluster's members is then
// running, so that members of a cluster that lost quorum can be started one
// by one.
func (m *Member) Start(t TB) {
	t.Helper()
	m.launch(t, m.c.etcd(t))
	m.waitServing(t, m.c.majorityRunning())
}

// StartUnlessRemoved is Start for a member whose removal may race its start (a dead-member
// policy may be removing it just then): a member etcd removed learns so from its peers and exits,
// and StartUnlessRemoved then returns false. Its exit status does not tell: 0 when the removal
// reached it serving, 1 when it reached it still starting ("listener failed: server is
// stopping"). The evidence is removedMeanwhile's. Any other exit fails the test.
func (m *Member) StartUnlessRemoved(t TB) (serving bool) {
	t.Helper()
	m.launch(t, m.c.etcd(t))
	return !m.waitServingOrRemoved(t, m.c.majorityRunning(), m.removedMeanwhile)
}

// Restart stops the member with SIGTERM and starts it again.
func (m *Member) Restart(t TB) {
	t.Helper()
	m.Stop(t)
	m.Start(t)
}

// Wipe stops the member if it runs and deletes its data dir, as if its disk
// were replaced.
func (m *Member) Wipe(t TB) {
	t.Helper()
	if m.Running() {
		m.Stop(t)
	}
	if err := os.RemoveAll(m.DataDir()); err != nil {
		t.Fatalf("wipe member %s: %v", m.Name, err)
	}
}

// MoveTo restarts the member from its data dir on a new loopback address,
// listening and advertising there (with TLS, on a certificate for the new
// address). It deliberately does not call MemberUpdate: etcd's record keeps
// the old peer URL, so the other members cannot reach this one until the test
// (or the product under test) updates it. MoveTo therefore returns as soon as
// the member answers on its new client URL, without waiting for a leader.
//
// A member of a FaultProxies cluster cannot move: its links are bound to its address.
func (m *Member) MoveTo(t TB) {
	t.Helper()
	if m.faultLinks() != nil {
		t.Fatalf("member %s: MoveTo is not supported in a FaultProxies cluster, whose links are bound to the member's address", m.Name)
	}
	if m.Running() {
		m.Stop(t)
	}
	m.assignAddress(t)
	m.launch(t, m.c.etcd(t))
	m.waitServing(t, false)
}

func (c *Cluster) majorityRunning() bool {
	members := c.Members()
	running := 0
	for _, m := range members {
		if m.proc.responsive() {
			running++
		}
	}
	return 2*running > len(members)
}

func (m *Member) launch(t TB, bin string) {
	t.Helper()
	args := m.args()
	if m.c.wrap != nil {
		if prefix := m.c.wrap(m.Name); len(prefix) > 0 {
			bin, args = prefix[0], append(append(prefix[1:len(prefix):len(prefix)], bin), args...)
		}
	}
	if err := m.proc.start(bin, args...); err != nil {
		t.Fatalf("member %s: %v", m.Name, err)
	}
}

func (m *Member) args() []string {
	client, peer := m.ListenClientURL(), m.ListenPeerURL()
	advertise, advertisePeer := m.ClientURL(), m.PeerURL()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.advertiseClient != "" {
		advertise = m.advertiseClient
	}
	if m.Name == m.c.loopbackClient {
		client += "," + m.c.scheme() + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdClientPort))
	}
	args := []string{
		"--name", m.EtcdName(),
		"--data-dir", m.DataDir(),
		"--listen-client-urls", client,
		"--advertise-client-urls", advertise,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", advertisePeer,
		// Ignored by etcd once the data dir holds a WAL, which is why MoveTo
		// and Start can leave them as they were at the first start.
		"--initial-cluster", m.initialCluster,
		"--initial-cluster-state", m.clusterState,
		"--initial-cluster-token", m.c.token,
	}
	// Test data need not survive a power cut, and fsync dominates commit
	// latency on shared CI disks. etcd 3.4 has no such flag and refuses to
	// start with it; it only runs to be refused by the agents, so it may fsync.
	if m.c.etcdBinary != "etcd-3.4" {
		args = append(args, "--unsafe-no-fsync")
	}
	if m.certs != nil {
		args = append(args,
			"--cert-file", m.certs.CertFile,
			"--key-file", m.certs.KeyFile,
			"--trusted-ca-file", m.c.ca.file,
			"--client-cert-auth",
			"--peer-cert-file", m.certs.CertFile,
			"--peer-key-file", m.certs.KeyFile,
			"--peer-trusted-ca-file", m.c.ca.file,
			"--peer-client-cert-auth",
		)
	}
	return args
}

// waitServing waits until the member answers Status on its own client URL
// (and reports a leader if needLeader), and records the ID it reports.
func (m *Member) waitServing(t TB, needLeader bool) {
	t.Helper()
	m.waitServingOrRemoved(t, needLeader, nil)
}

// waitServingOrRemoved is waitServing that also ends, and reports it, when the member exits and
// removed (nil: never) says it was removed.
func (m *Member) waitServingOrRemoved(t TB, needLeader bool, removed func() bool) bool {
	t.Helper()
	url := m.ListenClientURL()
	cli, err := newClient([]string{url}, m.c.tlsCfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer func() { _ = cli.Close() }()
	return m.proc.waitReadyOrExit(t, memberReadyTimeout, "not serving on "+url, func(ctx context.Context) error {
		st, err := cli.Status(ctx, url)
		if err != nil {
			return err
		}
		if needLeader && st.Leader == 0 {
			return errors.New("no leader")
		}
		m.mu.Lock()
		m.id = st.Header.MemberId
		m.mu.Unlock()
		return nil
	}, removed)
}
