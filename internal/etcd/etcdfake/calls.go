package etcdfake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// The calls of the controller's Cluster, Peers and IntentStore interfaces, each applied to the
// model under its lock, with the faults and hooks a test queued (begin, end).

// MemberList answers the member list, sorted by ID.
func (c *Cluster) MemberList(ctx context.Context) ([]etcd.Member, error) {
	c.mu.Lock()
	after, err := c.begin(ctx, OpMemberList, true)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	out := make([]etcd.Member, 0, len(c.members))
	for _, id := range slices.Sorted(maps.Keys(c.members)) {
		m := c.members[id].Member
		m.PeerURLs, m.ClientURLs = slices.Clone(m.PeerURLs), slices.Clone(m.ClientURLs)
		out = append(out, m)
	}
	err = c.end(ctx, OpMemberList, after)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MemberRemove removes member id, asked of member via, under etcd's strict reconfiguration check:
// removing a voter must leave at least a quorum of the remaining voters active, or etcd refuses
// with ErrUnhealthy. via answers only as Probe finds it serving. A removal sent to the member it
// removes is applied, answered ErrStopped as etcd's member would answer it while stopping, and
// recorded for SentToTarget: the leader must never send one so.
func (c *Cluster) MemberRemove(ctx context.Context, via etcd.Member, id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpMemberRemove, true)
	if err != nil {
		return err
	}
	if h := c.probeLocked(via); !h.Serving {
		return h.Err
	}
	m, ok := c.members[id]
	if !ok {
		return rpctypes.ErrMemberNotFound
	}
	if !m.IsLearner {
		remaining, active := 0, 0
		for _, v := range c.voterIDsLocked() {
			if v == id {
				continue
			}
			remaining++
			if c.activeLocked(v) && !c.members[v].Recent {
				active++
			}
		}
		if remaining == 0 || active < remaining/2+1 {
			return rpctypes.ErrUnhealthy
		}
	}
	delete(c.members, id)
	delete(c.alarms, id)
	c.changes = append(c.changes, Change{Op: OpMemberRemove, ID: id})
	if c.leader == id {
		c.electLocked()
	}
	if via.ID == id {
		c.sentToTarget = append(c.sentToTarget, id)
		return rpctypes.ErrStopped
	}
	return c.end(ctx, OpMemberRemove, after)
}

// MemberPromote promotes a learner that is ready, as etcd does; otherwise ErrLearnerNotReady.
func (c *Cluster) MemberPromote(ctx context.Context, id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpMemberPromote, true)
	if err != nil {
		return err
	}
	m, ok := c.members[id]
	switch {
	case !ok:
		return rpctypes.ErrMemberNotFound
	case !m.IsLearner:
		return rpctypes.ErrMemberNotLearner
	case m.Down || m.Frozen || !m.Ready:
		return etcd.ErrLearnerNotReady
	}
	m.IsLearner = false
	c.changes = append(c.changes, Change{Op: OpMemberPromote, ID: id})
	return c.end(ctx, OpMemberPromote, after)
}

// MemberUpdate sets member id's peer URLs; etcd refuses a URL another member has.
func (c *Cluster) MemberUpdate(ctx context.Context, id uint64, peerURLs []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpMemberUpdate, true)
	if err != nil {
		return err
	}
	m, ok := c.members[id]
	if !ok {
		return rpctypes.ErrMemberNotFound
	}
	for oid, o := range c.members {
		if oid != id && slices.ContainsFunc(o.PeerURLs, func(u string) bool { return slices.Contains(peerURLs, u) }) {
			return rpctypes.ErrPeerURLExist
		}
	}
	m.PeerURLs = slices.Clone(peerURLs)
	c.changes = append(c.changes, Change{Op: OpMemberUpdate, ID: id, PeerURLs: slices.Clone(peerURLs)})
	return c.end(ctx, OpMemberUpdate, after)
}

// Alarms returns the raised alarms by member ID.
func (c *Cluster) Alarms(ctx context.Context) (map[uint64][]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpAlarms, true)
	if err != nil {
		return nil, err
	}
	out := map[uint64][]string{}
	for id, a := range c.alarms {
		out[id] = slices.Clone(a)
	}
	return out, c.end(ctx, OpAlarms, after)
}

// Probe answers as the member on m's client URLs would: nothing when it is down, another ID when
// another member answers there, no linearizable read without a leader.
func (c *Cluster) Probe(ctx context.Context, m etcd.Member, _ time.Duration) etcd.Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return etcd.Health{At: time.Now(), Err: err}
	}
	return c.probeLocked(m)
}

