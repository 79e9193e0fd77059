// The term loop: the membership reconciler runs in leadership terms, each one a fresh manager that
// campaigns for the Lease. Giving leadership up (a hand-over, a withdrawal before winning, a local
// member gone unusable) then only ends a term, and the next campaign starts with a new manager,
// cache and reconciler. The reconciler sees its term only through controller.Leadership (term).

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/controller"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// leadership runs the membership reconciler in leadership terms. Each term is a fresh manager that
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

	// changeLock is shared by every term's reconciler: see controller.MembershipReconciler.ChangeLock.
	changeLock sync.Mutex

	// own follows whether the local member has a pending leave, and releases when the leader
	// Lease is released; both nil without leader election.
	own      *ownLeave
	releases *leaseReleases
	// mapper serves every term's manager.
	mapper meta.RESTMapper

	state termState
}

// NeedLeaderElection: the terms campaign themselves.
func (l *leadership) NeedLeaderElection() bool { return false }

// Start runs terms until ctx ends.
func (l *leadership) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("leadership")
	ctx = logf.IntoContext(ctx, log)
	if err := l.prepare(ctx); err != nil {
		return err
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
		l.beginTerm(termCtx, cancel)
		if l.own != nil && !deliberate {
			go l.withdrawOnOwnLeave(termCtx)
		}
		if l.releases != nil {
			l.releases.drain()
			go l.campaignAgainOnRelease(termCtx)
		}
		err := l.runTerm(termCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		l.afterTerm(ctx, err)
	}
	return nil
}

// prepare makes what every term of the agent shares: the watches of its own member's leave and
// of the Lease's releases, and one REST mapper.
func (l *leadership) prepare(ctx context.Context) error {
	if l.opts.LeaderElect {
		own, err := startOwnLeave(ctx, l.rest, l.registrar.Client.Scheme(), l.registrar.LocalMemberID)
		if err != nil {
			return err
		}
		l.own = own
		if l.releases, err = startLeaseReleases(ctx, l.rest, l.opts.LeaderElectionNamespace); err != nil {
			return err
		}
	}
	// Every term's manager shares one REST mapper: a fresh one asked the apiserver's discovery
	// again at each term, before the term's first list of EtcdMembers.
	httpClient, err := rest.HTTPClientFor(l.rest)
	if err != nil {
		return fmt.Errorf("creating the leader's HTTP client: %w", err)
	}
	if l.mapper, err = apiutil.NewDynamicRESTMapper(l.rest, httpClient); err != nil {
		return fmt.Errorf("creating the leader's REST mapper: %w", err)
	}
	return nil
}

// afterTerm says how a term ended and, when it failed, waits a retry period before the next
// campaign. A term that stepped down or withdrew returns nil and goes straight to holdOff, which
// decides how long to stay out.
func (l *leadership) afterTerm(ctx context.Context, err error) {
	log := logf.FromContext(ctx)
	switch {
	case err == nil:
		return
	case errors.Is(err, errLeaseLost):
		// How a term ends when the Lease could not be renewed in time (the apiserver slow or
		// unreachable from here): expected in an outage, and not this agent's fault, so no
		// error with a stack trace. Another agent leads meanwhile, or this one again later.
		log.Info("Leadership term ended: the leader Lease was not renewed in time; standing by", "renewDeadline", l.opts.RenewDeadline)
	default:
		log.Error(err, "Leadership term ended")
	}
	select {
	case <-ctx.Done():
	case <-time.After(l.opts.RetryPeriod):
	}
}

func (l *leadership) runTerm(ctx context.Context) error {
	opts, err := l.managerOptions(ctx)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(l.rest, opts)
	if err != nil {
		return fmt.Errorf("creating the leader's manager: %w", err)
	}
	// One connection per member for the term's probes and removals.
	pool := etcd.NewPool(l.etcd)
	defer pool.Close()
	// The term's calls to the cluster as a whole start on the local endpoint, then go wherever
	// the watcher's rounds find members serving (the watcher's Route): the local member's death,
	// freeze or isolation must not blind the leader (docs/architecture.md, "When the leader's own
	// member fails").
	cluster, err := l.etcd.WithEndpoints(l.etcd.Endpoints())
	if err != nil {
		return fmt.Errorf("connecting the leader to etcd: %w", err)
	}
	defer func() { _ = cluster.Close() }()
	if err := l.addTermControllers(ctx, mgr, cluster, pool); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil && err.Error() == leaseLostMessage {
		return errLeaseLost
	} else if err != nil {
		return err
	}
	return nil
}

