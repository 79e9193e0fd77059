// etcd versions: the controller leads only an etcd whose member list is a quorum read; an agent
// in front of an older etcd keeps registering its member but stays out of the election.

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

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

// leadableRecheck is how often an agent in front of an etcd too old to lead looks again: an
// upgrade of etcd in place needs no restart of the agent.
const leadableRecheck = 30 * time.Second

// awaitLeadableEtcd returns true once the local etcd is a version the controller may lead (see
// requireLeadableEtcd), false when ctx ends first. Until then this agent stays out of the election
// and keeps registering its member; the error is logged at every check.
func (l *leadership) awaitLeadableEtcd(ctx context.Context) bool {
	// The check decides how long to wait before the next one.
	recheck := l.opts.RetryPeriod
	err := wait.DelayFunc(func() time.Duration { return recheck }).Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		err := requireLeadableEtcd(ctx, l.etcd, l.registrar.Endpoint)
		if err == nil {
			return true, nil
		}
		recheck = l.opts.RetryPeriod
		if errors.Is(err, etcd.ErrEtcdTooOld) {
			recheck = leadableRecheck
			logf.FromContext(ctx).Error(err, "Not leading: upgrade etcd to 3.5 or later; this agent still registers its member", "recheckIn", recheck)
		} else {
			logf.FromContext(ctx).Info("Checking the local etcd's version failed; retrying before campaigning", "error", err.Error())
		}
		return false, nil
	})
	// Only ctx ending stops it early.
	return err == nil
}
