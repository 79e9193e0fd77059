// Package controller holds the leader-elected controller that keeps EtcdMember objects true to
// etcd and carries out leave requests, one membership change at a time.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Defaults for MembershipReconciler's intervals.
const (
	DefaultProbeTimeout    = time.Second
	DefaultRecheckInterval = 5 * time.Second
	// DefaultHandOverRetry caps the back-off between the hand-overs of a leader whose own member
	// must leave while no other agent takes leadership.
	DefaultHandOverRetry       = 30 * time.Second
	DefaultLearnerStallTimeout = 10 * time.Minute
	DefaultMinVoters           = 3

	// reconcileTimeout bounds one reconcile: a fresh member list, a probe of every voter, a
	// leadership move and a removal, each with its own etcd timeout, plus three API writes.
	reconcileTimeout = time.Minute
)

// MembershipReconciler keeps each EtcdMember true to etcd's member list and to the leader's health
// probes, removes members whose object asks to leave, promotes learners that caught up and evicts
// those that stalled: every membership change of the cluster, one at a time.
type MembershipReconciler struct {
	Client client.Client
	// APIReader reads around the cache: fence re-reads the object there right before a change.
	APIReader client.Reader
	Events    *events.Recorder

	Etcd Cluster
	// Peers holds the term's connections to each member, shared with the watcher's probes.
	Peers Peers
	// Intents stores the intent before every removal, in etcd itself: a leader that stops between
	// the removal and its status write leaves the next one what tells "we removed it" from "it
	// vanished".
	Intents IntentStore
	// Leadership is the agent's term: its own member, whether the term holds, the hand-over.
	Leadership Leadership

	// Probes returns the leader's periodic probes (false before the first); they drive the
	// Healthy and Removable conditions, status.health, promotion and the unreachable policy.
	Probes func() (Probes, bool)

	// ChangeLock is held for a whole reconcile and shared by every leadership term of an agent, so a
	// term that ends mid-change can never overlap a new term's first change.
	ChangeLock *sync.Mutex

	ProbeTimeout    time.Duration
	RecheckInterval time.Duration
	HandOverRetry   time.Duration
	// HealthRefresh bounds how long status.health may keep figures older than the latest probe
	// when nothing an operator acts on changed.
	HealthRefresh time.Duration
	// LearnerStallTimeout is how long a learner may stay one before it is evicted.
	LearnerStallTimeout time.Duration
	// RemoveUnreachableAfter, when positive, makes the controller ask a voter to leave once it
	// has been unreachable that long, never below MinVoters voters.
	RemoveUnreachableAfter time.Duration
	MinVoters              int

	// DiscoveryGrace is how long a member may go without an object before the leader creates
	// one (DiscoveryGrace(poll interval)).
	DiscoveryGrace time.Duration

	// Clock times the unreachable and learner-stall policies and discovery; nil is the real clock.
	Clock clock.PassiveClock

	// timers hold this term's view of how long each member has been unreachable or stalled.
	timers timers
	// peerNotices dedupes the Warnings of peer-URL updates; lastPeerUpdate is when this term last
	// made one.
	peerNotices    notices
	lastPeerUpdate time.Time
	// leaveSeen records when this term first saw each pending leave, for LeaveDuration.
	leaveSeen map[types.UID]time.Time
	// unregistered records since when each member without an object has been seen.
	unregistered map[uint64]time.Time
	// promoteRefusals backs off, per learner, the promotions etcd refused as not ready.
	promoteRefusals workqueue.TypedRateLimiter[types.UID]
}

// SetupWithManager registers the controller. membershipChanged delivers every object whenever
// etcd's member list changes, since etcd has no membership watch of its own.
func (r *MembershipReconciler) SetupWithManager(mgr ctrl.Manager, membershipChanged *MembershipWatcher) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("leave").
		For(&v1alpha1.EtcdMember{}).
		WatchesRawSource(membershipChanged.Source()).
		// One change at a time, cluster-wide: each request is judged on the cluster as it stands
		// after the previous change.
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			// A failed removal is retried quickly while etcd recovers, and never less often than
			// every 30s: the default limiter backs off to minutes.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](250*time.Millisecond, 30*time.Second),
			// Bounds every API call of a reconcile; etcd calls carry shorter timeouts of their own.
			ReconciliationTimeout: reconcileTimeout,
		}).
		Complete(r)
}

