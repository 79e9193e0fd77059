package controller

import (
	"context"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// The controller reaches etcd through three narrow interfaces of its own, each one concern:
// what the whole cluster answers (Cluster), what one member answers on its own client URLs
// (Peers), and the removal intents (IntentStore). internal/etcd implements them against a real
// cluster; internal/etcd/etcdfake models a raft cluster in memory for the unit tier.

// Cluster is the etcd cluster as a whole: its member list, its membership changes, its alarms.
// Every call needs the cluster's quorum.
type Cluster interface {
	MemberList(ctx context.Context) ([]etcd.Member, error)
	// MemberPromote fails with etcd.ErrLearnerNotReady while the learner has not caught up.
	MemberPromote(ctx context.Context, id uint64) error
	MemberUpdate(ctx context.Context, id uint64, peerURLs []string) error
	Alarms(ctx context.Context) (map[uint64][]string, error)
}

// Peers reaches each member on its own client URLs: only there does a member tell its own health
// and whom it hears, only the etcd leader itself hands leadership on, and only a member that stays
// is asked to remove another (removalVia).
type Peers interface {
	Probe(ctx context.Context, m etcd.Member, timeout time.Duration) etcd.Health
	// MoveLeader asks m, which must lead, to hand etcd leadership to transferee.
	MoveLeader(ctx context.Context, m etcd.Member, transferee uint64) error
	// MemberRemove asks via, which must not be the member id, to remove member id.
	MemberRemove(ctx context.Context, via etcd.Member, id uint64) error
	// PeerTraffic reads what observer's own metrics say about its raft link from member peer:
	// etcd's own view of whether peer is heard, which a probe from the leader's node cannot give
	// when only the path from that node to peer is broken. It fails when observer's metrics could
	// not be read, or were another member's.
	PeerTraffic(ctx context.Context, observer etcd.Member, peer uint64) (etcd.Traffic, error)
	// Retain drops what is kept for members no longer in the list.
	Retain(members []etcd.Member)
}

// IntentStore keeps the removal intents, in etcd itself, so that they survive the leader.
type IntentStore interface {
	// Put stores the intent to remove member id on request, and returns the request an intent
	// stored before named, "" for none.
	Put(ctx context.Context, id uint64, request string) (prior string, err error)
	// Get returns the request the stored intent names, "" for none.
	Get(ctx context.Context, id uint64) (string, error)
	// Delete withdraws the intent; none stored is no error.
	Delete(ctx context.Context, id uint64) error
}

// BoundIntents returns store with every call bounded by timeout, the probe timeout: an intent is
// one key, written or read in one raft round, like the probe's own read. A call that takes longer
// most likely went to a member that froze or was cut off since the last probe round (the leader's
// calls go to every voter that served it, servingVoters), and waiting out etcd's call timeout there
// would hold the reconcile's outcome, a refusal included, back by seconds. Failed, the reconcile
// is retried on a member that serves.
func BoundIntents(store IntentStore, timeout time.Duration) IntentStore {
	return boundedIntents{store: store, timeout: timeout}
}

type boundedIntents struct {
	store   IntentStore
	timeout time.Duration
}

func (b boundedIntents) Put(ctx context.Context, id uint64, request string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.store.Put(ctx, id, request)
}

func (b boundedIntents) Get(ctx context.Context, id uint64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.store.Get(ctx, id)
}

func (b boundedIntents) Delete(ctx context.Context, id uint64) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.store.Delete(ctx, id)
}

// Leadership is what the reconciler needs from the agent that leads: whose node it runs on,
// whether its term still holds, and a way to hand leadership on.
type Leadership interface {
	// LocalMemberID is the member ID of the leader's own node, 0 while unknown. The leader never
	// removes that member: its own etcd, and maybe its apiserver, would vanish mid-write.
	LocalMemberID() uint64
	// TermHeld fails once this leadership term no longer holds. fence calls it right before
	// every membership change.
	TermHeld(ctx context.Context) error
	// HandOver asks the agent to give up leadership so another agent removes memberID, the
	// local member. It returns false when that cannot help: no other agent is campaigning.
	HandOver(memberID uint64) bool
}

var (
	_ Cluster     = (*etcd.Client)(nil)
	_ Peers       = (*etcd.Pool)(nil)
	_ IntentStore = (*etcd.Intents)(nil)
)
