package controller

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Defaults of the watcher's intervals.
const (
	// DefaultMembershipPollInterval is how often the leader reads etcd's member list to notice
	// changes nobody announced through the API (etcdctl, a member that died of its own removal).
	DefaultMembershipPollInterval = 2 * time.Second
	// DefaultProbeInterval is how often the leader probes every member's health.
	DefaultProbeInterval = 5 * time.Second
	// DefaultHealthRefresh bounds how stale status.health's slow-moving figures (raft index, DB
	// size, last probe time) may get on a member whose health did not change.
	DefaultHealthRefresh = 2 * time.Minute

	// discoveryPolls is how many member list polls a member may go without an object before the
	// leader creates one for it.
	discoveryPolls = 10
)

// MembershipWatcher watches what etcd has no watch for: its member list and its members' health.
// When either changes, and at least every health refresh interval, it asks the controller to run
// discovery (objects for members that have none) and to reconcile every object. It only observes:
// every write is the reconciler's, one at a time. It runs on the leader only.
type MembershipWatcher struct {
	client        client.Client
	etcd          Cluster
	peers         Peers
	pollInterval  time.Duration
	probeInterval time.Duration
	probeTimeout  time.Duration
	refresh       time.Duration
	enqueue       chan event.GenericEvent
	// route points the leader's cluster calls after each round; nil routes nothing.
	route func([]string)
	// routed is what route was last given; only the watcher's loop touches it.
	routed []string

	mu     sync.Mutex
	probes *Probes
}

// WatcherConfig holds the watcher's intervals.
type WatcherConfig struct {
	PollInterval  time.Duration
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// HealthRefresh is how often every object is reconciled even when nothing changed, so that
	// status.health's last probe time stays within that bound.
	HealthRefresh time.Duration
	// Route, when set, is given after every probe round where the leader's calls to the cluster
	// as a whole (Cluster, the intents) should go: servingVoters.
	Route func(clientURLs []string)
}

// NewMembershipWatcher polls etcd and probes members over peers; c lists the objects to enqueue.
// It writes nothing: discovery runs in the reconciler, on the watcher's request.
func NewMembershipWatcher(c client.Client, e Cluster, peers Peers, cfg WatcherConfig) *MembershipWatcher {
	return &MembershipWatcher{
		client: c, etcd: e, peers: peers,
		pollInterval: cfg.PollInterval, probeInterval: cfg.ProbeInterval, probeTimeout: cfg.ProbeTimeout,
		refresh: cfg.HealthRefresh,
		enqueue: make(chan event.GenericEvent, 64),
		route:   cfg.Route,
	}
}

// Source is the controller's view of the watcher.
func (w *MembershipWatcher) Source() source.Source {
	return source.Channel(w.enqueue, &handler.EnqueueRequestForObject{})
}

// Probes returns the latest probes, and false before the first.
func (w *MembershipWatcher) Probes() (Probes, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.probes == nil {
		return Probes{}, false
	}
	return Probes{Members: maps.Clone(w.probes.Members), Alarms: maps.Clone(w.probes.Alarms), List: slices.Clone(w.probes.List),
		NotServingSince: maps.Clone(w.probes.NotServingSince)}, true
}

// NeedLeaderElection makes the watcher run on the leader only.
func (w *MembershipWatcher) NeedLeaderElection() bool { return true }

// pollState is what the watcher remembers between polls.
type pollState struct {
	members     []etcd.Member
	lastEnqueue time.Time
}

// Start polls the member list every poll interval and probes the members every probe interval,
// until ctx ends.
func (w *MembershipWatcher) Start(ctx context.Context) error {
	ctx = logf.IntoContext(ctx, logf.FromContext(ctx).WithName("membership"))
	defer forgetMembership()
	var state pollState
	polls := time.NewTicker(w.pollInterval)
	defer polls.Stop()
	probes := time.NewTicker(w.probeInterval)
	defer probes.Stop()
	// A round that fell due stays due until a poll probes: when both tickers have fired, the
	// select below may take either.
	probeDue := true
	for {
		if w.poll(ctx, &state, probeDue) {
			probeDue = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-polls.C:
		case <-probes.C:
			probeDue = true
		}
	}
}

