package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
)

// change is one membership change of an object's member, as makeChange makes it: the removal,
// the eviction, the promotion, the peer-URL update and the move of etcd's leadership all go
// through the same steps, and differ only in these fields.
type change struct {
	// verb names the change in the fence's refusal: "not <verb> member <id>".
	verb string
	// wanted re-checks, on the object read afresh, that it still asks for the change.
	wanted func(*v1alpha1.EtcdMember) bool
	// intent, when not empty, is stored in etcd before anything else: the request it names tells
	// the next leader, should this one stop after the call, that the member was removed by us.
	intent string
	// call is the one etcd call.
	call func(ctx context.Context) error
	// before and after are the chaos crash points around the call, after the intent; "" for none.
	before, after string
}

// errNoIntent marks a change not made because its intent could not be stored: etcd was not asked.
var errNoIntent = errors.New("intent not recorded")

// makeChange makes c for m's member: the intent, the fence, the call. The head start's intent
// write and fence reads stand in for its own when they were made for this request and are fresh
// enough; head may be nil. The caller records the outcome: an error wrapping ErrFenced means the
// change was not this leader's to make any more (errNotWanted: the object no longer asks for it),
// errNoIntent that the intent could not be stored, any other the failure of the call.
func (r *MembershipReconciler) makeChange(ctx context.Context, m *v1alpha1.EtcdMember, target etcd.Member, c change, head *headStart) error {
	if c.intent != "" {
		if _, err := head.storeIntent(ctx, r.Intents, target.ID, c.intent); err != nil {
			return fmt.Errorf("%w for %s member %s: %w", errNoIntent, c.verb, m.Status.MemberID, err)
		}
	}
	if c.before != "" {
		failpoint.Hit(c.before)
	}
	reads, fresh := head.fenceReads(r.now(), fenceFreshness)
	if !fresh {
		reads = r.readFence(ctx, m, r.now(), head.timings())
	}
	if err := reads.verdict(m, c.verb, c.wanted); err != nil {
		return err
	}
	if err := c.call(ctx); err != nil {
		return err
	}
	if c.after != "" {
		failpoint.Hit(c.after)
	}
	return nil
}

// removing is the change that removes target from etcd, for a leave (intent leaveRequest) or an
// eviction (evictionRequest), sent to a member that stays (removalVia; fresh: the guard's probes,
// if any). A member already gone counts as removed.
func (r *MembershipReconciler) removing(target etcd.Member, verb, intent string, wanted func(*v1alpha1.EtcdMember) bool, fresh []voter, head *headStart) change {
	return change{verb: verb, wanted: wanted, intent: intent,
		before: failpoint.LeaveBeforeRemove, after: failpoint.LeaveAfterRemove,
		call: func(ctx context.Context) error {
			via, err := r.removalVia(target.ID, fresh)
			if err != nil {
				return err
			}
			head.timings().done(stepRemoveSent)
			if err := r.Peers.MemberRemove(ctx, via, target.ID); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) && !r.goneAfter(ctx, target.ID, err) {
				return err
			}
			head.timings().done(stepRemoved)
			return nil
		}}
}

// removalVia picks the member a removal of target goes to: a voter that served when last probed,
// never target itself, which could answer the call and, applying its own removal, answer
// "etcdserver: server stopped" for a removal that was committed. etcd's leader comes first, as
// every membership change is applied there. The probes are fresh when the guard made them for
// this removal, else the latest round's.
func (r *MembershipReconciler) removalVia(target uint64, fresh []voter) (etcd.Member, error) {
	candidates := fresh
	if len(candidates) == 0 {
		if p, ok := r.Probes(); ok {
			for _, m := range p.List {
				if m.IsLearner {
					continue
				}
				h := p.Members[m.ID]
				candidates = append(candidates, voter{Member: m, Healthy: h.Serving, Leader: h.Status.Leader, AnsweredBy: h.AnsweredBy})
			}
		}
	}
	var leader uint64
	for _, c := range candidates {
		if c.Healthy && c.Leader != 0 {
			leader = c.Leader
		}
	}
	var via *voter
	for i := range candidates {
		c := &candidates[i]
		if c.ID != target && c.Healthy && c.AnsweredBy == 0 && (via == nil || c.ID == leader) {
			via = c
		}
	}
	if via == nil {
		return etcd.Member{}, fmt.Errorf("no voter other than member %s served when last probed: none to send its removal to", etcd.IDString(target))
	}
	return via.Member, nil
}

// goneAfter tells whether a MemberRemove that failed took effect all the same: an answer lost after
// the removal was committed (a timeout, a connection that broke). Any member's list without it
// proves the removal; a list that still has it, or none, leaves the error to the retry.
func (r *MembershipReconciler) goneAfter(ctx context.Context, id uint64, removeErr error) bool {
	ctx, cancel := context.WithTimeout(ctx, r.ProbeTimeout)
	defer cancel()
	members, err := r.Etcd.MemberList(ctx)
	if err != nil || slices.ContainsFunc(members, func(m etcd.Member) bool { return m.ID == id }) {
		return false
	}
	logf.FromContext(ctx).Info("The removal's answer was an error, yet the member list no longer has the member", "memberID", etcd.IDString(id), "error", removeErr.Error())
	return true
}
