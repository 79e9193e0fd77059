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
	c *Client

	mu      sync.Mutex
	lease   clientv3.LeaseID
	renewAt time.Time
}

// NewIntents returns an Intents that writes through c.
func NewIntents(c *Client) *Intents { return &Intents{c: c} }

// Put records that member id is about to be removed on the request of object, and tells whether
// an intent for it was stored already: by an earlier leader, which may have removed the member
// before it stopped. It returns once the cluster's quorum stored the intent.
func (i *Intents) Put(ctx context.Context, id uint64, object string) (existed bool, err error) {
	lease, err := i.currentLease(ctx)
	if err != nil {
		return false, err
	}
	ctx, cancel := i.c.callContext(ctx)
	defer cancel()
	key := RemovalIntentKey(id)
	put := clientv3.OpPut(key, object, clientv3.WithLease(lease))
	resp, err := i.c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).Then(put).Else(put).Commit()
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("IntentPut").Inc()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Revoked by hand, or lost with a restore from backup: the retry grants a new one.
			i.mu.Lock()
			i.lease = 0
			i.mu.Unlock()
		}
		return false, fmt.Errorf("etcd put of the intent to remove %s: %w", IDString(id), err)
	}
	return resp.Succeeded, nil
}

func (i *Intents) currentLease(ctx context.Context) (clientv3.LeaseID, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.lease != 0 && time.Now().Before(i.renewAt) {
		return i.lease, nil
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
	i.lease, i.renewAt = resp.ID, granted.Add(removalIntentTTL/2)
	return i.lease, nil
}

// RemovalIntent tells whether an intent to remove member id is stored (a linearizable read).
func (c *Client) RemovalIntent(ctx context.Context, id uint64) (bool, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.cli.Get(ctx, RemovalIntentKey(id), clientv3.WithCountOnly())
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("IntentGet").Inc()
		return false, fmt.Errorf("etcd get of the intent to remove %s: %w", IDString(id), err)
	}
	return resp.Count > 0, nil
}

// DeleteRemovalIntent withdraws the intent to remove member id; none stored is no error.
func (c *Client) DeleteRemovalIntent(ctx context.Context, id uint64) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	if _, err := c.cli.Delete(ctx, RemovalIntentKey(id)); err != nil {
		metrics.EtcdErrors.WithLabelValues("IntentDelete").Inc()
		return fmt.Errorf("etcd delete of the intent to remove %s: %w", IDString(id), err)
	}
	return nil
}
