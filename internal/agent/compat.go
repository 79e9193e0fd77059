package agent

import (
	"context"
	"fmt"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// requireLeadableEtcd refuses to lead an etcd whose member list is not a quorum read (before 3.5):
// every removal decision rests on that list, and one served from a lagging member's own copy
// could count a voter that is already gone. The error wraps etcd.ErrEtcdTooOld when the server
// answered with such a version, and the Status error when it did not answer, so a caller can keep
// retrying the second and stay out of the election on the first.
func requireLeadableEtcd(ctx context.Context, c *etcd.Client, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, etcd.DefaultCallTimeout)
	defer cancel()
	version, err := c.ServerVersion(ctx, endpoint)
	if err != nil {
		return fmt.Errorf("checking that the local etcd at %s can be led: %w", endpoint, err)
	}
	if err := etcd.CheckLeadable(version); err != nil {
		return fmt.Errorf("local etcd at %s: %w", endpoint, err)
	}
	return nil
}
