package controller

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// headStart is what a reconcile starts as soon as it has read an object whose leave will likely
// go ahead, alongside the fresh member list: the removal intent, the guard's probes of the
// voters, and the fence's reads. The removal itself is one raft round, and the list, the probes and the intent take
// about as long each; one after the other, they made a leave several times slower than a bare
// MemberRemove. Nothing started here is trusted blindly: the probes count only when the fresh
// list has the same voters, and the guard still decides on the fresh list. A nil headStart
// started nothing.
type headStart struct {
	// intent stores the removal intent naming request; its value is the request an intent stored
	// before named.
	intent  *pending[string]
	request string
	// probes probes the voters of probedOn, the member list of the latest probe round.
	probes   *pending[[]voter]
	probedOn []etcd.Member
	// fence makes the fence's reads for the removal.
	fence *pending[fenceReads]
	// steps records when each step ended, for the removal's log line.
	steps *steps
	// cancel ends the calls started, for a reconcile that gives up before it uses them.
	cancel context.CancelFunc
}

// headStart starts the intent and the fence's reads when the latest probe found the removal safe
// (Removable=True), and
// the probes when the object asks its member to leave at all; neither for the leader's own member, which is
// handed over instead, nor for a member recorded as gone. A request the pre-flight refuses so
// costs no intent write on each of its re-checks, only the probes its guard needs anyway.
func (r *MembershipReconciler) headStart(ctx context.Context, m *v1alpha1.EtcdMember) *headStart {
	if !m.LeaveAsked() || !status.IsTrue(m, v1alpha1.ConditionJoined) {
		return nil
	}
	id, err := etcd.ParseID(m.Status.MemberID)
	if err != nil || id == r.Leadership.LocalMemberID() {
		return nil
	}
	h := &headStart{steps: newSteps(r.now)}
	ctx, h.cancel = context.WithCancel(ctx)
	if status.IsTrue(m, v1alpha1.ConditionRemovable) {
		// The fence reads' age counts from before anything starts, never from later than they
		// go out (an intent write that returned first could otherwise make them look younger).
		cached, now := m.DeepCopy(), r.now()
		h.request = leaveRequest(m)
		h.intent = start(func() (string, error) {
			defer h.steps.done(stepIntent)
			return r.Intents.Put(ctx, id, h.request)
		})
		h.fence = start(func() (fenceReads, error) { return r.readFence(ctx, cached, now, h.steps), nil })
	}
	if probes, ok := r.Probes(); ok && slices.ContainsFunc(probes.List, func(mem etcd.Member) bool { return mem.ID == id && !mem.IsLearner }) {
		h.probedOn = probes.List
		h.probes = start(func() ([]voter, error) {
			defer h.steps.done(stepProbes)
			return probeVoters(ctx, r.Peers, probes.List, id, r.ProbeTimeout), nil
		})
	}
	return h
}

// intending tells whether an intent write was started.
func (h *headStart) intending() bool { return h != nil && h.intent != nil }

// storeIntent stores the intent naming request for member id, or waits for the head start's
// write when it stores that one, and returns the request an intent stored before named.
func (h *headStart) storeIntent(ctx context.Context, intents IntentStore, id uint64, request string) (string, error) {
	if h.intending() && h.request == request {
		return h.intent.wait()
	}
	return intents.Put(ctx, id, request)
}

// intentBefore returns the request the intent stored for member id named before this reconcile:
// what the head start's write replaced, or what is stored when it wrote none.
func (h *headStart) intentBefore(ctx context.Context, intents IntentStore, id uint64) (string, error) {
	if h.intending() {
		return h.intent.wait()
	}
	return intents.Get(ctx, id)
}

// withdrawIntent takes back an intent the head start stored for a removal that does not happen,
// so that a later removal by someone else does not look like ours. A write that failed may have
// landed all the same, so it is withdrawn either way.
func (h *headStart) withdrawIntent(ctx context.Context, intents IntentStore, id uint64) error {
	if !h.intending() {
		return nil
	}
	_, _ = h.intent.wait()
	return intents.Delete(ctx, id)
}

// votersFor returns the probed voters when members has exactly the voters that were probed, at
// the same client URLs; otherwise nil, and the guard probes again.
func (h *headStart) votersFor(members []etcd.Member) []voter {
	if h == nil || h.probes == nil || !sameVoters(h.probedOn, members) {
		return nil
	}
	voters, _ := h.probes.wait()
	return voters
}

// fenceReads returns the fence's reads when they were made at most freshness before now.
func (h *headStart) fenceReads(now time.Time, freshness time.Duration) (fenceReads, bool) {
	if h == nil || h.fence == nil {
		return fenceReads{}, false
	}
	reads, _ := h.fence.wait()
	return reads, now.Sub(reads.started) <= freshness
}

// timings returns where the reconcile records its steps' ends; nil (which records nothing)
// when nothing was started.
func (h *headStart) timings() *steps {
	if h == nil {
		return nil
	}
	return h.steps
}

// abandon ends everything started and waits for it: the reconcile could not read the member list,
// and the member its calls went to may be the one that failed, where they would wait out etcd's
// call timeout. An intent write cut short may have landed all the same; the next reconcile of the
// same request writes it again.
func (h *headStart) abandon() {
	if h == nil {
		return
	}
	h.cancel()
	h.wait()
}

// wait waits for everything started.
func (h *headStart) wait() {
	if h == nil {
		return
	}
	defer h.cancel()
	if h.fence != nil {
		_, _ = h.fence.wait()
	}
	if h.intent != nil {
		_, _ = h.intent.wait()
	}
	if h.probes != nil {
		_, _ = h.probes.wait()
	}
}

func sameVoters(a, b []etcd.Member) bool {
	voters := func(list []etcd.Member) map[uint64][]string {
		out := map[uint64][]string{}
		for _, m := range list {
			if !m.IsLearner {
				out[m.ID] = m.ClientURLs
			}
		}
		return out
	}
	return maps.EqualFunc(voters(a), voters(b), slices.Equal[[]string])
}

// pending is a call running on its own goroutine.
type pending[T any] struct {
	done chan struct{}
	v    T
	err  error
}

func start[T any](f func() (T, error)) *pending[T] {
	p := &pending[T]{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.v, p.err = f()
	}()
	return p
}

// wait returns the call's result once it has one; it may be called again.
func (p *pending[T]) wait() (T, error) {
	<-p.done
	return p.v, p.err
}
