// Package etcd wraps the clientv3 membership and maintenance calls etcdmember needs behind a narrow
// API with its own Member type, so protobuf types stay here and every call carries a timeout.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// DefaultCallTimeout bounds every etcd call unless the caller's context is shorter.
const DefaultCallTimeout = 5 * time.Second

// Config says how to reach etcd. The TLS fields take etcdctl's file names.
type Config struct {
	Endpoints   []string
	CACert      string
	Cert        string
	Key         string
	DialTimeout time.Duration
	CallTimeout time.Duration
}

// Member is one etcd member as the member list reports it.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// FindMember returns the member with this ID from a member list.
func FindMember(members []Member, id uint64) (Member, bool) {
	for _, m := range members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// IDString formats a member ID the way etcdctl prints it.
func IDString(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseID parses a member ID as IDString formats it.
func ParseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("member ID %q is not lowercase hex: %w", s, err)
	}
	if id == 0 {
		return 0, errors.New("member ID 0 is not a valid etcd member ID")
	}
	return id, nil
}

// EndpointStatus is what one member says about itself.
type EndpointStatus struct {
	MemberID  uint64
	Leader    uint64
	IsLearner bool
	RaftTerm  uint64
	RaftIndex uint64
	// DBSize is the size of the member's backend database in bytes.
	DBSize int64
	// Version is the etcd server's version.
	Version string
}

// Client is a connection to an etcd cluster.
type Client struct {
	cli     *clientv3.Client
	cfg     Config
	timeout time.Duration
	// tls is what the client's connections verify etcd with; nil without TLS.
	tls *tls.Config
}

// New connects to etcd. It does not wait for a member to answer: the first call does.
func New(cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints given")
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         tlsConfig,
		// clientv3 logs every retry at info level through its own zap logger; our callers log
		// the errors that matter with context.
		Logger: zap.NewNop(),
		// gRPC's reconnect back-off grows to two minutes; a member that comes back (a restart, a
		// re-join) must be seen within a probe or two, not minutes later.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: cfg.DialTimeout,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("creating etcd client for %v: %w", cfg.Endpoints, err)
	}
	return &Client{cli: cli, cfg: cfg, timeout: cfg.CallTimeout, tls: tlsConfig}, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.cli.Close() }

// Endpoints returns the endpoints the client was configured with.
func (c *Client) Endpoints() []string { return c.cfg.Endpoints }

// WithEndpoints returns a new client to other endpoints with the same TLS settings and timeouts.
// The caller closes it.
func (c *Client) WithEndpoints(endpoints []string) (*Client, error) {
	cfg := c.cfg
	cfg.Endpoints = endpoints
	return New(cfg)
}

// SetEndpoints points the client's calls at other members of the same cluster, balanced over
// those it can connect to; calls in flight keep the member they were sent to. Endpoints still
// returns the configured ones.
func (c *Client) SetEndpoints(endpoints []string) { c.cli.SetEndpoints(endpoints...) }

func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// Status asks one endpoint about itself: its member ID (from the response header), the leader it
// follows and whether it is a learner. An endpoint whose certificate does not verify fails it at
// once, saying so (Verified): clientv3 dials every Status afresh, so one more handshake is cheap.
func (c *Client) Status(ctx context.Context, endpoint string) (EndpointStatus, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	var resp *clientv3.StatusResponse
	err := c.Verified(ctx, endpoint, func(ctx context.Context) (err error) {
		resp, err = c.cli.Status(ctx, endpoint)
		return err
	})
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("Status").Inc()
		return EndpointStatus{}, fmt.Errorf("etcd status of %s: %w", endpoint, err)
	}
	// clientv3's StatusResponse is a defined type over the protobuf one, not a new shape.
	return statusFromProto((*etcdserverpb.StatusResponse)(resp)), nil
}

// MemberList returns the members as the cluster's quorum sees them (a linearizable read).
func (c *Client) MemberList(ctx context.Context) ([]Member, error) {
	members, _, err := c.MemberListHeader(ctx)
	return members, err
}

// MemberRemove removes the member with this ID.
func (c *Client) MemberRemove(ctx context.Context, id uint64) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	if _, err := c.cli.MemberRemove(ctx, id); err != nil {
		metrics.EtcdErrors.WithLabelValues("MemberRemove").Inc()
		return fmt.Errorf("etcd member remove %s: %w", IDString(id), err)
	}
	return nil
}

// MemberUpdate replaces the peer URLs etcd records for the member.
func (c *Client) MemberUpdate(ctx context.Context, id uint64, peerURLs []string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	if _, err := c.cli.MemberUpdate(ctx, id, peerURLs); err != nil {
		metrics.EtcdErrors.WithLabelValues("MemberUpdate").Inc()
		return fmt.Errorf("etcd member update %s: %w", IDString(id), err)
	}
	return nil
}

// The conversions below are the only places that read etcd's protobuf types, so every call that
// returns a member or a status returns all of it.

func fromProto(m *etcdserverpb.Member) Member {
	return Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}

func membersFromProto(ms []*etcdserverpb.Member) []Member {
	members := make([]Member, 0, len(ms))
	for _, m := range ms {
		members = append(members, fromProto(m))
	}
	return members
}

func statusFromProto(resp *etcdserverpb.StatusResponse) EndpointStatus {
	return EndpointStatus{
		MemberID: resp.Header.MemberId, Leader: resp.Leader, IsLearner: resp.IsLearner,
		RaftTerm: resp.RaftTerm, RaftIndex: resp.RaftIndex, DBSize: resp.DbSize, Version: resp.Version,
	}
}
