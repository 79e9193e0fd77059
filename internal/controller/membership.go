package controller

import (
	"context"
	"maps"
	"reflect"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/etcd"
)

// Defaults of the watcher's intervals.
const (
	// DefaultMembershipPollInterval is how often the leader reads etcd's member list to notice
	// changes nobody announced through the API (etcdctl, a member that died of its own removal).
	DefaultMembershipPollInterval = 2 * time.Second
	// DefaultProbeInterval is how often the leader probes every voter for the Removable
	// condition.
	DefaultProbeInterval = 5 * time.Second

	// discoveryPolls is how many member list polls a member may go without an object before the
	// leader creates one for it.
	discoveryPolls = 10
)

// MembershipWatcher watches what etcd has no watch for: its member list and its voters' health.
// When either changes it creates objects for members that have none, then asks the controller to
// reconcile every object. It runs on the leader only.
type MembershipWatcher struct {
	client        client.Client
	reader        client.Reader
	etcd          *etcd.Client
	pollInterval  time.Duration
	probeInterval time.Duration
	probeTimeout  time.Duration
	events        chan event.GenericEvent

	// discoveryGrace is how long a member may go without an object before the watcher creates
	// one; unregistered records since when each such member has been seen.
	discoveryGrace time.Duration
	unregistered   map[uint64]time.Time

	mu      sync.Mutex
	healthy map[uint64]bool
}

// NewMembershipWatcher polls etcd; c writes discovered objects and reader reads around the cache,
// so that a member is never given two objects.
func NewMembershipWatcher(c client.Client, reader client.Reader, e *etcd.Client, pollInterval, probeInterval, probeTimeout time.Duration) *MembershipWatcher {
	return &MembershipWatcher{
		client: c, reader: reader, etcd: e,
		pollInterval: pollInterval, probeInterval: probeInterval, probeTimeout: probeTimeout,
		discoveryGrace: discoveryPolls * pollInterval,
		events:         make(chan event.GenericEvent, 64),
	}
}

// Source is the controller's view of the watcher.
func (w *MembershipWatcher) Source() source.Source {
	return source.Channel(w.events, &handler.EnqueueRequestForObject{})
}

// Health returns the voters' health from the latest probe, and false before the first one.
func (w *MembershipWatcher) Health() (map[uint64]bool, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.healthy), w.healthy != nil
}

// NeedLeaderElection makes the watcher run on the leader only.
func (w *MembershipWatcher) NeedLeaderElection() bool { return true }

// pollState is what the watcher remembers between polls.
type pollState struct {
	members   []etcd.Member
	lastProbe time.Time
	// waiting: members without an object are waiting out the discovery grace.
	waiting bool
}

// Start polls until ctx ends.
func (w *MembershipWatcher) Start(ctx context.Context) error {
	ctx = logf.IntoContext(ctx, logf.FromContext(ctx).WithName("membership"))
	defer forgetMembership()
	var state pollState
	ticker := time.NewTicker(w.pollInterval)
	defer ticker.Stop()
	for {
		w.poll(ctx, &state)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// poll reads the member list, probes the voters when due, creates objects for unregistered
// members, and enqueues every object when membership or health changed.
func (w *MembershipWatcher) poll(ctx context.Context, state *pollState) {
	log := logf.FromContext(ctx)
	if err := w.recordObjects(ctx); err != nil {
		log.V(1).Info("Listing EtcdMembers for metrics failed", "error", err.Error())
	}
	members, err := w.etcd.MemberList(ctx)
	if err != nil {
		log.V(1).Info("Reading the member list failed", "error", err.Error())
		return
	}
	changed := !reflect.DeepEqual(state.members, members)
	if changed || time.Since(state.lastProbe) >= w.probeInterval {
		state.lastProbe = time.Now()
		changed = w.probe(ctx, members) || changed
	}
	if changed || state.waiting {
		state.members = members
		if state.waiting, err = w.discover(ctx, members); err != nil {
			log.Error(err, "Creating objects for unregistered members failed")
		}
	}
	if !changed {
		return
	}
	healthy, _ := w.Health()
	recordMembership(members, healthy)
	if err := w.enqueueAll(ctx); err != nil {
		log.Error(err, "Listing EtcdMembers failed")
		// Forget the member list so that the next poll enqueues again.
		state.members = nil
	}
}

// probe refreshes the voters' health and tells whether it changed.
func (w *MembershipWatcher) probe(ctx context.Context, members []etcd.Member) bool {
	healthy := map[uint64]bool{}
	for _, v := range probeVoters(ctx, w.etcd, members, 0, w.probeTimeout) {
		healthy[v.ID] = v.Healthy
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := !maps.Equal(w.healthy, healthy)
	w.healthy = healthy
	return changed
}

// recordObjects refreshes the objects gauge from the cache, which costs no API request.
func (w *MembershipWatcher) recordObjects(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := w.client.List(ctx, &list); err != nil {
		return err
	}
	recordObjects(list.Items)
	return nil
}

func (w *MembershipWatcher) enqueueAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := w.client.List(ctx, &list); err != nil {
		return err
	}
	for i := range list.Items {
		select {
		case w.events <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
