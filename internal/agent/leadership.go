package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/controller"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// LeaseName is the Lease the agents elect their leader with.
const LeaseName = "etcdmember-leader"

// handOverFirstRetry is how long the first term after a failed hand-over keeps leadership before
// it tries again; each further failure for the same member doubles it, up to --hand-over-retry.
// A failed hand-over already proved that no other agent took the Lease for a whole lease
// duration, so another agent appearing soon is unlikely; but it does happen (an agent restarting,
// or a frozen one resuming), and a fixed long retry made such a leave wait 30 s for nothing.
const handOverFirstRetry = 3 * time.Second

// leadership runs the leave controller in leadership terms. Each term is a fresh manager that
// campaigns for the Lease; a term ends when ctx ends, when leadership is lost, when the leader
// steps down so that another agent can remove this node's own member, or when this node's own
// member is asked to leave while the term is still campaigning.
//
// The leader never removes its own member, so an agent whose own member has a pending leave stays
// out of the election (holdOff) until the Lease has been free for a whole lease duration with
// nobody taking it: winning would only cost a hand-over and one more election before the member
// goes. Campaigning then anyway keeps a lone agent leading for every other object, while it
// retries the hand-over with back-off.
type leadership struct {
	opts      Options
	rest      *rest.Config
	etcd      *etcd.Client
	events    *events.Recorder
	registrar *Registrar
	// intents outlives the terms, so that they share one etcd lease.
	intents  *etcd.Intents
	identity string

	// changeLock is shared by every term's reconciler: see controller.LeaveReconciler.ChangeLock.
	changeLock sync.Mutex

	// own follows whether the local member has a pending leave; nil without leader election.
	own *ownLeave

	mu        sync.Mutex
	termStart time.Time
	stepDown  context.CancelFunc
	// steppedDown: the last term ended in a hand-over. The next holdOff stays out even before
	// its cache shows the leave that the term's controller acted on.
	steppedDown bool
	// noTaker counts the holdOffs in a row that ended with nobody taking the Lease while
	// noTakerFor, the local member, had a pending leave; it sets the hand-over back-off.
	noTakerFor   uint64
	noTakerCount int
}

// NeedLeaderElection: the terms campaign themselves.
func (l *leadership) NeedLeaderElection() bool { return false }

// Start runs terms until ctx ends.
func (l *leadership) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("leadership")
	ctx = logf.IntoContext(ctx, log)
	if l.opts.LeaderElect {
		own, err := startOwnLeave(ctx, l.rest, l.registrar.Client.Scheme(), l.registrar.LocalMemberID)
		if err != nil {
			return err
		}
		l.own = own
	}
	for ctx.Err() == nil {
		// A campaign that holdOff let through although the own leave is pending is deliberate
		// (nobody else took the Lease) and must not be withdrawn for that same leave.
		deliberate := false
		if l.opts.LeaderElect {
			l.awaitLocalMember(ctx)
		}
		if !l.awaitLeadableEtcd(ctx) {
			return nil
		}
		if l.opts.LeaderElect {
			deliberate = l.holdOff(ctx)
		}
		termCtx, cancel := context.WithCancel(ctx)
		l.mu.Lock()
		l.stepDown = cancel
		l.termStart = time.Time{}
		l.mu.Unlock()
		if l.own != nil && !deliberate {
			go l.withdrawOnOwnLeave(termCtx)
		}
		err := l.runTerm(termCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		// A term that stepped down or withdrew returns nil and goes straight to holdOff, which
		// decides how long to stay out.
		if err != nil {
			log.Error(err, "Leadership term ended")
			select {
			case <-ctx.Done():
			case <-time.After(l.opts.RetryPeriod):
			}
		}
	}
	return nil
}

