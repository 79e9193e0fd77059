package framework

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
	// memberReadyTimeout covers a cold start on a loaded 2-core machine,
	// including an election.
	memberReadyTimeout = 30 * time.Second
	// callTimeout bounds single membership calls made on the caller's behalf.
	callTimeout = 10 * time.Second
)

// ClusterConfig describes the cluster NewCluster starts.
type ClusterConfig struct {
	// Size is the number of voting members, 1 to 7, named "node-1" to "node-N".
	Size int
	// TLS serves client and peer URLs over https with mutual TLS on both,
	// using a CA generated for the cluster.
	TLS bool
	// EtcdBinary is the name under bin/ of the etcd every member of the
	// cluster runs, "etcd" when empty: "etcd-3.5" runs the older minor that
	// kubeadm up to 1.30 and k3s still ship, "etcd-3.4" one below the floor
	// the agents lead. Restarted, re-joined and added members run it too,
	// since a cluster mixing minors is an upgrade, not a test of one version.
	EtcdBinary string
	// FaultProxies puts fault proxies on the cluster's network paths: between every two members
	// (PeerLink, PeerIngress), behind every member's advertised client URL (ClientLink), between
	// each agent and its member (Agent.EtcdLink), and between the apiserver and each member
	// (APIServer.EtcdLink). Members then advertise the proxies' URLs, and cannot MoveTo.
	FaultProxies bool
	// IPs, when set, are the addresses members node-1, node-2, ... take at their first start instead
	// of loopback ones: the node tier puts them on its network namespace's interface, where a
	// kubelet node's agent reaches its member at the node's address (NodeAddress).
	IPs []string
	// LoopbackClient names the member that also serves clients on 127.0.0.1:2379, where kubeadm's
	// etcd listens and deploy/static-pod reaches it. Only in a network namespace of the test's own
	// (the node tier): on the machine's loopback, parallel tests would compete for the address.
	LoopbackClient string
	// Wrap, when set, gives the command a member's etcd runs under (nil: none): the node tier
	// starts the etcd of a node that has namespaces of its own inside them (NodeNamespaces.Command).
	Wrap func(member string) []string
}

// Cluster is a set of real etcd processes, each on its own loopback address.
// Membership-changing methods (AddMember, Rejoin) and a member's lifecycle
// methods are meant to be called from one goroutine; the accessors are safe
// to call from any.
type Cluster struct {
	owner  TB
	dir    string
	ca     *authority
	tls    *TLSFiles   // nil without TLS
	tlsCfg *tls.Config // client side; nil without TLS
	token  string
	// etcdBinary is ClusterConfig.EtcdBinary with its default applied.
	etcdBinary string
	faults     *clusterFaults // nil without ClusterConfig.FaultProxies
	// fixedIPs and loopbackClient are ClusterConfig.IPs (by member name) and LoopbackClient.
	fixedIPs       map[string]string
	loopbackClient string
	wrap           func(member string) []string

	mu      sync.Mutex
	members []*Member
}

