// Hold-off and Lease observation: an agent whose own member has a pending leave could not act on
// it as leader, nor one whose member has left etcd, so it stays out of the election (or withdraws
// from a campaign) while another agent can take the Lease, and watches the Lease from outside to
// learn when nobody will.

package agent

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// holdOff returns when this agent may campaign: at once, unless its own member has a pending
// leave or has left etcd (staysOut); then when that no longer holds (deliberate false), or when
// the Lease has been
// free (released, missing, or unrenewed for a lease duration) for a further whole lease duration
// (deliberate true). Any other live agent takes a free Lease within 1 to 2.2 retry periods
// (client-go's jittered retry), so a Lease free that long means nobody else is campaigning.
//
// Staying out costs nothing while another agent leads, and when nobody does, one lease duration;
// in exchange a failover never lands on the one agent that cannot act on the pending leave, and
// an agent that just stepped down cannot win its Lease straight back while others are slow.
func (l *leadership) holdOff(ctx context.Context) (deliberate bool) {
	log := logf.FromContext(ctx)
	l.state.mu.Lock()
	steppedDown := l.state.steppedDown
	l.state.steppedDown = false
	l.state.mu.Unlock()
	// Right after a hand-over the leave is certainly pending: the term's controller just acted on
	// it, whatever this agent's own cache shows yet. Later checks trust the cache once it synced.
	if !steppedDown && !l.stayOut(ctx, steppedDown) {
		l.resetNoTaker()
		return false
	}
	log.Info("Own member has a pending leave or has left etcd; staying out of the election while another agent can take the Lease",
		"memberID", etcd.IDString(l.registrar.LocalMemberID()), "leaseDuration", l.opts.LeaseDuration)
	free := leaseVacancy{self: l.identity, leaseDuration: l.opts.LeaseDuration}
	tick := time.NewTicker(l.opts.RetryPeriod)
	defer tick.Stop()
	for {
		l.observeLease(ctx, &free)
		if f := free.freeFor(time.Now()); f >= l.opts.LeaseDuration {
			count := l.recordNoTaker(free.sawOther)
			log.Info("No other agent took the free Lease; campaigning, and retrying the hand-over with back-off",
				"freeFor", f.Round(time.Millisecond), "noTakerInARow", count, "handOverRetry", l.handOverRetry())
			return true
		}
		// An object change only re-checks the leave; the Lease is read once per retry period, as
		// often as a campaigning agent would read it.
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return false
			case <-tick.C:
				waiting = false
			case <-l.own.changed:
			}
			if !l.stayOut(ctx, steppedDown) {
				log.Info("Own member no longer has a pending leave nor has left etcd; campaigning")
				l.resetNoTaker()
				return false
			}
		}
	}
}

// stayOut: the local member has a pending leave or has left etcd, or, until the cache has synced,
// the last term stepped down for a leave.
func (l *leadership) stayOut(ctx context.Context, steppedDown bool) bool {
	pending, known := l.own.pending(ctx)
	return pending || (!known && steppedDown)
}

// observeLease reads the leader Lease once into free. A failed read forgets what was seen: only
// an unbroken run of answers shows that nobody renewed the Lease meanwhile.
func (l *leadership) observeLease(ctx context.Context, free *leaseVacancy) {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	lease := &coordinationv1.Lease{}
	err := l.registrar.Reader.Get(ctx, types.NamespacedName{Namespace: l.opts.LeaderElectionNamespace, Name: v1alpha1.LeaseName}, lease)
	switch {
	case apierrors.IsNotFound(err):
		free.observe("", "", time.Now())
	case err != nil:
		logf.FromContext(ctx).Info("Reading the leader Lease failed; its vacancy is counted again from the next answer", "error", err.Error())
		free.forget()
	default:
		free.observe(ptr.Deref(lease.Spec.HolderIdentity, ""), lease.ResourceVersion, time.Now())
	}
}

// withdrawOnOwnLeave ends a term that is still campaigning as soon as the local member is asked
// to leave, so that the next campaign waits in holdOff. A term that already leads goes on: its
// controller hands over, and says so on the object.
func (l *leadership) withdrawOnOwnLeave(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.own.changed:
		}
		if pending, _ := l.own.pending(ctx); pending && l.endTerm(ctx, onlyWhileCampaigning) {
			logf.FromContext(ctx).Info("Own member has a pending leave; withdrawing from the election",
				"memberID", etcd.IDString(l.registrar.LocalMemberID()))
			return
		}
	}
}

// leaseVacancy follows the leader Lease from outside the election the way client-go's candidates
// do: by the local time at which each new version of the record was first seen, never by the
// timestamps inside it, which other agents' clocks wrote.
type leaseVacancy struct {
	self          string
	leaseDuration time.Duration

	seen      bool
	version   string // resourceVersion; "" while the Lease does not exist
	holder    string
	changedAt time.Time
	// sawOther: another agent wrote the Lease as its holder while we watched, so it was alive.
	sawOther bool
}

func (v *leaseVacancy) observe(holder, version string, now time.Time) {
	if v.seen && version == v.version {
		return
	}
	if v.seen && holder != "" && holder != v.self {
		v.sawOther = true
	}
	v.seen, v.version, v.holder, v.changedAt = true, version, holder, now
}

// forget drops the observation, keeping sawOther.
func (v *leaseVacancy) forget() { v.seen = false }

// freeFor is how long the Lease has been free for anyone to take: released or missing since it
// was first seen so, or held but unrenewed for longer than a lease duration.
func (v *leaseVacancy) freeFor(now time.Time) time.Duration {
	if !v.seen {
		return 0
	}
	freeAt := v.changedAt
	if v.holder != "" {
		freeAt = freeAt.Add(v.leaseDuration)
	}
	return max(now.Sub(freeAt), 0)
}