// managerOptions configures a term's manager: its own leader election on the Lease, and
// everything else off or shared with the agent's other terms.
func (l *leadership) managerOptions(ctx context.Context) (ctrl.Options, error) {
	opts := ctrl.Options{
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return l.mapper, nil },
		Scheme:                 l.registrar.Client.Scheme(),
		Logger:                 logf.FromContext(ctx),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 client.Options{FieldOwner: v1alpha1.FieldManagerLeader},
		// Every term registers the same controller name again in this process. Warm-up lists the
		// EtcdMembers into the term's cache while it campaigns: after winning, the controllers'
		// wait for a first sync, polled every 100 ms, held a new leader's first reconcile back by
		// about 200 ms, and with it every failover and hand-over.
		Controller: config.Controller{SkipNameValidation: ptr.To(true), EnableWarmup: ptr.To(true)},
	}
	if l.opts.LeaderElect {
		lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock,
			l.opts.LeaderElectionNamespace, v1alpha1.LeaseName, resourcelock.ResourceLockConfig{Identity: l.identity},
			l.rest, l.opts.RenewDeadline)
		if err != nil {
			return ctrl.Options{}, fmt.Errorf("creating the leader election lock: %w", err)
		}
		opts.LeaderElection = true
		opts.LeaderElectionID = v1alpha1.LeaseName
		opts.LeaderElectionNamespace = l.opts.LeaderElectionNamespace
		opts.LeaderElectionResourceLockInterface = lock
		opts.LeaderElectionReleaseOnCancel = true
		opts.LeaseDuration = &l.opts.LeaseDuration
		opts.RenewDeadline = &l.opts.RenewDeadline
		opts.RetryPeriod = &l.opts.RetryPeriod
	}
	return opts, nil
}

// addTermControllers adds the term's runnables to mgr: the membership watcher and reconciler,
// the Node controller, and the term's own guards.
func (l *leadership) addTermControllers(ctx context.Context, mgr ctrl.Manager, cluster *etcd.Client, pool *etcd.Pool) error {
	watcher := controller.NewMembershipWatcher(mgr.GetClient(), cluster, pool, controller.WatcherConfig{
		PollInterval: l.opts.MembershipPollInterval, ProbeInterval: l.opts.ProbeInterval,
		ProbeTimeout: l.opts.ProbeTimeout, HealthRefresh: l.opts.HealthRefresh,
		Route: cluster.SetEndpoints,
	})
	reconciler := &controller.MembershipReconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Events:          l.events,
		Etcd:            cluster,
		Peers:           pool,
		Intents:         controller.BoundIntents(l.intents.Through(cluster), l.opts.ProbeTimeout),
		Leadership:      term{l},
		Probes:          watcher.Probes,
		ChangeLock:      &l.changeLock,
		ProbeTimeout:    l.opts.ProbeTimeout,
		RecheckInterval: l.opts.RecheckInterval,
		// The back-off only grows between terms (in holdOff), so one value serves the whole term.
		HandOverRetry:          l.handOverRetry(),
		HealthRefresh:          l.opts.HealthRefresh,
		LearnerStallTimeout:    l.opts.LearnerStallTimeout,
		RemoveUnreachableAfter: l.opts.RemoveUnreachableAfter,
		MinVoters:              l.opts.MinVoters,
		DiscoveryGrace:         controller.DiscoveryGrace(l.opts.MembershipPollInterval),
	}
	if err := mgr.Add(watcher); err != nil {
		return err
	}
	metadataClient, err := metadata.NewForConfig(l.rest)
	if err != nil {
		return fmt.Errorf("creating the Node metadata client: %w", err)
	}
	nodeWatches := controller.NewNodeWatches(ctx, metadataClient)
	if err := mgr.Add(nodeWatches); err != nil {
		return err
	}
	nodes := &controller.NodeReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: l.events, Nodes: nodeWatches,
		LeaveOnDelete: l.opts.LeaveOnNodeDelete, Hold: l.opts.NodeDeleteHold,
	}
	if err := nodes.SetupWithManager(mgr, nodeWatches); err != nil {
		return fmt.Errorf("setting up the node controller: %w", err)
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
		return fmt.Errorf("setting up the membership reconciler: %w", err)
	}
	return nil
}

// termHeld reads the leader Lease past every cache and fails unless it still names this agent
// and was renewed less than a lease duration ago. The renewTime it checks was written by this
// agent, so this agent's clock is the right one to judge it by.
func (l *leadership) termHeld(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	lease := &coordinationv1.Lease{}
	if err := l.registrar.Reader.Get(ctx, types.NamespacedName{Namespace: l.opts.LeaderElectionNamespace, Name: v1alpha1.LeaseName}, lease); err != nil {
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
	metrics.Leader.Set(1)
	<-ctx.Done()
	metrics.Leader.Set(0)
	return nil
}

// term is the reconciler's view of this agent's leadership (controller.Leadership).
type term struct{ l *leadership }

var _ controller.Leadership = term{}

func (t term) LocalMemberID() uint64 { return t.l.registrar.LocalMemberID() }

func (t term) HandOver(memberID uint64) bool { return t.l.handOver(memberID) }

// TermHeld checks the leader Lease; without leader election there is no term to lose.
func (t term) TermHeld(ctx context.Context) error {
	if !t.l.opts.LeaderElect {
		return nil
	}
	return t.l.termHeld(ctx)
}