// poll reads the member list, probes the members when due, when membership changed or when the
// list could not be read, and enqueues discovery and every object when membership or health
// changed or the refresh interval has passed. It tells whether it probed.
func (w *MembershipWatcher) poll(ctx context.Context, state *pollState, probeDue bool) bool {
	log := logf.FromContext(ctx)
	if err := w.recordObjects(ctx); err != nil {
		log.V(1).Info("Listing EtcdMembers for metrics failed", "error", err.Error())
	}
	// A round that fell due starts on the last list while the list is read: until a round has
	// found a member failed, the list read may go to that very member (it is one of the serving
	// voters the calls are routed to) and wait out the probe timeout, and the round that finds the
	// failure would start only then.
	var ahead <-chan roundResult
	if probeDue && state.members != nil {
		ahead = w.roundAhead(ctx, state.members)
	}
	listCtx, cancel := context.WithTimeout(ctx, w.probeTimeout)
	members, err := w.etcd.MemberList(listCtx)
	cancel()
	if err != nil {
		log.V(1).Info("Reading the member list failed", "error", err.Error())
		if state.members == nil {
			return false
		}
		// The member it was read through may be the one that failed (the leader's own, before a
		// round saw it): a round on the last list, at once, sees it, routes the calls around it
		// (servingVoters), and has the objects say so.
		members, probeDue = state.members, true
	}
	changed := !reflect.DeepEqual(state.members, members)
	probed := changed || probeDue
	if probed {
		changed = w.keep(w.roundOn(ctx, members, changed, ahead)) || changed
	}
	if changed {
		state.members = members
	}
	if !changed && time.Since(state.lastEnqueue) < w.refresh {
		return probed
	}
	probes, _ := w.Probes()
	recordMembership(members, probes)
	if err := w.enqueueAll(ctx); err != nil {
		log.Error(err, "Listing EtcdMembers failed")
		// Forget the member list so that the next poll enqueues again.
		state.members = nil
		return probed
	}
	state.lastEnqueue = time.Now()
	return probed
}

// roundResult is what one probe round found: every member's probe, and the alarms unless their read
// failed.
type roundResult struct {
	probes   Probes
	alarmsOK bool
}

// roundOn returns a round on members: the one started ahead on the last list when the list has
// not changed, else a new one. The round ahead is waited for either way, so that no probe of a
// member that left can open a connection after Retain closed the member's.
func (w *MembershipWatcher) roundOn(ctx context.Context, members []etcd.Member, changed bool, ahead <-chan roundResult) roundResult {
	if ahead != nil {
		r := <-ahead
		if !changed {
			return r
		}
	}
	if changed {
		w.peers.Retain(members)
	}
	return w.round(ctx, members)
}

// roundAhead runs a round on members in the background.
func (w *MembershipWatcher) roundAhead(ctx context.Context, members []etcd.Member) <-chan roundResult {
	done := make(chan roundResult, 1)
	go func() { done <- w.round(ctx, members) }()
	return done
}

// probe runs a round on members and keeps it (keep).
func (w *MembershipWatcher) probe(ctx context.Context, members []etcd.Member) bool {
	return w.keep(w.round(ctx, members))
}

// round probes every member in parallel and reads the alarms, each within the probe timeout.
func (w *MembershipWatcher) round(ctx context.Context, members []etcd.Member) roundResult {
	next := Probes{Members: make(map[uint64]etcd.Health, len(members)), List: members}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range members {
		wg.Go(func() {
			h := w.peers.Probe(ctx, m, w.probeTimeout)
			if h.Err != nil {
				logf.FromContext(ctx).V(1).Info("Member unhealthy", "member", m.Name, "memberID", etcd.IDString(m.ID), "error", h.Err.Error())
			}
			mu.Lock()
			next.Members[m.ID] = h
			mu.Unlock()
		})
	}
	alarmCtx, cancel := context.WithTimeout(ctx, w.probeTimeout)
	alarms, err := w.etcd.Alarms(alarmCtx)
	cancel()
	wg.Wait()
	next.Alarms = alarms
	return roundResult{probes: next, alarmsOK: err == nil}
}

// keep makes r the latest probes and routes the leader's calls by it, and tells whether anything
// an operator acts on changed: reachability, serving, leadership, learner state, alarms. Raft
// index and DB size move with every write, the raft term with every election, and do not count.
// Alarms that could not be read are kept from the round before.
func (w *MembershipWatcher) keep(r roundResult) bool {
	next := r.probes
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.probes
	if !r.alarmsOK {
		next.Alarms = nil
		if prev != nil {
			next.Alarms = prev.Alarms
		}
	}
	next.carryStreaks(prev)
	w.probes = &next
	w.routeTo(next)
	return prev == nil || summarize(*prev) != summarize(next)
}

// routeTo gives route where round p says the calls should go, when that changed.
func (w *MembershipWatcher) routeTo(p Probes) {
	if w.route == nil {
		return
	}
	urls := servingVoters(p)
	if len(urls) == 0 || slices.Equal(urls, w.routed) {
		return
	}
	w.routed = urls
	w.route(urls)
}

// recordObjects refreshes the objects gauge from the cache, which costs no API request.
func (w *MembershipWatcher) recordObjects(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := w.client.List(ctx, &list); err != nil {
		return err
	}
	recordObjects(list.Items, time.Now())
	return nil
}

func (w *MembershipWatcher) enqueueAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := w.client.List(ctx, &list); err != nil {
		return err
	}
	// Discovery first, so that a member's new object is reconciled in the same round.
	objects := []client.Object{&v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: discoveryRequest}}}
	for i := range list.Items {
		objects = append(objects, &list.Items[i])
	}
	for _, o := range objects {
		select {
		case w.enqueue <- event.GenericEvent{Object: o}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
