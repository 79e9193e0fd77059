package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// removalIntentPrefix holds the leader's removal intents: one key per member ID it decided to
// remove, written before the MemberRemove. The apiserver keeps its objects under /registry, so
// this prefix never meets them.
const removalIntentPrefix = "/etcdmember.io/removing/"

// RemovalIntentKey is the key of the intent to remove member id.
func RemovalIntentKey(id uint64) string { return removalIntentPrefix + IDString(id) }

// removalIntentTTL bounds how long an intent outlives the leave it was written for. The next
// leader must still find it after a failover, which may first wait out an apiserver outage; after
// that it only takes space, so it expires.
const removalIntentTTL = 24 * time.Hour

// Intents writes removal intents under a lease of its own, granted with the first intent and again
// once half of its TTL has passed, so that no intent is ever written under a lease about to expire.
type Intents struct {
	c     *Client
	lease *intentLease
}

// intentLease is the lease the intents are written under, shared by every Intents of one agent.
type intentLease struct {
	mu      sync.Mutex
	id      clientv3.LeaseID
	renewAt time.Time
}

// NewIntents returns an Intents that writes through c.
func NewIntents(c *Client) *Intents { return &Intents{c: c, lease: &intentLease{}} }

// Through returns Intents that write through c under the same lease: each leadership term reaches
// the cluster through a client of its own, and the lease outlives them.
func (i *Intents) Through(c *Client) *Intents { return &Intents{c: c, lease: i.lease} }

// Put records that member id is about to be removed on request (which names the request, so that
// a later one is told apart), and returns the request an intent stored before named, "" for none:
// an earlier leader's, which may have removed the member before it stopped. It returns once the
// cluster's quorum stored the intent.
func (i *Intents) Put(ctx context.Context, id uint64, request string) (prior string, err error) {
	lease, err := i.currentLease(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := i.c.callContext(ctx)
	defer cancel()
	resp, err := i.c.cli.Put(ctx, RemovalIntentKey(id), request, clientv3.WithLease(lease), clientv3.WithPrevKV())
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("IntentPut").Inc()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Revoked by hand, or lost with a restore from backup: the retry grants a new one.
			i.lease.mu.Lock()
			i.lease.id = 0
			i.lease.mu.Unlock()
		}
		return "", fmt.Errorf("etcd put of the intent to remove %s: %w", IDString(id), err)
	}
	if resp.PrevKv == nil {
		return "", nil
	}
	return string(resp.PrevKv.Value), nil
}

func (i *Intents) currentLease(ctx context.Context) (clientv3.LeaseID, error) {
	l := i.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id != 0 && time.Now().Before(l.renewAt) {
		return l.id, nil
	}
	// Counted from before the call: etcd's own clock can only give the lease longer.
	granted := time.Now()
	ctx, cancel := i.c.callContext(ctx)
	defer cancel()
	resp, err := i.c.cli.Grant(ctx, int64(removalIntentTTL/time.Second))
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("LeaseGrant").Inc()
		return 0, fmt.Errorf("etcd lease grant for removal intents: %w", err)
	}
	l.id, l.renewAt = resp.ID, granted.Add(removalIntentTTL/2)
	return l.id, nil
}

// Get returns the request the intent to remove member id names, "" when none is stored (a
// linearizable read).
func (i *Intents) Get(ctx context.Context, id uint64) (string, error) {
	ctx, cancel := i.c.callContext(ctx)
	defer cancel()
	resp, err := i.c.cli.Get(ctx, RemovalIntentKey(id))
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("IntentGet").Inc()
		return "", fmt.Errorf("etcd get of the intent to remove %s: %w", IDString(id), err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// Delete withdraws the intent to remove member id; none stored is no error.
func (i *Intents) Delete(ctx context.Context, id uint64) error {
	ctx, cancel := i.c.callContext(ctx)
	defer cancel()
	if _, err := i.c.cli.Delete(ctx, RemovalIntentKey(id)); err != nil {
		metrics.EtcdErrors.WithLabelValues("IntentDelete").Inc()
		return fmt.Errorf("etcd delete of the intent to remove %s: %w", IDString(id), err)
	}
	return nil
}
