// The local guard: an agent campaigns only while it reaches its local etcd member, and a leader
// whose member became unusable steps down.

package agent

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// A term starts reaching etcd through the local member, and its pin of that member is what keeps
// the leader from removing its own. The watcher routes the leader's calls to the other members
// once its own fails (controller.WatcherConfig.Route), so its status stays true meanwhile; but a
// node whose etcd is gone (removed, wiped, down) is likely on its way out, and leading from it
// would only cost a hand-over later. So an agent only campaigns while its registrar reaches the
// local member, and a leader steps down, releasing the Lease, once it has not for
// localUnusableAfter sync intervals and does not answer when asked once more. Both judge the
// local member only (Registrar.LocalMember), not the whole registration: an API that fails says
// nothing about the member, and the election has the Lease to cope with it.
const localUnusableAfter = 2

// recheckTimeout bounds the last question to the local member before a step-down. A member that
// serves again answers its status in milliseconds; one that cannot in 2 s, after two sync
// intervals of failures, is not one to lead from. It adds at most that much to a step-down.
const recheckTimeout = 2 * time.Second

// awaitLocalMember returns once the registrar's last sync reached the local member.
func (l *leadership) awaitLocalMember(ctx context.Context) {
	err := l.registrar.LocalMember()
	if err == nil {
		return
	}
	logf.FromContext(ctx).Info("Local etcd member not reachable or not in the member list; staying out of the election until it is", "reason", err.Error())
	// It fails only once ctx has ended, which the caller notices next.
	_ = wait.PollUntilContextCancel(ctx, l.opts.RetryPeriod, false, func(context.Context) (bool, error) {
		return l.registrar.LocalMember() == nil, nil
	})
}

// localGuard ends a leadership term whose local member has been unusable too long.
type localGuard struct{ l *leadership }

func (g localGuard) NeedLeaderElection() bool { return true }

func (g localGuard) Start(ctx context.Context) error {
	termCtx := g.l.currentTerm()
	limit := localUnusableAfter * g.l.opts.SyncInterval
	var (
		since time.Time
		why   error
	)
	unusableTooLong := func(ctx context.Context) (bool, error) {
		if g.l.registrar.LocalMember() == nil {
			since = time.Time{}
			return false, nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < limit {
			return false, nil
		}
		// The last sync may be an interval old: a member that serves again (an etcd restarted
		// by kubeadm upgrade) keeps its leader, which would otherwise hand over to agents whose
		// own apiservers may still be reconnecting to their etcd.
		recheck, cancel := context.WithTimeout(ctx, recheckTimeout)
		defer cancel()
		if why = g.l.registrar.LocalMemberNow(recheck); why == nil {
			since = time.Time{}
			return false, nil
		}
		return true, nil
	}
	if err := wait.PollUntilContextCancel(ctx, g.l.opts.RetryPeriod, false, unusableTooLong); err != nil {
		// The term ended.
		return nil
	}
	logf.FromContext(ctx).Info("Local etcd member unusable; stepping down so that an agent with a working member leads",
		"for", time.Since(since).Round(time.Second), "reason", why.Error())
	g.l.endTerm(termCtx, whetherLeadingOrNot)
	return nil
}