func (l *leadership) runTerm(ctx context.Context) error {
	opts := ctrl.Options{
		Scheme:                 l.registrar.Client.Scheme(),
		Logger:                 logf.FromContext(ctx),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every term registers the same controller name again in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if l.opts.LeaderElect {
		lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock,
			l.opts.LeaderElectionNamespace, LeaseName, resourcelock.ResourceLockConfig{Identity: l.identity},
			l.rest, l.opts.RenewDeadline)
		if err != nil {
			return fmt.Errorf("creating the leader election lock: %w", err)
		}
		opts.LeaderElection = true
		opts.LeaderElectionID = LeaseName
		opts.LeaderElectionNamespace = l.opts.LeaderElectionNamespace
		opts.LeaderElectionResourceLockInterface = lock
		opts.LeaderElectionReleaseOnCancel = true
		opts.LeaseDuration = &l.opts.LeaseDuration
		opts.RenewDeadline = &l.opts.RenewDeadline
		opts.RetryPeriod = &l.opts.RetryPeriod
	}
	mgr, err := ctrl.NewManager(l.rest, opts)
	if err != nil {
		return fmt.Errorf("creating the leader's manager: %w", err)
	}
	// One connection per member for the term's probes and removals.
	pool := etcd.NewPool(l.etcd)
	defer pool.Close()
	watcher := controller.NewMembershipWatcher(mgr.GetClient(), mgr.GetAPIReader(), l.etcd, pool, l.events, controller.WatcherConfig{
		PollInterval: l.opts.MembershipPollInterval, ProbeInterval: l.opts.ProbeInterval,
		ProbeTimeout: l.opts.ProbeTimeout, HealthRefresh: l.opts.HealthRefresh,
	})
	reconciler := &controller.LeaveReconciler{
		Client:          mgr.GetClient(),
		Etcd:            l.etcd,
		Pool:            pool,
		Events:          l.events,
		Intents:         l.intents,
		APIReader:       mgr.GetAPIReader(),
		LocalMemberID:   l.registrar.LocalMemberID,
		Probes:          watcher.Probes,
		HandOver:        l.handOver,
		ChangeLock:      &l.changeLock,
		ProbeTimeout:    l.opts.ProbeTimeout,
		RecheckInterval: l.opts.RecheckInterval,
		// The back-off only grows between terms (in holdOff), so one value serves the whole term.
		HandOverRetry:          l.handOverRetry(),
		HealthRefresh:          l.opts.HealthRefresh,
		LearnerStallTimeout:    l.opts.LearnerStallTimeout,
		RemoveUnreachableAfter: l.opts.RemoveUnreachableAfter,
		MinVoters:              l.opts.MinVoters,
	}
	if l.opts.LeaderElect {
		reconciler.TermHeld = l.termHeld
	}
	if err := mgr.Add(watcher); err != nil {
		return err
	}
	if err := mgr.Add(termStarted{l}); err != nil {
		return err
	}
	if l.opts.LeaderElect {
		if err := mgr.Add(localGuard{l}); err != nil {
			return err
		}
	}
	if err := reconciler.SetupWithManager(mgr, watcher); err != nil {
		return fmt.Errorf("setting up the leave controller: %w", err)
	}
	return mgr.Start(ctx)
}

