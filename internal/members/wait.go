package members

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// outcome is where a leave request stands.
type outcome int

const (
	pending outcome = iota
	left
	refused
	cancelled
)

// refusals are the Left reasons the controller does not get past by retrying alone: it re-checks
// them, but they need the cluster or the operator to change. EtcdError is not among them.
var refusals = map[string]bool{
	v1alpha1.ReasonQuorumAtRisk: true,
	v1alpha1.ReasonLastVoter:    true,
	v1alpha1.ReasonNoOtherAgent: true,
	v1alpha1.ReasonNoMemberID:   true,
	// The object records another member than the request names: only a new request helps.
	v1alpha1.ReasonMemberMismatch: true,
}

// passing are the refusals that a cluster in motion lifts within a probe round or two: a member
// just restarted and not yet probed healthy (QuorumAtRisk), agents restarting (NoOtherAgent). The
// wait rides them out for the grace. LastVoter, NoMemberID and MemberMismatch need the operator.
var passing = map[string]bool{
	v1alpha1.ReasonQuorumAtRisk: true,
	v1alpha1.ReasonNoOtherAgent: true,
}

// judge describes a leave request in one line and says where it stands. A Left condition computed
// for a generation older than since predates the request being waited for, so it is ignored.
func judge(m *v1alpha1.EtcdMember, since int64) (string, outcome) {
	if !m.Spec.Leave {
		return fmt.Sprintf("%s: leave cancelled (spec.leave is false)", m.Name), cancelled
	}
	c := status.Get(m, v1alpha1.ConditionLeft)
	if c == nil || c.ObservedGeneration < since {
		return fmt.Sprintf("%s: leave requested, waiting for the controller", m.Name), pending
	}
	line := fmt.Sprintf("%s: Left=%s %s: %s", m.Name, c.Status, c.Reason, c.Message)
	switch {
	case c.Status == metav1.ConditionTrue && m.RecordedGone():
		return line, left
	case c.Status == metav1.ConditionFalse && refusals[c.Reason]:
		return line, refused
	}
	return line, pending
}

// waiter follows one object and prints a line whenever its state changes.
type waiter struct {
	c    client.WithWatch
	out  io.Writer
	name string
	// uid is the object the request was made on: one created again under its name is another.
	uid     types.UID
	since   int64
	timeout time.Duration
	last    string
	// grace is LeaveOptions.RefusalGrace; refusedSince is when the refusal standing now was first
	// seen (zero when none stands), and graceTimer ends the wait once it has lasted grace.
	grace        time.Duration
	refusedSince time.Time
	graceTimer   *time.Timer

	// The informer lists and watches from goroutines of its own, which may outlive the wait.
	mu      sync.Mutex
	lastErr error
	// denied is a Forbidden list or watch, explained: no retry gets past RBAC.
	denied error
	// refusal is the refusal standing now; graceOver is set once it outlasted the grace.
	refusal   *RefusedError
	graceOver bool
	// stop ends the informer, and with it the wait, when the grace runs out.
	stop context.CancelFunc
}

// wait returns nil once the member left, and an error on refusal, cancellation or timeout.
func (w *waiter) wait(ctx context.Context, m *v1alpha1.EtcdMember) error {
	// The informer re-lists after a watch that ends or fails, an old resource version included,
	// and backs off while the API server keeps failing. Its log would interleave klog lines with
	// the progress lines; the errors it meets are kept for the timeout to name instead.
	informerCtx, stop := context.WithCancel(logr.NewContext(ctx, logr.Discard()))
	defer stop()
	w.stop = stop
	defer w.passed()
	if done, err := w.observe(m); done {
		return err
	}
	_, err := watchtools.UntilWithSync(informerCtx, w.listWatch(stop), &v1alpha1.EtcdMember{}, w.synced, w.changed)
	if !wait.Interrupted(err) {
		// nil, or the verdict of synced or changed.
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.denied != nil:
		return w.denied
	case w.graceOver:
		_, _ = fmt.Fprintf(w.out, "%s: still refused after %s (--refusal-grace)\n", w.name, w.grace)
		return w.refusal
	}
	return w.interrupted(ctx)
}

// ride keeps the wait going through a refusal that can pass by itself until it has lasted the
// grace, and reports false when the wait must end on it now.
func (w *waiter) ride(refusal *RefusedError) bool {
	if w.grace <= 0 || !passing[refusal.Reason] {
		return false
	}
	w.mu.Lock()
	w.refusal = refusal
	w.mu.Unlock()
	if !w.refusedSince.IsZero() {
		return true
	}
	w.refusedSince = time.Now()
	_, _ = fmt.Fprintf(w.out, "%s: waiting up to %s for the refusal to pass: the leader re-checks it as member health changes (--refusal-grace)\n", w.name, w.grace)
	w.graceTimer = time.AfterFunc(w.grace, func() {
		w.mu.Lock()
		w.graceOver = true
		w.mu.Unlock()
		w.stop()
	})
	return true
}