// probeLocked is Probe's answer, under c.mu: MemberRemove's via answers exactly when it serves.
func (c *Cluster) probeLocked(m etcd.Member) etcd.Health {
	h := etcd.Health{At: time.Now()}
	mm, ok := c.members[m.ID]
	switch {
	case !ok || mm.Down:
		h.Err = fmt.Errorf("status of %v: connection refused", m.ClientURLs)
		return h
	case mm.CutFromAgent || mm.Frozen:
		h.Err = fmt.Errorf("status of %v: %w", m.ClientURLs, context.DeadlineExceeded)
		return h
	case mm.AnsweredBy != 0:
		h.AnsweredBy = mm.AnsweredBy
		h.Err = fmt.Errorf("%v answered as member %s, not as %s", m.ClientURLs, etcd.IDString(mm.AnsweredBy), etcd.IDString(m.ID))
		return h
	}
	h.Reachable = true
	h.Status = etcd.EndpointStatus{MemberID: m.ID, IsLearner: mm.IsLearner, RaftTerm: 2, RaftIndex: mm.RaftIndex}
	if !mm.NoLeader && c.quorumLocked() && c.hearsLeaderLocked(m.ID) {
		h.Status.Leader = c.leader
	}
	if mm.IsLearner {
		h.Serving = true
		return h
	}
	if h.Status.Leader == 0 {
		h.Err = fmt.Errorf("linearizable read from %v: %w", m.ClientURLs, context.DeadlineExceeded)
		return h
	}
	h.Serving = true
	return h
}

// MoveLeader hands leadership from m, which must lead, to an active voter.
func (c *Cluster) MoveLeader(ctx context.Context, m etcd.Member, transferee uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpMoveLeader, true)
	if err != nil {
		return err
	}
	t, ok := c.members[transferee]
	switch {
	case c.leader != m.ID:
		return rpctypes.ErrNotLeader
	case !ok || t.IsLearner || !c.activeLocked(transferee):
		return rpctypes.ErrBadLeaderTransferee
	case !c.hearsLeaderLocked(transferee):
		return fmt.Errorf("etcdfake: leader transfer to %s took too long: %w", etcd.IDString(transferee), context.DeadlineExceeded)
	}
	c.leader = transferee
	c.changes = append(c.changes, Change{Op: OpMoveLeader, ID: m.ID, To: transferee})
	return c.end(ctx, OpMoveLeader, after)
}

// PeerTraffic answers as observer's /metrics would about its raft link from peer. Two members
// are connected while both are active for etcd, or one is frozen with its connections open; raft
// messages flow only between the leader and the others, whatever the leading agent reaches. It
// fails when the agent cannot reach observer, when another member answers on observer's client
// URLs, or when observer's metrics are unreadable.
func (c *Cluster) PeerTraffic(ctx context.Context, observer etcd.Member, peer uint64) (etcd.Traffic, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpPeerTraffic, false)
	if err != nil {
		return etcd.Traffic{}, err
	}
	o, ok := c.members[observer.ID]
	switch {
	case !ok || o.Down:
		return etcd.Traffic{}, fmt.Errorf("metrics of %v: connection refused", observer.ClientURLs)
	case o.CutFromAgent || o.Frozen:
		return etcd.Traffic{}, fmt.Errorf("metrics of %v: %w", observer.ClientURLs, context.DeadlineExceeded)
	case o.AnsweredBy != 0:
		return etcd.Traffic{}, fmt.Errorf("metrics of %v: %w: %s", observer.ClientURLs, etcd.ErrMetricsOfAnother, etcd.IDString(o.AnsweredBy))
	case o.MetricsUnreadable:
		return etcd.Traffic{}, fmt.Errorf("metrics of %v: HTTP 403", observer.ClientURLs)
	}
	p, known := c.members[peer]
	active := c.activeLocked(observer.ID) && (c.activeLocked(peer) || known && p.Frozen)
	if c.received[observer.ID] == nil {
		c.received[observer.ID] = map[uint64]float64{}
	}
	if c.activeLocked(observer.ID) && c.activeLocked(peer) && (observer.ID == c.leader || peer == c.leader) && !c.cuts[link(observer.ID, peer)] {
		c.received[observer.ID][peer]++
	}
	t := etcd.Traffic{Active: active, Received: c.received[observer.ID][peer]}
	if err := c.end(ctx, OpPeerTraffic, after); err != nil {
		return etcd.Traffic{}, err
	}
	return t, nil
}

// Retain is a no-op: the model keeps no connections.
func (c *Cluster) Retain([]etcd.Member) {}

// Intents is the cluster's removal intents, stored through raft like any key.
type Intents struct{ c *Cluster }

// Intents returns the cluster's intent store.
func (c *Cluster) Intents() *Intents { return &Intents{c: c} }

// Put stores the intent and returns the request stored before, "" for none.
func (i *Intents) Put(ctx context.Context, id uint64, request string) (string, error) {
	c := i.c
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpIntentPut, true)
	if err != nil {
		return "", err
	}
	prior := c.intents[id]
	c.intents[id] = request
	return prior, c.end(ctx, OpIntentPut, after)
}

// Get returns the request the intent for id names, "" for none.
func (i *Intents) Get(ctx context.Context, id uint64) (string, error) {
	c := i.c
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpIntentGet, true)
	if err != nil {
		return "", err
	}
	request := c.intents[id]
	if err := c.end(ctx, OpIntentGet, after); err != nil {
		return "", err
	}
	return request, nil
}

// Delete withdraws the intent for id.
func (i *Intents) Delete(ctx context.Context, id uint64) error {
	c := i.c
	c.mu.Lock()
	defer c.mu.Unlock()
	after, err := c.begin(ctx, OpIntentDelete, true)
	if err != nil {
		return err
	}
	delete(c.intents, id)
	return c.end(ctx, OpIntentDelete, after)
}

// ErrInjected is a ready-made error for Fail.
var ErrInjected = errors.New("etcdfake: injected failure")