// termHeld reads the leader Lease past every cache and fails unless it still names this agent
// and was renewed less than a lease duration ago. The renewTime it checks was written by this
// agent, so this agent's clock is the right one to judge it by.
func (l *leadership) termHeld(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	lease := &coordinationv1.Lease{}
	if err := l.registrar.Reader.Get(ctx, types.NamespacedName{Namespace: l.opts.LeaderElectionNamespace, Name: LeaseName}, lease); err != nil {
		return fmt.Errorf("reading the leader Lease: %w", err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != l.identity {
		return fmt.Errorf("the leader Lease is held by %q, not by this agent (%s): its term has ended", holder, l.identity)
	}
	if lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) >= l.opts.LeaseDuration {
		return fmt.Errorf("this agent last renewed the leader Lease more than a lease duration (%s) ago: its term has ended", l.opts.LeaseDuration)
	}
	return nil
}

// termStarted marks the moment this agent became leader.
type termStarted struct{ l *leadership }

func (t termStarted) NeedLeaderElection() bool { return true }

func (t termStarted) Start(ctx context.Context) error {
	t.l.markTermStart(time.Now())
	logf.FromContext(ctx).Info("Became leader", "identity", t.l.identity)
	<-ctx.Done()
	return nil
}

// handOver steps down so another agent can remove memberID, unless that cannot help: without
// leader election there is nobody else, and after a holdOff in which nobody took the Lease, no
// other agent is campaigning. Such a term keeps leadership for the back-off (handOverRetry) and
// then tries again, in case an agent has come back since.
func (l *leadership) handOver(memberID uint64) bool {
	if !l.opts.LeaderElect {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.markTermStartLocked(now)
	if l.noTakerFor == memberID && l.noTakerCount > 0 && now.Sub(l.termStart) < l.handOverRetryLocked() {
		return false
	}
	l.steppedDown = true
	// The reconcile that asks holds changeLock until its status (HandingOver) is written; ending
	// the term before that would cancel the write, so the term ends once the lock is free.
	stepDown := l.stepDown
	go func() {
		l.changeLock.Lock()
		defer l.changeLock.Unlock()
		stepDown()
	}()
	return true
}

// handOverRetry is how long the current term keeps leadership after a failed hand-over before
// trying again: handOverFirstRetry doubled for every holdOff in a row that found no other agent,
// capped at --hand-over-retry. With no failure yet (or without leader election, where every
// hand-over fails) it is the cap.
func (l *leadership) handOverRetry() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handOverRetryLocked()
}

func (l *leadership) handOverRetryLocked() time.Duration {
	return handOverBackoff(l.noTakerCount, l.opts.HandOverRetry)
}

// handOverBackoff is handOverFirstRetry doubled failures-1 times, capped; the cap for 0 failures.
func handOverBackoff(failures int, limit time.Duration) time.Duration {
	if failures <= 0 {
		return limit
	}
	d := handOverFirstRetry
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// markTermStart records when leadership began, once per term. A reconcile may run before the
// termStarted runnable does, so whichever comes first sets it.
func (l *leadership) markTermStart(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.markTermStartLocked(t)
}

func (l *leadership) markTermStartLocked(t time.Time) {
	if l.termStart.IsZero() {
		l.termStart = t
	}
}

// holdOff returns when this agent may campaign: at once, unless its own member has a pending
// leave; then when that leave is no longer pending (deliberate false), or when the Lease has been
// free (released, missing, or unrenewed for a lease duration) for a further whole lease duration
// (deliberate true). Any other live agent takes a free Lease within 1 to 2.2 retry periods
// (client-go's jittered retry), so a Lease free that long means nobody else is campaigning.
//
// Staying out costs nothing while another agent leads, and when nobody does, one lease duration;
// in exchange a failover never lands on the one agent that cannot act on the pending leave, and
// an agent that just stepped down cannot win its Lease straight back while others are slow.
func (l *leadership) holdOff(ctx context.Context) (deliberate bool) {
	log := logf.FromContext(ctx)
	l.mu.Lock()
	steppedDown := l.steppedDown
	l.steppedDown = false
	l.mu.Unlock()
	// Right after a hand-over the leave is certainly pending: the term's controller just acted on
	// it, whatever this agent's own cache shows yet. Later checks trust the cache once it synced.
	if !steppedDown && !l.stayOut(ctx, steppedDown) {
		l.resetNoTaker()
		return false
	}
	log.Info("Own member has a pending leave; staying out of the election while another agent can take the Lease",
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
				log.Info("Own member no longer has a pending leave; campaigning")
				l.resetNoTaker()
				return false
			}
		}
	}
}

// stayOut: the local member has a pending leave, or, until the cache has synced, the last term
// stepped down for one.
func (l *leadership) stayOut(ctx context.Context, steppedDown bool) bool {
	pending, known := l.own.pending(ctx)
	return pending || (!known && steppedDown)
}

// observeLease reads the leader Lease once into free. A failed read forgets what was seen: only
// an unbroken run of answers shows that nobody renewed the Lease meanwhile.
func (l *leadership) observeLease(ctx context.Context, free *leaseVacancy) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	lease := &coordinationv1.Lease{}
	err := l.registrar.Reader.Get(ctx, types.NamespacedName{Namespace: l.opts.LeaderElectionNamespace, Name: LeaseName}, lease)
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

func (l *leadership) recordNoTaker(sawOther bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.registrar.LocalMemberID()
	// Another agent led meanwhile, so the count of failures in a row starts again.
	if sawOther || l.noTakerFor != id {
		l.noTakerCount = 0
	}
	l.noTakerFor = id
	l.noTakerCount++
	return l.noTakerCount
}

func (l *leadership) resetNoTaker() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noTakerFor, l.noTakerCount = 0, 0
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
		if pending, _ := l.own.pending(ctx); pending && l.withdraw(ctx) {
			logf.FromContext(ctx).Info("Own member has a pending leave; withdrawing from the election",
				"memberID", etcd.IDString(l.registrar.LocalMemberID()))
			return
		}
	}
}

