// Package etcdfake models an etcd cluster in memory, closely enough for the controller's unit
// tier: voters and learners, one leader, members that are down, cut off from the leading agent
// only, or answer under another ID, which members hear which, etcd's strict reconfiguration
// checks, and calls whose answer is lost after the cluster applied them.
// It implements the controller's Cluster, Peers and IntentStore interfaces and records every
// membership change it applied, so a test asserts on what happened to the cluster, not on calls.
//
// It is a model, not etcd: there is no log, no election timing and no network. Anything a test
// claims about real etcd belongs in test/e2e, on real processes.
package etcdfake

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Op names a call of the model, for faults and the record of changes.
type Op string

// The calls a fault can be injected into.
const (
	OpMemberList    Op = "MemberList"
	OpMemberRemove  Op = "MemberRemove"
	OpMemberPromote Op = "MemberPromote"
	OpMemberUpdate  Op = "MemberUpdate"
	OpAlarms        Op = "Alarms"
	OpMoveLeader    Op = "MoveLeader"
	OpPeerTraffic   Op = "PeerTraffic"
	OpIntentPut     Op = "IntentPut"
	OpIntentGet     Op = "IntentGet"
	OpIntentDelete  Op = "IntentDelete"
)

// ErrNoQuorum is what a call that needs the cluster's agreement returns while fewer than a quorum
// of voters run: a real client times out.
var ErrNoQuorum = fmt.Errorf("etcdfake: no quorum: %w", context.DeadlineExceeded)

// ErrAnswerLost is returned by a call the cluster applied but whose answer never reached the
// caller (a timeout after the commit, a connection cut after the request went out).
var ErrAnswerLost = fmt.Errorf("etcdfake: answer lost after the change was applied: %w", context.DeadlineExceeded)

// Member is one modelled member.
type Member struct {
	etcd.Member
	// Down: the process is stopped or cut off from everyone; it answers nothing, its peers do
	// not hear it, and it counts as inactive for etcd's strict reconfiguration checks.
	Down bool
	// Frozen: the process is stopped (SIGSTOP, a hung machine that still answers TCP). Like Down
	// it answers nothing and sends nothing, but its connections stay open, so its peers' metrics
	// still count it active. The model's strict reconfiguration checks count it inactive, where
	// etcd counts it active; no case here turns on that difference.
	Frozen bool
	// CutFromAgent: only the leading agent's path to the member's client URLs is broken (a
	// firewall rule, a route on the leader's node). Probes and metric reads from the agent get no
	// answer, while for etcd the member runs: its peers hear it and it counts as active.
	CutFromAgent bool
	// MetricsUnreadable: the member answers probes, but reading its /metrics fails (a proxy in
	// front of it that passes only gRPC, a scrape refused).
	MetricsUnreadable bool
	// NoLeader: the member answers status, but has lost its leader (a partition on its side), so
	// it serves no linearizable read, and neither hears its peers nor is heard by them.
	NoLeader bool
	// Recent: the member came back less than 5 s ago (its etcd restarted). It serves, hears the
	// leader and is heard, but etcd's strict reconfiguration check counts a peer active only once
	// connected for 5 s, so a removal that needs it active is refused.
	Recent bool
	// AnsweredBy makes another member answer on this member's client URLs (a VIP, a reused
	// address); probes then find this member unreachable.
	AnsweredBy uint64
	// Ready: a learner close enough to the leader's log to be promoted.
	Ready     bool
	RaftIndex uint64
}

// Change is one membership change the model applied.
type Change struct {
	Op Op
	ID uint64
	// To is the transferee of a MoveLeader; PeerURLs the new URLs of a MemberUpdate.
	To       uint64
	PeerURLs []string
}

// Cluster is the modelled cluster. Its zero value is not usable; use New.
type Cluster struct {
	mu      sync.Mutex
	members map[uint64]*Member
	leader  uint64
	intents map[uint64]string
	alarms  map[uint64][]string
	faults  map[Op][]fault
	changes []Change
	calls   map[Op]int
	hooks   map[hookKey]func()
	// cuts are the links between two members that carry nothing, either way (a firewall rule
	// between two nodes). Their connections stay open, as the fault proxy's do on the test bed,
	// so etcd still counts both ends active.
	cuts map[[2]uint64]bool
	// received counts, by observer and then peer, the raft messages observer received from peer:
	// one per read of observer's metrics while peer is heard.
	received map[uint64]map[uint64]float64
	// sentToTarget are the members that were asked to remove themselves (MemberRemove).
	sentToTarget []uint64
}

// When says whether a hook runs before a call is applied or after.
type When bool

// The two points of a call a hook can run at.
const (
	Before When = false
	After  When = true
)

type hookKey struct {
	op   Op
	when When
}

type fault struct {
	err error
	// after: the call is applied before err is returned.
	after bool
}

// New returns a cluster of the given members, led by the first voter.
func New(members ...Member) *Cluster {
	c := &Cluster{
		members: map[uint64]*Member{}, intents: map[uint64]string{}, alarms: map[uint64][]string{},
		faults: map[Op][]fault{}, calls: map[Op]int{}, hooks: map[hookKey]func(){},
		received: map[uint64]map[uint64]float64{}, cuts: map[[2]uint64]bool{},
	}
	for i := range members {
		m := members[i]
		c.members[m.ID] = &m
		if c.leader == 0 && !m.IsLearner {
			c.leader = m.ID
		}
	}
	return c
}