// passed forgets the refusal that stood: the object moved on from it, or the wait ended. Once
// the grace has run out, its verdict stands, even if the object moves on as the wait stops.
func (w *waiter) passed() {
	if w.graceTimer != nil {
		w.graceTimer.Stop()
	}
	w.graceTimer, w.refusedSince = nil, time.Time{}
	w.mu.Lock()
	if !w.graceOver {
		w.refusal = nil
	}
	w.mu.Unlock()
}

// plainListWatch keeps the informer to a list, then a watch from its resource version. Streaming
// the list over the watch (WatchList) saves nothing for one object, and waits for a closing
// bookmark that the fake watches of the tests never send.
type plainListWatch struct{ *cache.ListWatch }

func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// listWatch lists and watches the one object by name. stop ends the wait early.
func (w *waiter) listWatch(stop context.CancelFunc) cache.ListerWatcher {
	byName := fields.OneTermEqualSelector("metadata.name", w.name)
	options := func(raw metav1.ListOptions) *client.ListOptions {
		// controller-runtime sends its own selector and paging fields in place of Raw's.
		return &client.ListOptions{FieldSelector: byName, Limit: raw.Limit, Continue: raw.Continue, Raw: &raw}
	}
	return plainListWatch{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, raw metav1.ListOptions) (runtime.Object, error) {
			list, err := List(ctx, w.c, status.APITimeout, options(raw))
			if err != nil {
				w.note(ctx, "list", err, stop)
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, raw metav1.ListOptions) (watch.Interface, error) {
			wi, err := w.c.Watch(ctx, &v1alpha1.EtcdMemberList{}, options(raw))
			if err != nil {
				w.note(ctx, "watch", err, stop)
			}
			return wi, err
		},
	}}
}

// note keeps an error of the informer's request for the timeout to name, and ends the wait at a
// Forbidden one, which retrying cannot get past. A request cut short because the informer is
// stopping (ctx done) says nothing about the API server.
func (w *waiter) note(ctx context.Context, verb string, err error, stop context.CancelFunc) {
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = err
	if apierrors.IsForbidden(err) {
		w.denied = Explain(err, verb, w.name, leaveNeeds)
		stop()
	}
}

// synced checks the object is in the cache once it has synced: if it was deleted before the
// first list, no event would ever tell. Its states are judged from the events, the listed one
// first, since by now the cache may be past some of them.
func (w *waiter) synced(store cache.Store) (bool, error) {
	_, exists, err := store.GetByKey(w.name)
	switch {
	case err != nil:
		return false, fmt.Errorf("reading %s from the informer's cache: %w", w.name, err)
	case !exists:
		return true, w.deleted()
	}
	return false, nil
}

// changed judges the object at each event. A deletion ends the wait unless its last state did.
func (w *waiter) changed(ev watch.Event) (bool, error) {
	m, ok := ev.Object.(*v1alpha1.EtcdMember)
	if !ok {
		return false, nil
	}
	if done, err := w.observe(m); done {
		return true, err
	}
	if ev.Type == watch.Deleted {
		return true, w.deleted()
	}
	return false, nil
}

func (w *waiter) observe(m *v1alpha1.EtcdMember) (bool, error) {
	if w.uid != "" && m.UID != w.uid {
		// Deleted and created again between two lists: the request went with the old object.
		return true, w.deleted()
	}
	if m.Generation < w.since {
		// A state from before the request: the informer's first list may be served from the API
		// server's watch cache, behind the patch that asked for the leave. Judged, it would read as
		// a cancellation; the watch from that list's resource version brings the patch next.
		return false, nil
	}
	line, state := judge(m, w.since)
	if line != w.last {
		if _, err := fmt.Fprintln(w.out, line); err != nil {
			return true, fmt.Errorf("writing progress: %w", err)
		}
		w.last = line
	}
	if state != refused && !w.refusedSince.IsZero() {
		w.passed()
	}
	switch state {
	case left:
		return true, nil
	case refused:
		c := status.Get(m, v1alpha1.ConditionLeft)
		refusal := &RefusedError{Name: w.name, Reason: c.Reason, Message: c.Message}
		if w.ride(refusal) {
			return false, nil
		}
		return true, refusal
	case cancelled:
		return true, fmt.Errorf("leave of %s was cancelled: spec.leave was set back to false", w.name)
	}
	return false, nil
}

func (w *waiter) deleted() error {
	return fmt.Errorf("EtcdMember %q was deleted before its leave completed; last state: %s", w.name, w.last)
}

// interrupted tells a timeout, with the last state seen, from a cancellation such as Ctrl-C.
func (w *waiter) interrupted(ctx context.Context) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("stopped waiting for %s to leave: %w", w.name, ctx.Err())
	}
	return &TimeoutError{What: fmt.Sprintf("after %s waiting for %s to leave", w.timeout, w.name), Last: w.last, APIError: w.lastErr}
}