// withdraw ends the term of termCtx if it is still the current one and does not lead yet. It
// holds changeLock like a hand-over does, so a term that won an instant ago is never cut off in
// the middle of a change.
func (l *leadership) withdraw(termCtx context.Context) bool {
	l.changeLock.Lock()
	defer l.changeLock.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	// A term's context ends before the next term's stepDown is set, under mu.
	if termCtx.Err() != nil || !l.termStart.IsZero() {
		return false
	}
	l.stepDown()
	return true
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

// ownLeave tells whether the local member has a pending leave, from a cache of the EtcdMember
// objects. Every agent keeps one (a single watch), so that it can stop campaigning the moment its
// member is asked to leave, before any Lease changes hands.
type ownLeave struct {
	cache   cache.Cache
	synced  func() bool
	localID func() uint64
	// changed gets a token after any change to any object.
	changed chan struct{}
}

func startOwnLeave(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, localID func() uint64) (*ownLeave, error) {
	// A fixed mapping spares a discovery call, so that an apiserver that is down when the agent
	// starts delays the watch (the informer retries) instead of failing the agent.
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(v1alpha1.GroupVersion.WithKind("EtcdMember"), meta.RESTScopeRoot)
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, Mapper: mapper, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of EtcdMembers: %w", err)
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.EtcdMember{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("watching EtcdMembers: %w", err)
	}
	o := &ownLeave{cache: c, synced: inf.HasSynced, localID: localID, changed: make(chan struct{}, 1)}
	notify := func() {
		select {
		case o.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return nil, fmt.Errorf("watching EtcdMembers: %w", err)
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			logf.FromContext(ctx).Error(err, "The cache of EtcdMembers stopped; campaigning as if no own leave were pending")
		}
	}()
	return o, nil
}

// pending reports whether an object records the local member with spec.leave and without
// Left=True, the same test the leader's controller applies before it hands over; known is false
// until the cache has synced and the local member ID is known.
func (o *ownLeave) pending(ctx context.Context) (pending, known bool) {
	id := o.localID()
	if id == 0 || !o.synced() {
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := o.cache.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "Listing cached EtcdMembers failed")
		return false, false
	}
	own := etcd.IDString(id)
	for i := range list.Items {
		m := &list.Items[i]
		if m.Status.MemberID == own && m.LeaveAsked() && !status.IsTrue(m, v1alpha1.ConditionLeft) {
			return true, true
		}
	}
	return false, true
}

func newIdentity(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "_" + hex.EncodeToString(b)
}

// The leader acts through its local etcd member: it reads the member list there and removes
// members through it. An agent whose member is gone (removed, wiped, its etcd down) can hold the
// Lease and do nothing, which the chaos run found: a leave waited on it for good. So an agent only
// campaigns while its registrar reaches the local member, and a leader steps down once it has not
// for localUnusableAfter sync intervals.
const localUnusableAfter = 2

// awaitLocalMember returns once the registrar's last sync reached the local member.
func (l *leadership) awaitLocalMember(ctx context.Context) {
	if l.registrar.Ready() == nil {
		return
	}
	logf.FromContext(ctx).Info("Local etcd member not reachable or not in the member list; staying out of the election until it is")
	tick := time.NewTicker(l.opts.RetryPeriod)
	defer tick.Stop()
	for l.registrar.Ready() != nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leadableRecheck is how often an agent in front of an etcd too old to lead looks again: an
// upgrade of etcd in place needs no restart of the agent.
const leadableRecheck = 30 * time.Second

// awaitLeadableEtcd returns true once the local etcd is a version the controller may lead (see
// requireLeadableEtcd), false when ctx ends first. Until then this agent stays out of the election
// and keeps registering its member; the error is logged at every check.
func (l *leadership) awaitLeadableEtcd(ctx context.Context) bool {
	for {
		err := requireLeadableEtcd(ctx, l.etcd, l.registrar.Endpoint)
		if err == nil {
			return true
		}
		wait := l.opts.RetryPeriod
		if errors.Is(err, etcd.ErrEtcdTooOld) {
			wait = leadableRecheck
			logf.FromContext(ctx).Error(err, "Not leading: upgrade etcd to 3.5 or later; this agent still registers its member", "recheckIn", wait)
		} else {
			logf.FromContext(ctx).Info("Checking the local etcd's version failed; retrying before campaigning", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// localGuard ends a leadership term whose local member has been unusable too long.
type localGuard struct{ l *leadership }

func (g localGuard) NeedLeaderElection() bool { return true }

func (g localGuard) Start(ctx context.Context) error {
	limit := localUnusableAfter * g.l.opts.SyncInterval
	tick := time.NewTicker(g.l.opts.RetryPeriod)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if g.l.registrar.Ready() == nil {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < limit {
			continue
		}
		logf.FromContext(ctx).Info("Local etcd member unusable; stepping down so that an agent with a working member leads", "for", time.Since(since).Round(time.Second))
		g.l.mu.Lock()
		stepDown := g.l.stepDown
		g.l.mu.Unlock()
		// Like a hand-over: never in the middle of a change.
		g.l.changeLock.Lock()
		stepDown()
		g.l.changeLock.Unlock()
		return nil
	}
}
