package controller

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
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

// Probes is the leader's latest view of every member's health.
type Probes struct {
	// Members holds each listed member's latest probe by member ID.
	Members map[uint64]etcd.Health
	// Alarms holds the active alarms by member ID, as last read; a failed read keeps the previous.
	Alarms map[uint64][]string
	// List is the member list the round probed: the latest poll's, since a change of membership
	// starts a round at once.
	List []etcd.Member
	// NotServingSince holds, for each member this round found answering but serving no
	// linearizable read, and only for those, when the first round of its streak of such rounds
	// started: a round that started later is at least the second.
	NotServingSince map[uint64]time.Time
}

// notServing tells whether the round found member id answering but not serving.
func (p *Probes) notServing(id uint64) bool {
	h, ok := p.Members[id]
	return ok && h.Reachable && !h.Serving
}

// notServingAgain tells whether the round found member id not serving, as an earlier round of
// the streak did.
func (p *Probes) notServingAgain(id uint64) bool {
	since, ok := p.NotServingSince[id]
	return ok && p.Members[id].At.After(since)
}

// Healthy tells whether the member's latest probe found it serving: for quorum, a member that
// answers but cannot serve linearizable reads counts as lost.
func (p Probes) Healthy(id uint64) bool { return p.Members[id].Serving }

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

// servingVoters returns the client URLs, as probed, of every voter round p found serving: where
// the leader's calls to the cluster as a whole go, balanced over those the client can connect to.
// The leader's own member is one of them like any other: when it dies, its connection fails and
// the calls go to the others at once; when it freezes or is cut off, the next round takes it out.
// A leader whose own etcd failed thus still reads the member list and records what its probes
// found, and is no blinder to that failure than to any other. nil when no voter served: no call
// to the cluster can succeed then, wherever it goes, and the last members that served are the
// likeliest to again.
func servingVoters(p Probes) []string {
	var urls []string
	for _, m := range p.List {
		if !m.IsLearner && p.Healthy(m.ID) {
			urls = append(urls, m.ClientURLs...)
		}
	}
	return urls
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
	if changed {
		w.peers.Retain(members)
	}
	probed := changed || probeDue
	if probed {
		changed = w.probe(ctx, members) || changed
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

// probe probes every member in parallel and reads the alarms, and tells whether anything an
// operator acts on changed: reachability, serving, leadership, learner state, alarms. Raft index
// and DB size move with every write, the raft term with every election, and do not count.
func (w *MembershipWatcher) probe(ctx context.Context, members []etcd.Member) bool {
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

	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.probes
	switch {
	case err == nil:
		next.Alarms = alarms
	case prev != nil:
		next.Alarms = prev.Alarms
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

// carryStreaks sets NotServingSince from the round before, prev (nil: none): a member not serving
// in both keeps the start of its streak, one not serving in this round only starts one here.
func (p *Probes) carryStreaks(prev *Probes) {
	p.NotServingSince = map[uint64]time.Time{}
	for id, h := range p.Members {
		if !p.notServing(id) {
			continue
		}
		p.NotServingSince[id] = h.At
		if prev != nil {
			if since, ok := prev.NotServingSince[id]; ok {
				p.NotServingSince[id] = since
			}
		}
	}
}

// summarize renders what counts as a change of health, in a stable order.
//
// A member found not serving again, after an earlier round of its streak, is marked: Healthy
// turns NotServing only from the second round (observeHealth), so that round must reach the
// reconciler although its probe says what the first one did.
func summarize(p Probes) string {
	ids := slices.Sorted(maps.Keys(p.Members))
	var b strings.Builder
	for _, id := range ids {
		h := p.Members[id]
		fmt.Fprintf(&b, "%x:%t,%t,%t,%t,%x,%v,%t;", id, h.Reachable, h.Serving, h.Status.Leader == id,
			h.Status.IsLearner, h.AnsweredBy, p.Alarms[id], p.notServingAgain(id))
	}
	return b.String()
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