// Voters returns n voters with IDs 1..n, named node-1..node-n, on 127.0.0.<id>.
func Voters(n int) []Member {
	out := make([]Member, 0, n)
	for id := uint64(1); id <= uint64(n); id++ {
		out = append(out, Member{Member: etcd.Member{
			ID: id, Name: fmt.Sprintf("node-%d", id),
			PeerURLs:   []string{fmt.Sprintf("https://127.0.0.%d:2380", id)},
			ClientURLs: []string{fmt.Sprintf("https://127.0.0.%d:2379", id)},
		}, RaftIndex: 100})
	}
	return out
}

// Learner returns a started learner with this ID.
func Learner(id uint64, ready bool) Member {
	m := Voters(int(id))[id-1]
	// Behind the voters' index 100: a learner still replicating.
	m.IsLearner, m.Ready, m.RaftIndex = true, ready, 10
	return m
}

// Cut cuts the link between members a and b, both ways, or heals it.
func (c *Cluster) Cut(a, b uint64, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cut {
		c.cuts[link(a, b)] = true
	} else {
		delete(c.cuts, link(a, b))
	}
}

func link(a, b uint64) [2]uint64 {
	if a > b {
		a, b = b, a
	}
	return [2]uint64{a, b}
}

// Set changes member id in place under the model's lock.
func (c *Cluster) Set(id uint64, f func(*Member)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.members[id]; ok {
		f(m)
		if (m.Down || m.Frozen) && c.leader == id {
			c.electLocked()
		}
	}
}

// Add puts a member into the member list, as a MemberAdd by another tool would.
func (c *Cluster) Add(m Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[m.ID] = &m
}

// SetLeader makes id the leader.
func (c *Cluster) SetLeader(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = id
}

// Leader returns the current leader, 0 without quorum.
func (c *Cluster) Leader() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.quorumLocked() {
		return 0
	}
	return c.leader
}

// SetAlarm raises alarm on member id.
func (c *Cluster) SetAlarm(id uint64, alarm string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alarms[id] = append(c.alarms[id], alarm)
}

// Fail makes the next call of op fail with err before it is applied.
func (c *Cluster) Fail(op Op, err error) { c.addFault(op, fault{err: err}) }

// LoseAnswer makes the next call of op apply and then fail with ErrAnswerLost.
func (c *Cluster) LoseAnswer(op Op) { c.addFault(op, fault{err: ErrAnswerLost, after: true}) }

func (c *Cluster) addFault(op Op, f fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[op] = append(c.faults[op], f)
}

// Hook runs f at every call of op, before or after the call is applied. f runs under the model's
// lock and must not call the Cluster. Tests use it to change the world between a reconcile's read
// and its act, or to crash the caller there: a hook that cancels the caller's context makes the
// call, and everything the caller does after it, fail as if its process had died at that point.
func (c *Cluster) Hook(op Op, when When, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks[hookKey{op, when}] = f
}

// Changes returns the membership changes applied so far, in order.
func (c *Cluster) Changes() []Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.changes)
}

// SentToTarget returns the members that MemberRemove asked to remove themselves, in order.
func (c *Cluster) SentToTarget() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sentToTarget)
}

// Calls returns how often op was called, faults included.
func (c *Cluster) Calls(op Op) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

// Has tells whether member id is in the member list.
func (c *Cluster) Has(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.members[id]
	return ok
}

// IsLearner tells whether member id is a learner.
func (c *Cluster) IsLearner(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[id]
	return ok && m.IsLearner
}

// Intent returns the request named in the intent to remove id, and whether one is stored.
func (c *Cluster) Intent(id uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.intents[id]
	return o, ok
}

// begin counts a call and takes its fault, if one is queued. It fails the call at once for a
// fault before the change, or for the cluster having no quorum when the call needs it.
func (c *Cluster) begin(ctx context.Context, op Op, needsQuorum bool) (after error, err error) {
	c.calls[op]++
	if f := c.hooks[hookKey{op, Before}]; f != nil {
		f()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q := c.faults[op]; len(q) > 0 {
		f := q[0]
		c.faults[op] = q[1:]
		if !f.after {
			return nil, f.err
		}
		after = f.err
	}
	if needsQuorum && !c.quorumLocked() {
		return nil, ErrNoQuorum
	}
	return after, nil
}

// end runs op's after-hook and returns what the caller gets: its context's error when the hook
// ended it, else the queued fault's error, if any.
func (c *Cluster) end(ctx context.Context, op Op, after error) error {
	if f := c.hooks[hookKey{op, After}]; f != nil {
		f()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return after
}

func (c *Cluster) voterIDsLocked() []uint64 {
	var ids []uint64
	for id, m := range c.members {
		if !m.IsLearner {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (c *Cluster) activeLocked(id uint64) bool {
	m, ok := c.members[id]
	return ok && !m.Down && !m.Frozen && !m.NoLeader
}

// hearsLeaderLocked: member id runs, and so does the leader, and no cut lies between them.
func (c *Cluster) hearsLeaderLocked(id uint64) bool {
	return c.activeLocked(id) && c.activeLocked(c.leader) && (id == c.leader || !c.cuts[link(id, c.leader)])
}

// quorumLocked: a quorum of the voters runs and hears the leader.
func (c *Cluster) quorumLocked() bool {
	voters := c.voterIDsLocked()
	hearing := 0
	for _, id := range voters {
		if c.hearsLeaderLocked(id) {
			hearing++
		}
	}
	return len(voters) > 0 && hearing >= len(voters)/2+1
}

// electLocked makes the lowest active voter lead, the way an election ends up with some leader.
func (c *Cluster) electLocked() {
	c.leader = 0
	for _, id := range c.voterIDsLocked() {
		if c.activeLocked(id) {
			c.leader = id
			return
		}
	}
}
