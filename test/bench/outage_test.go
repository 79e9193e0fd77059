//go:build bench

package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// outageWindow is how long one member's node stays down in the outage part: long enough for
// several health refreshes, and about as long as a node's reboot or repair may take.
const outageWindow = 10 * time.Minute

// outageWindowEnv overrides outageWindow, for short trial runs of the wiring:
// BENCH_OUTAGE_WINDOW=1m go test -tags bench -run 'TestBench/production/outage' ./test/bench/
const outageWindowEnv = "BENCH_OUTAGE_WINDOW"

// outageEventGoal is the report's goal for the Events about the down member: going down, and
// perhaps a change of verdict while it stays down; not one per probe.
const outageEventGoal = 3

// outageCost is what one member's outage cost in writes to its object and in Events about it.
type outageCost struct {
	member string
	window time.Duration
	// probe and refresh are the agents' --probe-interval and --health-refresh-interval.
	probe, refresh time.Duration
	// statusWrites counts the changes of the object seen by a watch in the window that changed
	// its status; otherWrites the ones that changed only its spec or metadata.
	statusWrites, otherWrites int
	// changes counts the status writes by what they changed, e.g. "Healthy message".
	changes map[string]int
	// events are the Events in kube-system about the object written in the window, in order.
	events []outageEvent
	// back is from the restart of the member's etcd to Healthy=True/Serving on its object.
	back time.Duration
}

type outageEvent struct {
	after             time.Duration
	eventType, reason string
}

// probeRounds is how many probes of the down member the leading agent made in the window.
func (o *outageCost) probeRounds() int { return int(o.window / o.probe) }

// writeGoal is one write for going down and one per health refresh: 6 for 10 minutes at the
// 2-minute default.
func (o *outageCost) writeGoal() int { return 1 + int(o.window/o.refresh) }

// eventReasons counts the Events by "Type/Reason".
func (o *outageCost) eventReasons() map[string]int {
	out := map[string]int{}
	for _, ev := range o.events {
		out[ev.eventType+"/"+ev.reason]++
	}
	return out
}

// outageWindowFromEnv returns the duration in outageWindowEnv, or outageWindow.
func outageWindowFromEnv(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(outageWindowEnv)
	if v == "" {
		return outageWindow
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", outageWindowEnv, v)
	}
	return d
}

// outage takes one member's node down as a real node goes down, etcd and agent together, for
// window, and counts what that costs on the member's object: status writes, seen by a watch on
// the object, and Events about it, seen by a watch on kube-system's Events. The node is neither
// the leading agent's, which keeps probing it, nor etcd's leader, so no election muddles the
// figures. Then the node comes back and the part waits until its object says Healthy=True, so
// that what follows starts from a steady cluster.
func (e *env) outage(window time.Duration) *outageCost {
	e.t.Helper()
	time.Sleep(quietWarmup)
	healthy := func(obj *v1alpha1.EtcdMember) bool {
		return status.HasReason(obj, v1alpha1.ConditionHealthy, v1alpha1.ReasonServing)
	}
	for _, m := range e.cluster.Members() {
		e.waitMember(m.Name, "healthy before the outage", healthy)
	}
	victim, _ := e.pickTarget()
	a := e.agents[victim.Name]
	opts := agent.DefaultOptions()
	o := &outageCost{member: victim.Name, window: window, probe: opts.ProbeInterval, refresh: opts.HealthRefresh, changes: map[string]int{}}

	ctx, cancel := context.WithTimeout(context.Background(), window+settle)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	writes := e.countWrites(watchCtx, victim.Name)
	events := e.collectEvents(watchCtx, victim.Name)

	// A node that loses power: no process on it gets to say goodbye. The agent goes first so that
	// it never sees its own etcd gone.
	down := time.Now()
	a.Kill(e.t)
	victim.Kill(e.t)
	e.t.Logf("outage: %s (agent and etcd) SIGKILLed; leading agent %s; down for %s", victim.Name, e.leaderAgent(), window)
	time.Sleep(time.Until(down.Add(window)))
	stopWatch()

	w := await(ctx, e.t, writes, "watch on "+victim.Name)
	if w.err != nil {
		e.t.Fatalf("watching %s: %v", victim.Name, w.err)
	}
	for _, c := range w.changes {
		if c == "" {
			o.otherWrites++
			continue
		}
		o.statusWrites++
		o.changes[c]++
	}
	evs := await(ctx, e.t, events, "watch on Events")
	if evs.err != nil {
		e.t.Fatalf("watching Events: %v", evs.err)
	}
	for _, ev := range evs.events {
		at := ev.EventTime.Time
		if at.IsZero() {
			at = ev.CreationTimestamp.Time
		}
		o.events = append(o.events, outageEvent{
			after: at.Sub(down), eventType: ev.Type, reason: ev.Reason,
		})
		e.t.Logf("outage: Event %s after the kill: %s/%s %q", at.Sub(down).Round(time.Millisecond), ev.Type, ev.Reason, ev.Note)
	}
	e.t.Logf("outage: %d status writes (%v), %d other writes, %d Events (%v) in %s; %d probe rounds",
		o.statusWrites, o.changes, o.otherWrites, len(o.events), o.eventReasons(), window, o.probeRounds())

	started := time.Now()
	victim.Start(e.t)
	a.Start(e.t)
	e.waitMember(victim.Name, "healthy after the outage", healthy)
	o.back = time.Since(started)
	e.t.Logf("outage: %s Healthy=True/Serving %s after its etcd was started again", victim.Name, o.back.Round(time.Millisecond))
	return o
}