// NewCluster starts cfg.Size members and returns once every member serves and
// all agree on the membership. Every process is killed at t's cleanup.
func NewCluster(t TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Size < 1 || cfg.Size > 7 {
		t.Fatalf("cluster size %d out of range 1..7", cfg.Size)
	}
	if cfg.EtcdBinary == "" {
		cfg.EtcdBinary = "etcd"
	}
	bin := Binary(t, cfg.EtcdBinary)
	c := &Cluster{owner: t, dir: t.TempDir(), token: "framework-" + rand.Text()[:8], etcdBinary: cfg.EtcdBinary,
		fixedIPs: map[string]string{}, loopbackClient: cfg.LoopbackClient, wrap: cfg.Wrap}
	for i, ip := range cfg.IPs {
		c.fixedIPs[fmt.Sprintf("node-%d", i+1)] = ip
	}
	var err error
	if c.ca, err = newAuthority(c.dir); err != nil {
		t.Fatalf("cluster CA: %v", err)
	}
	if cfg.TLS {
		client, err := c.ca.issueClient(c.dir, "etcd-client", "root")
		if err != nil {
			t.Fatalf("etcd client certificate: %v", err)
		}
		c.tls = &TLSFiles{CA: c.ca.file, ClientCert: client.CertFile, ClientKey: client.KeyFile}
		if c.tlsCfg, err = tlsConfig(c.ca.certPEM, client); err != nil {
			t.Fatalf("etcd client TLS: %v", err)
		}
	}
	if cfg.FaultProxies {
		// Before any member exists: the links' cleanup then runs after the members are killed.
		c.faults = newClusterFaults(t, c.dir)
	}

	var initial []string
	for i := 1; i <= cfg.Size; i++ {
		m := c.newMember(t, fmt.Sprintf("node-%d", i))
		initial = append(initial, m.Name+"="+m.PeerURL())
	}
	// A new cluster elects its first leader only once a majority runs, so
	// every process starts before any is waited for.
	for _, m := range c.Members() {
		m.initialCluster, m.clusterState = strings.Join(initial, ","), "new"
		m.launch(t, bin)
	}
	for _, m := range c.Members() {
		m.waitServing(t, true)
	}
	c.waitAgreement(t)
	return c
}

// etcd returns the path of the etcd binary the cluster's members run, failing t with the command
// that builds it when it is missing.
func (c *Cluster) etcd(t TB) string {
	t.Helper()
	return Binary(t, c.etcdBinary)
}

func (c *Cluster) scheme() string {
	if c.tls != nil {
		return "https"
	}
	return "http"
}

// Members returns every member the cluster has started, in order, including
// added ones and those currently stopped.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// Member returns the member with the given name, or nil.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.Members() {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Endpoints returns the client URLs (ClientURL) of the members that are running and not
// paused: a paused member accepts connections but never answers, which would
// stall the requests a client balances onto it.
func (c *Cluster) Endpoints() []string { return c.endpoints((*Member).ClientURL) }

// listenEndpoints is Endpoints with each member's ListenClientURL: the framework's own calls
// reach the members past the fault proxies, so that a test's faults cannot fail them.
func (c *Cluster) listenEndpoints() []string { return c.endpoints((*Member).ListenClientURL) }

func (c *Cluster) endpoints(url func(*Member) string) []string {
	var eps []string
	for _, m := range c.Members() {
		if m.proc.responsive() {
			eps = append(eps, url(m))
		}
	}
	return eps
}

// Client returns a client over Endpoints(), with TLS configured when the
// cluster has it. It is closed at t's cleanup.
func (c *Cluster) Client(t TB) *clientv3.Client {
	t.Helper()
	return testClient(t, c.Endpoints(), c.tlsCfg)
}

// ClientOf returns a client over the client URLs of the members given only, balancing between
// them as a client with several endpoints does, with TLS configured when the cluster has it and
// dialOpts added to the framework's own, such as an interceptor that notes which member served
// each call. It is closed at t's cleanup, or earlier by the caller.
func (c *Cluster) ClientOf(t TB, members []*Member, dialOpts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	urls := make([]string, len(members))
	for i, m := range members {
		urls[i] = m.ClientURL()
	}
	return testClient(t, urls, c.tlsCfg, dialOpts...)
}

// TLS returns the client certificate files, or nil for a plain cluster.
func (c *Cluster) TLS() *TLSFiles {
	return c.tls
}

