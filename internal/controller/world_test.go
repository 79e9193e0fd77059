package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd/etcdfake"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// world is the in-process tier's test bed: the leader's reconciler and membership watcher, with
// etcd modelled by etcdfake, the API by controller-runtime's fake client, and the clock by a fake
// one. Each reconcile runs under a context that a crash point can end: from that moment every call
// of that reconcile fails, etcd's and the API's alike, as if the agent had died there.
type world struct {
	t     *testing.T
	etcd  *etcdfake.Cluster
	api   client.Client
	clock *clocktesting.FakePassiveClock
	term  *fakeTerm

	watcher *MembershipWatcher
	r       *MembershipReconciler
	// crash ends the running reconcile's context; set for each reconcile.
	mu    sync.Mutex
	crash context.CancelFunc
}

// fakeTerm is the agent's side of leadership.
type fakeTerm struct {
	mu sync.Mutex
	// checks counts TermHeld calls: one per fence read.
	checks    int
	local     uint64
	lost      error
	canHand   bool
	handOvers []uint64
}

func (f *fakeTerm) LocalMemberID() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.local
}

func (f *fakeTerm) TermHeld(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.lost
}

func (f *fakeTerm) HandOver(id uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handOvers = append(f.handOvers, id)
	return f.canHand
}

// newWorld starts a world whose objects node-<id> each record one of members, all reconciled once.
func newWorld(t *testing.T, members ...etcdfake.Member) *world {
	t.Helper()
	w := &world{t: t, etcd: etcdfake.New(members...), term: &fakeTerm{canHand: true},
		clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))}
	// Every in-process test fails when the leader sent a removal to the member it removes.
	t.Cleanup(func() {
		if sent := w.etcd.SentToTarget(); len(sent) > 0 {
			t.Errorf("removals sent to the member they remove: %v", sent)
		}
	})
	// A crashed reconcile reaches the API no more than etcd.
	dead := func(ctx context.Context) error { return ctx.Err() }
	w.api = fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&v1alpha1.EtcdMember{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if err := dead(ctx); err != nil {
					return err
				}
				return c.Get(ctx, key, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := dead(ctx); err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if err := dead(ctx); err != nil {
					return err
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	for _, m := range members {
		o := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: m.Name}}
		if err := w.api.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		o.Status.MemberID = etcd.IDString(m.ID)
		if err := w.api.Status().Update(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	w.newTerm()
	for _, m := range members {
		w.mustReconcile(m.Name)
	}
	return w
}

// newTerm starts a new leadership term, as a new leader would after the old one died: a fresh
// reconciler and watcher, with nothing remembered from before.
func (w *world) newTerm() {
	recorder := &events.Recorder{Client: w.api, Namespace: "kube-system"}
	w.watcher = NewMembershipWatcher(w.api, w.etcd, w.etcd, WatcherConfig{
		PollInterval: time.Second, ProbeInterval: time.Second, ProbeTimeout: time.Second, HealthRefresh: time.Minute,
	})
	w.r = &MembershipReconciler{
		Client: w.api, APIReader: w.api, Events: recorder,
		Etcd: w.etcd, Peers: w.etcd, Intents: w.etcd.Intents(), Leadership: w.term,
		Probes: w.watcher.Probes, ChangeLock: &sync.Mutex{},
		ProbeTimeout: time.Second, RecheckInterval: 5 * time.Second, HandOverRetry: 30 * time.Second,
		HealthRefresh: time.Minute, LearnerStallTimeout: 10 * time.Minute, MinVoters: 3, Clock: w.clock,
		DiscoveryGrace: DiscoveryGrace(time.Second),
	}
}

// reconcile runs one probe round, as the watcher does before it enqueues, then reconciles name.
func (w *world) reconcile(name string) (ctrl.Result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.mu.Lock()
	w.crash = cancel
	w.mu.Unlock()
	if members, err := w.etcd.MemberList(ctx); err == nil {
		w.watcher.probe(ctx, members)
	}
	return w.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// mustReconcileEnqueued reconciles name as the controller does what the watcher enqueued: on the
// watcher's latest probes, without probing again.
func (w *world) mustReconcileEnqueued(name string) {
	w.t.Helper()
	if _, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}); err != nil {
		w.t.Fatalf("reconcile %s: %v", name, err)
	}
}

// pollRound runs one poll of the watcher, as its loop does with a probe due, then reconciles
// everything it enqueued.
func (w *world) pollRound(state *pollState) {
	w.t.Helper()
	w.watcher.poll(w.t.Context(), state, true)
	for {
		select {
		case ev := <-w.watcher.enqueue:
			w.mustReconcileEnqueued(ev.Object.GetName())
			continue
		default:
		}
		return
	}
}

func (w *world) mustReconcile(name string) ctrl.Result {
	w.t.Helper()
	res, err := w.reconcile(name)
	if err != nil {
		w.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

// crashAt makes the agent die at op's point, in every reconcile until the hook is cleared.
func (w *world) crashAt(op etcdfake.Op, when etcdfake.When) {
	w.etcd.Hook(op, when, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.crash()
	})
}

// crashThenNewTerm reconciles name with the agent dying at op's point, then starts a new term as
// the next leader would. The dead reconcile's outcome is nobody's to read; what it left behind is.
func (w *world) crashThenNewTerm(name string, op etcdfake.Op, when etcdfake.When) {
	w.t.Helper()
	w.crashAt(op, when)
	_, _ = w.reconcile(name)
	w.etcd.Hook(op, when, nil)
	if s, _ := w.condition(name, v1alpha1.ConditionLeft); s != "" {
		w.t.Fatalf("a dead agent wrote Left=%s", s)
	}
	w.newTerm()
}

func (w *world) get(name string) *v1alpha1.EtcdMember {
	w.t.Helper()
	m := &v1alpha1.EtcdMember{}
	if err := w.api.Get(context.Background(), types.NamespacedName{Name: name}, m); err != nil {
		w.t.Fatal(err)
	}
	return m
}

// edit changes the stored object name as an operator would.
func (w *world) edit(name string, f func(*v1alpha1.EtcdMember)) {
	w.t.Helper()
	m := w.get(name)
	f(m)
	if err := w.api.Update(context.Background(), m); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) askLeave(name string) {
	w.edit(name, func(m *v1alpha1.EtcdMember) { m.Spec.Leave = true })
}

// condition returns the status and reason of the object's condition, "" when absent.
func (w *world) condition(name, condType string) (metav1.ConditionStatus, string) {
	c := status.Get(w.get(name), condType)
	if c == nil {
		return "", ""
	}
	return c.Status, c.Reason
}

// expect fails the test unless the object's condition has this status and reason; what says when.
func (w *world) expect(name, condType string, want metav1.ConditionStatus, reason, what string) {
	w.t.Helper()
	if s, r := w.condition(name, condType); s != want || r != reason {
		w.t.Errorf("%s: %s %s = %s/%s, want %s/%s", what, name, condType, s, r, want, reason)
	}
}

// etcdctlRemove removes member id as an operator would, outside etcdmember, through the lowest
// other member's ID.
func (w *world) etcdctlRemove(id uint64) error {
	via := uint64(1)
	if id == via {
		via = 2
	}
	return w.etcd.MemberRemove(w.t.Context(), etcd.Member{ID: via}, id)
}

// removals lists the member IDs the cluster removed, in order.
func (w *world) removals() []uint64 {
	var ids []uint64
	for _, c := range w.etcd.Changes() {
		if c.Op == etcdfake.OpMemberRemove {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

var errTermLost = errors.New("the leader Lease names another agent")