// watchResult is what a watch goroutine found by the end of its context, or why it stopped.
type watchResult struct {
	// changes describes each write to the object, in order: what it changed in the status, or ""
	// for a write that left the status alone.
	changes []string
	events  []eventsv1.Event
	err     error
}

// countWrites watches one EtcdMember from its current resourceVersion until ctx ends, then sends
// what each write changed. Every write to an object is one watch event, so none is missed; a
// watch the apiserver closes early is resumed from the last resourceVersion seen.
func (e *env) countWrites(ctx context.Context, name string) <-chan watchResult {
	e.t.Helper()
	prev := &v1alpha1.EtcdMember{}
	getCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := e.client.Get(getCtx, types.NamespacedName{Name: name}, prev); err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	ch := make(chan watchResult, 1)
	var res watchResult
	resume := e.watchFrom(ctx, &v1alpha1.EtcdMemberList{}, prev.ResourceVersion, func(ev watch.Event) {
		cur, ok := ev.Object.(*v1alpha1.EtcdMember)
		if !ok || ev.Type != watch.Modified {
			return
		}
		res.changes = append(res.changes, statusChange(prev, cur))
		prev = cur
	}, client.MatchingFields{"metadata.name": name})
	go func() {
		res.err = resume()
		ch <- res
	}()
	return ch
}

// collectEvents watches kube-system's Events from now until ctx ends, then sends those about the
// EtcdMember name.
func (e *env) collectEvents(ctx context.Context, name string) <-chan watchResult {
	e.t.Helper()
	var list eventsv1.EventList
	listCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := e.client.List(listCtx, &list, client.InNamespace("kube-system"), client.Limit(1)); err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	ch := make(chan watchResult, 1)
	var res watchResult
	resume := e.watchFrom(ctx, &eventsv1.EventList{}, list.ResourceVersion, func(ev watch.Event) {
		obj, ok := ev.Object.(*eventsv1.Event)
		if ok && ev.Type == watch.Added && obj.Regarding.Kind == "EtcdMember" && obj.Regarding.Name == name {
			res.events = append(res.events, *obj)
		}
	}, client.InNamespace("kube-system"))
	go func() {
		res.err = resume()
		ch <- res
	}()
	return ch
}

// watchFrom opens a watch from resourceVersion rv and returns a function that hands every event
// to handle until ctx ends, reopening the watch from the last resourceVersion seen whenever the
// apiserver ends it. The watch is established when watchFrom returns, so nothing written after
// the call is missed.
func (e *env) watchFrom(ctx context.Context, list client.ObjectList, rv string, handle func(watch.Event), opts ...client.ListOption) func() error {
	e.t.Helper()
	open := func() (watch.Interface, error) {
		o := append([]client.ListOption{&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}}, opts...)
		return e.client.Watch(ctx, list, o...)
	}
	w, err := open()
	if err != nil {
		e.t.Fatalf("watch %T: %v", list, err)
	}
	return func() error {
		for {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					w.Stop()
					if ctx.Err() != nil {
						// The client reports its own cancellation as an error event.
						return nil
					}
					return fmt.Errorf("watch %T from resourceVersion %s: %w", list, rv, apierrors.FromObject(ev.Object))
				}
				if obj, ok := ev.Object.(client.Object); ok {
					rv = obj.GetResourceVersion()
				}
				if ev.Type != watch.Bookmark {
					handle(ev)
				}
			}
			w.Stop()
			if ctx.Err() != nil {
				return nil
			}
			if w, err = open(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("reopening the watch %T from resourceVersion %s: %w", list, rv, err)
			}
		}
	}
}

// statusChange names what one write changed in the status, "" when it changed none of it:
// "Healthy Serving→Unreachable", "Healthy message", "health.reachable", "health refresh" (only
// the probe's time and figures), and other conditions by type.
func statusChange(before, after *v1alpha1.EtcdMember) string {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return ""
	}
	var parts []string
	condTypes := map[string]bool{}
	for _, c := range append(slices.Clone(before.Status.Conditions), after.Status.Conditions...) {
		condTypes[c.Type] = true
	}
	for _, t := range slices.Sorted(maps.Keys(condTypes)) {
		b, a := status.Get(before, t), status.Get(after, t)
		switch {
		case b == nil || a == nil:
			if b != a {
				parts = append(parts, t+" added or removed")
			}
		case b.Status != a.Status || b.Reason != a.Reason:
			parts = append(parts, fmt.Sprintf("%s %s→%s", t, b.Reason, a.Reason))
		case b.Message != a.Message:
			parts = append(parts, t+" message")
		case !equality.Semantic.DeepEqual(*b, *a):
			parts = append(parts, t+" other fields")
		}
	}
	bh, ah := before.Status.Health, after.Status.Health
	switch {
	case bh == nil || ah == nil:
		if bh != ah {
			parts = append(parts, "health added or removed")
		}
	case bh.Reachable != ah.Reachable:
		parts = append(parts, "health.reachable")
	case bh.Leader != ah.Leader:
		parts = append(parts, "health.leader")
	case bh.RaftTerm != ah.RaftTerm:
		parts = append(parts, "health.raftTerm")
	case !slices.Equal(bh.Alarms, ah.Alarms):
		parts = append(parts, "health.alarms")
	case !equality.Semantic.DeepEqual(*bh, *ah):
		parts = append(parts, "health refresh")
	}
	b, a := before.Status.DeepCopy(), after.Status.DeepCopy()
	b.Conditions, a.Conditions, b.Health, a.Health = nil, nil, nil, nil
	if !equality.Semantic.DeepEqual(b, a) {
		parts = append(parts, "other status fields")
	}
	return strings.Join(parts, ", ")
}
