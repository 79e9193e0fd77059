package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// Health is what one probe of a member found.
type Health struct {
	// Reachable: the member answered a status request on its client URLs.
	Reachable bool
	// Serving: the member answered a linearizable read, which needs a leader with quorum. A
	// learner serves no such reads; for it Serving follows Reachable.
	Serving bool
	// Err says why the member is not reachable or not serving.
	Err error
	// Status is what the member said about itself; zero when it was not reachable.
	Status EndpointStatus
	// AnsweredBy is the member that answered on the probed member's client URLs when that was
	// another one (a VIP, a shared or reused address): the probed member is then not known to be
	// up, and counts as unreachable. Zero otherwise.
	AnsweredBy uint64
	// At is when the probe started.
	At time.Time
}

// Pool keeps one connection per member for the leader's probes and pre-removal checks: a new
// connection costs a handshake (and with TLS a few round trips) on every probe, which is most of
// the time a leave spends before etcd is asked to remove the member.
type Pool struct {
	base *Client

	mu    sync.Mutex
	conns map[uint64]*pooled
	// http reads the members' /metrics (PeerTraffic); nil until the first read.
	http *http.Client
}

type pooled struct {
	urls   []string
	client *Client
}

// NewPool returns an empty pool whose connections share base's TLS settings.
func NewPool(base *Client) *Pool {
	return &Pool{base: base, conns: map[uint64]*pooled{}}
}

// conn returns the member's connection, opening one when there is none or its URLs changed.
func (p *Pool) conn(m Member) (*Client, error) {
	if len(m.ClientURLs) == 0 {
		return nil, errors.New("member has no client URLs: it has never started")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[m.ID]; ok {
		if slices.Equal(c.urls, m.ClientURLs) {
			return c.client, nil
		}
		_ = c.client.Close()
		delete(p.conns, m.ID)
	}
	c, err := p.base.WithEndpoints(slices.Clone(m.ClientURLs))
	if err != nil {
		return nil, err
	}
	p.conns[m.ID] = &pooled{urls: slices.Clone(m.ClientURLs), client: c}
	return c, nil
}

// Retain closes the connections of members no longer in the list.
func (p *Pool) Retain(members []Member) {
	keep := map[uint64]bool{}
	for _, m := range members {
		keep[m.ID] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, c := range p.conns {
		if !keep[id] {
			_ = c.client.Close()
			delete(p.conns, id)
		}
	}
}

// Close closes every connection.
func (p *Pool) Close() {
	p.Retain(nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.http != nil {
		p.http.CloseIdleConnections()
	}
}

// Probe asks the member for its status and, when it votes, serves a linearizable read, both
// within timeout. Only the member itself counts: an answer from another member ID (the response
// header says who answered) leaves it unreachable, with AnsweredBy set.
func (p *Pool) Probe(ctx context.Context, m Member, timeout time.Duration) Health {
	h := Health{At: time.Now()}
	c, err := p.conn(m)
	if err != nil {
		h.Err = err
		return h
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The read goes out with the status request rather than after it: a probe before a removal
	// is on the leave's critical path. A learner refuses it, and its answer is then ignored.
	read := make(chan error, 1)
	if !m.IsLearner {
		go func() {
			_, err := c.cli.Get(ctx, "etcdmember-health-probe")
			read <- err
		}()
	}
	st, err := c.localStatus(ctx)
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("Probe").Inc()
		h.Err = fmt.Errorf("status of %v: %w", m.ClientURLs, err)
		return h
	}
	if st.MemberID != m.ID {
		h.AnsweredBy = st.MemberID
		h.Err = fmt.Errorf("%v answered as member %s, not as %s", m.ClientURLs, IDString(st.MemberID), IDString(m.ID))
		return h
	}
	h.Reachable, h.Status = true, st
	if m.IsLearner {
		h.Serving = true
		return h
	}
	if err := <-read; err != nil {
		metrics.EtcdErrors.WithLabelValues("Probe").Inc()
		h.Err = fmt.Errorf("linearizable read from %v: %w", m.ClientURLs, err)
		return h
	}
	h.Serving = true
	return h
}

// MoveLeader asks the leader, which must be m, to hand leadership to transferee.
func (p *Pool) MoveLeader(ctx context.Context, m Member, transferee uint64) error {
	c, err := p.conn(m)
	if err != nil {
		return err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	if _, err := c.cli.MoveLeader(ctx, transferee); err != nil {
		metrics.EtcdErrors.WithLabelValues("MoveLeader").Inc()
		return fmt.Errorf("etcd move leader to %s: %w", IDString(transferee), err)
	}
	return nil
}

// MemberRemove asks via, over its pooled connection, to remove member id. The leader sends a
// removal to a member that stays: the member it removes could answer it itself, and as it applies
// its own removal it answers "etcdserver: server stopped" for a removal that was committed.
func (p *Pool) MemberRemove(ctx context.Context, via Member, id uint64) error {
	c, err := p.conn(via)
	if err != nil {
		return err
	}
	return c.MemberRemove(ctx, id)
}

// localStatus asks the endpoint of a single-endpoint client about itself. clientv3's Status dials
// a new connection for every call; this one reuses the client's own.
func (c *Client) localStatus(ctx context.Context) (EndpointStatus, error) {
	resp, err := etcdserverpb.NewMaintenanceClient(c.cli.ActiveConnection()).Status(ctx, &etcdserverpb.StatusRequest{})
	if err != nil {
		return EndpointStatus{}, rpctypes.Error(err)
	}
	return statusFromProto(resp), nil
}

// Alarms returns the active alarms (NOSPACE, CORRUPT) by member ID. The list is the cluster's,
// agreed through raft, so it needs quorum.
func (c *Client) Alarms(ctx context.Context) (map[uint64][]string, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.cli.AlarmList(ctx)
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("AlarmList").Inc()
		return nil, fmt.Errorf("etcd alarm list: %w", err)
	}
	alarms := map[uint64][]string{}
	for _, a := range resp.Alarms {
		alarms[a.MemberID] = append(alarms[a.MemberID], a.Alarm.String())
	}
	for id := range alarms {
		slices.Sort(alarms[id])
	}
	return alarms, nil
}

// ErrLearnerNotReady is etcd's answer to promoting a learner that has not caught up yet.
var ErrLearnerNotReady = rpctypes.ErrMemberLearnerNotReady

// MemberPromote makes the learner with this ID a voter. etcd refuses with ErrLearnerNotReady
// until the learner's log is close enough to the leader's.
func (c *Client) MemberPromote(ctx context.Context, id uint64) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	if _, err := c.cli.MemberPromote(ctx, id); err != nil {
		if !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			metrics.EtcdErrors.WithLabelValues("MemberPromote").Inc()
		}
		return fmt.Errorf("etcd member promote %s: %w", IDString(id), err)
	}
	return nil
}