// Leader returns the member etcd currently reports as leader, waiting for an
// election if there is none.
func (c *Cluster) Leader(t TB) *Member {
	t.Helper()
	cli, err := newClient(c.listenEndpoints(), c.tlsCfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer func() { _ = cli.Close() }()
	var leader *Member
	err = poll(memberReadyTimeout, func(ctx context.Context) error {
		var errs []error
		for _, ep := range cli.Endpoints() {
			st, err := cli.Status(ctx, ep)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if st.Leader == 0 {
				errs = append(errs, fmt.Errorf("%s: no leader", ep))
				continue
			}
			if leader = c.memberByID(st.Leader); leader == nil {
				return fmt.Errorf("leader %x is not a member started by the framework", st.Leader)
			}
			return nil
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatalf("no etcd leader: %v", err)
	}
	return leader
}

// FindMember returns the member with that ID in an etcd member list, or nil.
func FindMember(members []*etcdserverpb.Member, id uint64) *etcdserverpb.Member {
	for _, m := range members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

func (c *Cluster) memberByID(id uint64) *Member {
	for _, m := range c.Members() {
		if m.ID() == id {
			return m
		}
	}
	return nil
}

// AddMember adds a member (a learner if asked) on a fresh address through
// MemberAdd, starts it with initial-cluster-state=existing and waits until it
// serves.
func (c *Cluster) AddMember(t TB, name string, learner bool) *Member {
	t.Helper()
	return c.AddMemberAs(t, name, name, learner)
}

// AddMemberAs is AddMember for a member whose etcd name (--name) differs from the framework's
// name for it, e.g. two members that share one etcd name.
func (c *Cluster) AddMemberAs(t TB, name, etcdName string, learner bool) *Member {
	t.Helper()
	if c.Member(name) != nil {
		t.Fatalf("member %s already exists", name)
	}
	bin := c.etcd(t)
	m := c.newMember(t, name)
	m.etcdName = etcdName
	c.join(t, m, learner)
	m.launch(t, bin)
	m.waitServing(t, true)
	return m
}

// Rejoin brings m back the way a wiped node returns: it stops m if running,
// deletes its data dir, removes m's old record if the cluster still has it
// (etcd refuses a second member with the same peer URL), adds m's peer URL
// again through MemberAdd (as a learner if asked) and starts m as part of an
// existing cluster. m.ID() then returns the new ID.
func (c *Cluster) Rejoin(t TB, m *Member, learner bool) {
	t.Helper()
	bin := c.etcd(t)
	m.Wipe(t)
	c.removeRecord(t, m.ID())
	c.join(t, m, learner)
	m.launch(t, bin)
	m.waitServing(t, true)
}

func (c *Cluster) removeRecord(t TB, id uint64) {
	t.Helper()
	cli, err := newClient(c.listenEndpoints(), c.tlsCfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer func() { _ = cli.Close() }()
	// Every error is retried: besides rejectedForNow's reasons, etcd refuses
	// to remove a member it still counts as connected until the stream to the
	// stopped process is gone, and a timed-out removal that did happen shows
	// up in the next MemberList.
	err = poll(memberReadyTimeout, func(ctx context.Context) error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return fmt.Errorf("member list: %w", err)
		}
		if FindMember(list.Members, id) == nil {
			return nil
		}
		if _, err := cli.MemberRemove(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return fmt.Errorf("remove member %x: %w", id, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("removing old record of member %x: %v", id, err)
	}
}

// join records m's peer URL in the cluster through MemberAdd and prepares m's
// flags for joining it.
func (c *Cluster) join(t TB, m *Member, learner bool) {
	t.Helper()
	cli, err := newClient(c.listenEndpoints(), c.tlsCfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer func() { _ = cli.Close() }()
	add := cli.MemberAdd
	if learner {
		add = cli.MemberAddAsLearner
	}
	var resp *clientv3.MemberAddResponse
	// lost: an earlier attempt's answer was lost, so that add may have been applied all the same
	// (sent through a member cut off from etcd's leader, it is applied and never answered).
	lost := false
	err = poll(memberReadyTimeout, func(ctx context.Context) error {
		if lost {
			// Looked for before adding again: an applied voter add counts against etcd's strict
			// reconfiguration check, which would refuse the retry for another reason.
			r, err := addedEarlier(ctx, cli, m.PeerURL(), learner)
			if err != nil || r != nil {
				resp = r
				return err
			}
		}
		r, err := add(ctx, []string{m.PeerURL()})
		switch {
		case err == nil:
			resp = r
			return nil
		case answerLost(err):
			lost = true
			return err
		case lost && (errors.Is(err, rpctypes.ErrPeerURLExist) || errors.Is(err, rpctypes.ErrMemberExist)):
			// Applied since the look: the next attempt finds it. etcd derives a member's ID
			// from its peer URLs and the second of the add, so a duplicate may meet the ID first.
			return err
		case rejectedForNow(err):
			return err
		}
		return Stop(err)
	})
	if err != nil {
		t.Fatalf("add member %s (%s, learner=%v): %v", m.Name, m.PeerURL(), learner, err)
	}
	var listedBy []uint64
	for _, mm := range resp.Members {
		if mm.ID != resp.Member.ID {
			listedBy = append(listedBy, mm.ID)
		}
	}
	c.waitListed(t, m, resp.Member.ID, listedBy)
	// etcd only compares peer URLs when a member joins, so the others are
	// listed under their IDs: names may be empty (members that never started)
	// or shared (AddMemberAs), and either would merge two members into one.
	var initial []string
	for _, mm := range resp.Members {
		name := strconv.FormatUint(mm.ID, 16)
		if mm.ID == resp.Member.ID {
			name = m.EtcdName()
		}
		for _, u := range mm.PeerURLs {
			initial = append(initial, name+"="+u)
		}
	}
	m.mu.Lock()
	m.initialCluster, m.clusterState = strings.Join(initial, ","), "existing"
	m.mu.Unlock()
}

// waitListed waits until every other member that answers lists the member just added as id. A
// joining member checks its initial cluster against the member list of the first peer it reaches,
// and exits for good ("member count is unequal") if that peer has not applied the addition yet,
// which on slow peer links (a Delay fault) it often has not. Only the members whose IDs are in
// members, the membership MemberAdd returned, are asked: a removed member that still runs is no
// peer of the joining one, and never lists it. A member that does not answer (down, frozen)
// cannot be asked by the joining one either, so it is not waited for; the members are asked at
// once, each within listTimeout, and one whose call the attempt's own deadline cut short was not
// checked, so the attempt fails.
func (c *Cluster) waitListed(t TB, m *Member, id uint64, members []uint64) {
	t.Helper()
	const listTimeout = time.Second
	var others []*Member
	for _, mm := range c.Members() {
		if mm != m && mm.Running() && slices.Contains(members, mm.ID()) {
			others = append(others, mm)
		}
	}
	err := poll(memberReadyTimeout, func(ctx context.Context) error {
		clients := make([]*clientv3.Client, len(others))
		for i, mm := range others {
			cli, err := newClient([]string{mm.ListenClientURL()}, c.tlsCfg)
			if err != nil {
				return err
			}
			defer func() { _ = cli.Close() }()
			clients[i] = cli
		}
		lists := make([][]*etcdserverpb.Member, len(others))
		errs := make([]error, len(others))
		var wg sync.WaitGroup
		for i, cli := range clients {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, listTimeout)
				defer cancel()
				resp, err := cli.MemberList(cctx, clientv3.WithSerializable())
				if err != nil {
					errs[i] = err
					return
				}
				lists[i] = resp.Members
			})
		}
		wg.Wait()
		for i, mm := range others {
			switch {
			case errs[i] != nil && ctx.Err() != nil:
				// The attempt ran out of time before mm answered or gave up: mm is unchecked.
				return fmt.Errorf("asking %s whether it lists member %x: %w", mm.Name, id, ctx.Err())
			case errs[i] != nil:
				// mm does not answer: not waited for.
			case !slices.ContainsFunc(lists[i], func(x *etcdserverpb.Member) bool { return x.ID == id }):
				return fmt.Errorf("%s does not list member %x yet", mm.Name, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("adding %s: %v", m.Name, err)
	}
}

// errLearnerRefuses is a learner's refusal of any call but a serializable read: the client that
// makes membership calls balances over every member, learners included.
var errLearnerRefuses = rpctypes.Error(rpctypes.ErrGRPCNotSupportedForLearner)

// rejectedForNow reports whether etcd refused a membership change before
// proposing it, for a reason that passes: strict reconfiguration checks
// refuse changes until the serving member has been connected to a quorum for
// five seconds, which is the case right after a cluster starts or a member
// restarts; and a learner refuses every change, which the next attempt sends
// to another member.
func rejectedForNow(err error) bool {
	return errors.Is(err, rpctypes.ErrUnhealthy) || errors.Is(err, rpctypes.ErrMemberNotEnoughStarted) ||
		errors.Is(err, errLearnerRefuses)
}

// answerLost tells whether a call failed without an answer from etcd, so that it may have been
// applied.
func answerLost(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost):
		return true
	}
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// addedEarlier finds an add of peerURL that etcd applied although its answer was lost: the
// member that has that peer URL, has not started and is a learner exactly when the add asked
// for one, with the membership as it is now; nil when etcd lists no member with that peer URL.
func addedEarlier(ctx context.Context, cli *clientv3.Client, peerURL string, learner bool) (*clientv3.MemberAddResponse, error) {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	for _, mm := range list.Members {
		if !slices.Contains(mm.PeerURLs, peerURL) {
			continue
		}
		if mm.Name != "" || mm.IsLearner != learner {
			return nil, Stop(fmt.Errorf("peer URL %s belongs to member %x (name %q, learner=%v), not to an add of ours (learner=%v)", peerURL, mm.ID, mm.Name, mm.IsLearner, learner))
		}
		return &clientv3.MemberAddResponse{Header: list.Header, Member: mm, Members: list.Members}, nil
	}
	return nil, nil
}

// waitAgreement waits until every member, asked on its own endpoint, lists
// the same started members, one per framework member.
func (c *Cluster) waitAgreement(t TB) {
	t.Helper()
	members := c.Members()
	clients := make([]*clientv3.Client, len(members))
	for i, m := range members {
		cli, err := newClient([]string{m.ListenClientURL()}, c.tlsCfg)
		if err != nil {
			t.Fatalf("%v", err)
		}
		defer func() { _ = cli.Close() }()
		clients[i] = cli
	}
	err := poll(memberReadyTimeout, func(ctx context.Context) error {
		want := c.expectedView()
		for i, cli := range clients {
			view, err := membershipView(ctx, cli)
			if err != nil {
				return fmt.Errorf("%s: %w", members[i].Name, err)
			}
			if view != want {
				return fmt.Errorf("%s lists %s, want %s", members[i].Name, view, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("members do not agree on membership: %v (logs in %s)", err, c.dir)
	}
}

// membershipView renders the membership as cli's endpoint sees it, sorted by
// ID, in a form that is easy to compare and to read in an error.
func membershipView(ctx context.Context, cli *clientv3.Client) (string, error) {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("member list: %w", err)
	}
	byID := map[uint64]string{}
	for _, mm := range list.Members {
		byID[mm.ID] = fmt.Sprintf("%s=%s", mm.Name, strings.Join(mm.PeerURLs, ";"))
	}
	return renderView(byID), nil
}

// expectedView renders the framework's own idea of the membership in the
// format of membershipView.
func (c *Cluster) expectedView() string {
	byID := map[uint64]string{}
	for _, m := range c.Members() {
		byID[m.ID()] = fmt.Sprintf("%s=%s", m.Name, m.PeerURL())
	}
	return renderView(byID)
}

func renderView(byID map[uint64]string) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		parts = append(parts, fmt.Sprintf("%x:%s", id, byID[id]))
	}
	return strings.Join(parts, ",")
}