// Reconcile fetches the object and the member list, decides, acts, and writes status once.
func (r *MembershipReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.ChangeLock.Lock()
	defer r.ChangeLock.Unlock()
	if req.Name == discoveryRequest {
		return r.discoverMembers(ctx)
	}

	m := &v1alpha1.EtcdMember{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if goes, err := r.letGoWithCRD(ctx, m); goes || err != nil {
		return ctrl.Result{}, err
	}
	before := m.DeepCopy()
	head := r.headStart(ctx, m)
	// The head start's calls end with this reconcile, whichever way it ends.
	defer head.wait()
	// etcd never gives a removed member's ID to another member, so an object recorded as gone
	// needs no member list: such objects are a cluster's history, usually most of its objects,
	// and a full resync then costs no etcd call for them. Only a new member's takeover changes
	// one again, and that write sets Joined=True with the new ID.
	var members []etcd.Member
	if !m.RecordedGone() {
		var err error
		if members, err = r.memberList(ctx); err != nil {
			head.abandon()
			return ctrl.Result{}, err
		}
		head.timings().done(stepMemberList)
	}
	result, actErr := r.reconcile(ctx, m, members, head)
	if errors.Is(actErr, ErrFenced) {
		// Whatever this reconcile computed was decided under a term or on an object that no longer
		// holds; the leader of the moment, or the next look at the object, writes status.
		logf.FromContext(ctx).Info("Membership change given up", "reason", actErr.Error())
		metrics.FencedChanges.Inc()
		return ctrl.Result{RequeueAfter: r.RecheckInterval}, nil
	}
	if !equality.Semantic.DeepEqual(before.Status, m.Status) {
		if err := onServerError(func() error {
			ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
			defer cancel()
			return r.Client.Status().Update(ctx, m)
		}); err != nil {
			return ctrl.Result{}, errors.Join(actErr, fmt.Errorf("writing status of %s: %w", m.Name, err))
		}
		r.recordTransition(ctx, before, m, actErr)
	}
	if err := r.syncFinalizer(ctx, m); err != nil {
		return ctrl.Result{}, errors.Join(actErr, err)
	}
	return result, actErr
}

// memberList reads the member list within one probe timeout: a linearizable read that takes
// longer would fail a probe too, and the member it went to is likely the one that failed (the
// leader's own, before a probe round saw it and the calls were routed away, see servingVoters). Failing
// soon, the reconcile is retried there within moments, instead of waiting out etcd's call timeout.
func (r *MembershipReconciler) memberList(ctx context.Context) ([]etcd.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, r.ProbeTimeout)
	defer cancel()
	return r.Etcd.MemberList(ctx)
}

// serverErrorRetry retries a write at once, a few times: see onServerError.
var serverErrorRetry = wait.Backoff{Steps: 4, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1}

// onServerError runs an object write again when the apiserver failed it on its own side. Right
// after a removal, the apiserver's etcd client can still send the write to the member just removed
// ("raft: stopped", Unavailable); the reconcile's back-off (250 ms at first) would hold the
// outcome, Joined=False, back by that much, where a second attempt reaches another member at once.
// Every write here carries the resourceVersion it read, so a retry of a write that did land fails
// as a conflict and is never applied twice.
func onServerError(write func() error) error {
	return retry.OnError(serverErrorRetry, func(err error) bool {
		return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
	}, write)
}

// syncFinalizer holds FinalizerMember exactly while the member is in etcd: a deletion the
// admission policy let through (spec.leave is set) then waits until the leave is done. An
// uninstall's deletion never reaches it (letGoWithCRD).
func (r *MembershipReconciler) syncFinalizer(ctx context.Context, m *v1alpha1.EtcdMember) error {
	want := status.IsTrue(m, v1alpha1.ConditionJoined)
	if controllerutil.ContainsFinalizer(m, v1alpha1.FinalizerMember) == want {
		return nil
	}
	if want {
		controllerutil.AddFinalizer(m, v1alpha1.FinalizerMember)
	} else {
		controllerutil.RemoveFinalizer(m, v1alpha1.FinalizerMember)
	}
	if err := onServerError(func() error {
		ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		defer cancel()
		return r.Client.Update(ctx, m)
	}); err != nil {
		return fmt.Errorf("updating the finalizer of %s: %w", m.Name, err)
	}
	return nil
}

// reconcile observes the object's member, decides the one change its state calls for, and makes
// it (act). An object that records no listed member has nothing left to change.
func (r *MembershipReconciler) reconcile(ctx context.Context, m *v1alpha1.EtcdMember, members []etcd.Member, head *headStart) (ctrl.Result, error) {
	m.Status.ObservedGeneration = m.Generation
	v, listed, err := r.observe(ctx, m, members, head)
	if err != nil || !listed {
		return ctrl.Result{}, err
	}
	return r.act(ctx, m, v, head)
}

// observe writes status from etcd and the probes only, and tells whether etcd lists the member.
// A member no longer listed is recorded as gone, with who removed it.
func (r *MembershipReconciler) observe(ctx context.Context, m *v1alpha1.EtcdMember, members []etcd.Member, head *headStart) (view, bool, error) {
	id, err := etcd.ParseID(m.Status.MemberID)
	if err != nil {
		if m.Spec.Leave {
			status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonNoMemberID,
				"The object records no etcd member ID, so there is no member to remove. Wait for the agent on the node to register it, or delete the object if the node is gone.")
		}
		return view{}, false, nil
	}
	target, found := etcd.FindMember(members, id)
	if !found {
		by, err := r.whoRemoved(ctx, m, id, head)
		if err != nil {
			return view{}, false, err
		}
		markGone(m, by)
		forgetHealth(m)
		r.timers.forget(id)
		return view{}, false, nil
	}
	status.Observe(m, target)
	v := view{target: target, members: members, local: r.localMember()}
	v.probes, v.probed = r.Probes()
	if v.probed {
		r.observeHealth(m, target, v.probes)
	}
	setRemovable(m, v)
	r.measure(ctx, m, &v, head)
	return v, true, nil
}

