package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdmember/etcdmember/internal/controller"
	"github.com/etcdmember/etcdmember/internal/etcd"
	"github.com/etcdmember/etcdmember/internal/events"
)

// LeaseName is the Lease the agents elect their leader with.
const LeaseName = "etcdmember-leader"

// leadership runs the leave controller in leadership terms. Each term is a fresh manager that
// campaigns for the Lease; a term ends when ctx ends, when leadership is lost, or when the
// leader steps down so that another agent can remove this node's own member.
type leadership struct {
	opts      Options
	rest      *rest.Config
	etcd      *etcd.Client
	events    *events.Recorder
	registrar *Registrar
	identity  string

	// changeLock is shared by every term's reconciler: see controller.LeaveReconciler.ChangeLock.
	changeLock sync.Mutex

	mu          sync.Mutex
	termStart   time.Time
	stepDownFor uint64
	stepDownAt  time.Time
	stepDown    context.CancelFunc
}

// NeedLeaderElection: the terms campaign themselves.
func (l *leadership) NeedLeaderElection() bool { return false }

// Start runs terms until ctx ends.
func (l *leadership) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("leadership")
	for ctx.Err() == nil {
		termCtx, cancel := context.WithCancel(ctx)
		l.mu.Lock()
		l.stepDown = cancel
		l.termStart = time.Time{}
		l.mu.Unlock()
		err := l.runTerm(logf.IntoContext(termCtx, log))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		wait := l.opts.RetryPeriod
		if err != nil {
			log.Error(err, "Leadership term ended")
		} else {
			// Stepped down: stay out of the election long enough for every other agent to see the
			// Lease released and take it.
			wait = l.campaignDelay()
			log.Info("Stepped down; waiting before campaigning again", "wait", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// campaignDelay is how long a leader that stepped down stays out of the election. client-go's
// candidates retry every RetryPeriod stretched by a jitter of up to 1.2 times, so anything under
// 2.2 periods can let the one stepping down win again while another agent is waiting; that
// happened in `make bench` and cost a 30 s hand-over retry.
func (l *leadership) campaignDelay() time.Duration { return 3 * l.opts.RetryPeriod }

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
	watcher := controller.NewMembershipWatcher(mgr.GetClient(), mgr.GetAPIReader(), l.etcd, pool, controller.WatcherConfig{
		PollInterval: l.opts.MembershipPollInterval, ProbeInterval: l.opts.ProbeInterval,
		ProbeTimeout: l.opts.ProbeTimeout, HealthRefresh: l.opts.HealthRefresh,
	})
	reconciler := &controller.LeaveReconciler{
		Client:                 mgr.GetClient(),
		Etcd:                   l.etcd,
		Pool:                   pool,
		Events:                 l.events,
		LocalMemberID:          l.registrar.LocalMemberID,
		Probes:                 watcher.Probes,
		HandOver:               l.handOver,
		ChangeLock:             &l.changeLock,
		ProbeTimeout:           l.opts.ProbeTimeout,
		RecheckInterval:        l.opts.RecheckInterval,
		HandOverRetry:          l.opts.HandOverRetry,
		HealthRefresh:          l.opts.HealthRefresh,
		LearnerStallTimeout:    l.opts.LearnerStallTimeout,
		RemoveUnreachableAfter: l.opts.RemoveUnreachableAfter,
		MinVoters:              l.opts.MinVoters,
	}
	if err := mgr.Add(watcher); err != nil {
		return err
	}
	if err := mgr.Add(termStarted{l}); err != nil {
		return err
	}
	if err := reconciler.SetupWithManager(mgr, watcher); err != nil {
		return fmt.Errorf("setting up the leave controller: %w", err)
	}
	return mgr.Start(ctx)
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
// leader election there is nobody else, and when this term began right after stepping down for
// the same member, no other agent is campaigning. Within a term, a failed hand-over is tried
// again after HandOverRetry, in case an agent has been started elsewhere since.
func (l *leadership) handOver(memberID uint64) bool {
	if !l.opts.LeaderElect {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.markTermStartLocked(now)
	regained := l.termStart.Sub(l.stepDownAt) < l.campaignDelay()+2*l.opts.RetryPeriod
	if l.stepDownFor == memberID && regained && now.Sub(l.termStart) < l.opts.HandOverRetry {
		return false
	}
	l.stepDownFor, l.stepDownAt = memberID, now
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

func newIdentity(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "_" + hex.EncodeToString(b)
}
