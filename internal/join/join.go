// Package join adds a node's etcd member to a running cluster as a learner and renders the
// settings the new etcd process starts with. Running it again for the same peer URLs finds the
// member it added and renders the same settings, so automation can simply retry it.
package join

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Backoff between attempts that etcd refused for now: it refuses membership changes for about five
// seconds after a member (re)connects.
const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// Cluster is the part of the etcd client that join uses.
type Cluster interface {
	MemberList(ctx context.Context) ([]etcd.Member, error)
	MemberAddAsLearner(ctx context.Context, peerURLs []string) (etcd.Member, []etcd.Member, error)
}

// Request names the member to add; PeerURLs are normalized (NormalizePeerURLs).
type Request struct {
	Name     string
	PeerURLs []string
}

// Join finds the member with req's peer URLs, adding it as a learner if there is none, and
// returns its settings. Retries and notes for the operator go to log; ctx bounds the whole.
func Join(ctx context.Context, c Cluster, req Request, log io.Writer) ([]Var, error) {
	return join(ctx, c, req, log, firstBackoff)
}

func join(ctx context.Context, c Cluster, req Request, log io.Writer, first time.Duration) ([]Var, error) {
	// first, doubling up to maxBackoff, then maxBackoff until ctx ends. DelayFunc keeps the cap
	// once it is reached, where ExponentialBackoffWithContext would give up.
	backoff := wait.Backoff{Duration: first, Factor: 2, Cap: maxBackoff, Steps: math.MaxInt32}.DelayFunc()
	var (
		vars  []Var
		err   error
		delay time.Duration
	)
	// Each refusal computes the next delay, so that its note can say it.
	waitErr := wait.DelayFunc(func() time.Duration { return delay }).Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		vars, err = attempt(ctx, c, req, log)
		if err == nil || !refusedForNow(err) {
			return true, nil
		}
		delay = backoff()
		note(log, "etcd refused for now, retrying in %s: %v\n", delay, err)
		return false, nil
	})
	if waitErr != nil {
		// ctx ended while waiting after a refusal.
		return nil, fmt.Errorf("still refused when the time was up: %w", err)
	}
	return vars, err
}

// attempt reads the member list afresh each time, so that an add which succeeded although its
// answer was lost, or a concurrent run for the same URLs, is found instead of added twice.
func attempt(ctx context.Context, c Cluster, req Request, log io.Writer) ([]Var, error) {
	members, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	self, found, err := Match(members, req.Name, req.PeerURLs)
	if err != nil {
		return nil, err
	}
	if found {
		note(log, "member %s already has peer URLs %s; nothing added\n", describe(self), strings.Join(self.PeerURLs, ","))
	} else {
		added, after, err := c.MemberAddAsLearner(ctx, req.PeerURLs)
		if errors.Is(err, rpctypes.ErrTooManyLearners) {
			return nil, learnerPending(members, err)
		}
		if err != nil {
			return nil, err
		}
		note(log, "added member %s as a learner with peer URLs %s\n", etcd.IDString(added.ID), strings.Join(added.PeerURLs, ","))
		self, members = added, after
	}
	for _, m := range namesakes(members, self.ID, req.Name) {
		note(log, "warning: member %s is also named %q; if it is this node's old record, remove it (etcdctl member remove %s)\n",
			describe(m), req.Name, etcd.IDString(m.ID))
	}
	return Settings(members, self.ID, req.Name)
}

// note tells the operator what join did. It is best effort: once the member is added, a closed
// stderr must not turn a join into a failure.
func note(log io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(log, format, args...)
}

// refusedForNow tells the refusals that pass by themselves: etcd's strict reconfiguration check
// right after a member (re)connected, and a concurrent add of the same URLs, which the next
// member list shows.
func refusedForNow(err error) bool {
	return errors.Is(err, rpctypes.ErrUnhealthy) || errors.Is(err, rpctypes.ErrMemberNotEnoughStarted) ||
		errors.Is(err, rpctypes.ErrPeerURLExist)
}

// learnerPending explains etcd's limit on learners (one unless --max-learners says otherwise) with
// the learners that hold it, as the member list read just before the add shows them.
func learnerPending(members []etcd.Member, err error) error {
	var pending []string
	var ids []string
	for _, m := range members {
		if m.IsLearner {
			pending = append(pending, describe(m))
			ids = append(ids, etcd.IDString(m.ID))
		}
	}
	if len(pending) == 0 {
		return fmt.Errorf("another learner was added meanwhile; wait until it is promoted, then run join again: %w", err)
	}
	remove := ids[0]
	if len(ids) > 1 {
		remove = "ID"
	}
	return fmt.Errorf("a learner is already pending: member %s; wait until it is promoted, or if its node "+
		"will not come, remove it (etcdctl member remove %s), then run join again: %w",
		strings.Join(pending, ", member "), remove, err)
}