// measure adds to v what this term measures of the member beyond etcd's list and the periodic
// probes, and writes the conditions those measures settle: for a leave, the voters probed afresh
// (the guard's verdict is on them, and so is the pre-flight answer written with it); otherwise a
// learner's time without progress, a voter's time unreachable, and whether the last peer-URL
// update has settled.
func (r *MembershipReconciler) measure(ctx context.Context, m *v1alpha1.EtcdMember, v *view, head *headStart) {
	switch {
	case m.LeaveAsked():
		r.measureLeave(ctx, m, v, head)
	case !m.Spec.Leave:
		r.measureMember(m, v)
	}
}

// measureLeave times the leave from its first sighting, and probes the voters for the guard:
// the head start's probes when they were made on these voters, or its own.
func (r *MembershipReconciler) measureLeave(ctx context.Context, m *v1alpha1.EtcdMember, v *view, head *headStart) {
	r.leaveStarted(m)
	if v.target.IsLearner || v.target.ID == v.local {
		return
	}
	if v.voters = head.votersFor(v.members); v.voters == nil {
		v.voters = probeVoters(ctx, r.Peers, v.members, v.target.ID, r.ProbeTimeout)
	}
	// From the periodic round Removable could still say yes while the guard refuses, the round
	// being older than the failure the fresh probes see.
	setRemovableFrom(m, checkRemoval(v.voters, v.target, m.Name))
	until, held := r.timers.movesHeld[v.target.ID]
	v.moveHeld = held && r.now().Before(until)
}

// measureMember measures a member nobody asked to leave: whether the last peer-URL update
// settled, a learner's time without progress, a voter's time unreachable (with the dead-member
// policy on), and closes what those measures settle.
func (r *MembershipReconciler) measureMember(m *v1alpha1.EtcdMember, v *view) {
	if !peerUpdateWanted(m, v.target) {
		r.peerNotices.forget(m.UID)
	}
	v.settled = v.probed && r.settledSince(v.probes, v.members, r.lastPeerUpdate)
	if v.target.IsLearner {
		seenLearner(m)
		h, answered := v.probes.Members[v.target.ID]
		v.stalled = r.timers.stalledFor(v.target.ID, h.Status.RaftIndex, v.probed && answered && h.Reachable, highestVoterIndex(v.members, v.probes), r.now())
		return
	}
	votedElsewhere(m)
	if r.RemoveUnreachableAfter <= 0 {
		status.Remove(m, v1alpha1.ConditionUnreachableLeaveHeld)
		return
	}
	if v.probed {
		v.unreachable = unreachableNow(m)
		v.down = r.timers.unreachableFor(v.target.ID, v.unreachable, r.now())
		if !v.unreachable {
			status.Remove(m, v1alpha1.ConditionUnreachableLeaveHeld)
		}
	}
}

// soonest merges two results: the earlier requeue wins.
func soonest(a, b ctrl.Result) ctrl.Result {
	a.RequeueAfter = sooner(a.RequeueAfter, b.RequeueAfter)
	return a
}

// sooner is the earlier of two requeue delays, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// leaveStarted records when this term first saw the object's pending leave, for LeaveDuration.
func (r *MembershipReconciler) leaveStarted(m *v1alpha1.EtcdMember) {
	if r.leaveSeen == nil {
		r.leaveSeen = map[types.UID]time.Time{}
	}
	if _, ok := r.leaveSeen[m.UID]; !ok {
		r.leaveSeen[m.UID] = r.now()
	}
}

// localMember is the leading agent's own member; 0 without a term (some unit tests).
func (r *MembershipReconciler) localMember() uint64 {
	if r.Leadership == nil {
		return 0
	}
	return r.Leadership.LocalMemberID()
}

// now reads the reconciler's clock.
func (r *MembershipReconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// view is what one reconcile knows of an object's member, filled by observe and measure and only
// read after them: the member as etcd lists it
// (target), the member list it is in, the latest periodic probes (probed false before the first
// round), and what the term measured. The object itself, whose status the reconcile writes,
// goes alongside.
type view struct {
	target  etcd.Member
	members []etcd.Member
	probes  Probes
	probed  bool
	// local is the leading agent's own member.
	local uint64

	// What this term measured (measure): for a voter's leave, its voters probed afresh and
	// whether a move of etcd's leadership away from it is held back; otherwise whether the last
	// peer-URL update settled, how long a learner made no progress, and whether a voter is
	// unreachable and for how long, on this leader's clock.
	voters      []voter
	moveHeld    bool
	settled     bool
	stalled     time.Duration
	unreachable bool
	down        time.Duration
}
