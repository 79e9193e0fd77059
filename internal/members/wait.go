package members

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
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
	c       client.WithWatch
	out     io.Writer
	name    string
	since   int64
	timeout time.Duration
	// pause spaces out re-reads after a watch ends, so a failing API server is not hammered.
	pause   time.Duration
	last    string
	lastErr error
}

// wait returns nil once the member left, and an error on refusal, cancellation or timeout.
func (w *waiter) wait(ctx context.Context, m *v1alpha1.EtcdMember) error {
	for {
		if done, err := w.observe(m); done {
			return err
		}
		if done, err := w.watch(ctx, m.ResourceVersion); done {
			return err
		}
		// The watch ended: API servers close watches now and then, and an old resource version
		// is refused. Read the object afresh and watch from there.
		var err error
		if m, err = w.refetch(ctx); err != nil {
			return err
		}
	}
}

func (w *waiter) observe(m *v1alpha1.EtcdMember) (bool, error) {
	line, state := judge(m, w.since)
	if line != w.last {
		if _, err := fmt.Fprintln(w.out, line); err != nil {
			return true, fmt.Errorf("writing progress: %w", err)
		}
		w.last = line
	}
	switch state {
	case left:
		return true, nil
	case refused:
		c := status.Get(m, v1alpha1.ConditionLeft)
		return true, &RefusedError{Name: w.name, Reason: c.Reason, Message: c.Message}
	case cancelled:
		return true, fmt.Errorf("leave of %s was cancelled: spec.leave was set back to false", w.name)
	}
	return false, nil
}

// watch follows the object from resourceVersion until it settles (done) or the watch ends.
func (w *waiter) watch(ctx context.Context, resourceVersion string) (bool, error) {
	wi, err := w.c.Watch(ctx, &v1alpha1.EtcdMemberList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", w.name),
		Raw:           &metav1.ListOptions{ResourceVersion: resourceVersion},
	})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return true, Explain(err, "watch", w.name, leaveNeeds)
		}
		w.lastErr = err
		return false, nil
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, w.interrupted(ctx)
		case ev, open := <-wi.ResultChan():
			if !open {
				return false, nil
			}
			if done, err := w.event(ev); done || err != nil {
				return true, err
			}
			if ev.Type == watch.Error {
				w.lastErr = apierrors.FromObject(ev.Object)
				return false, nil
			}
		}
	}
}

func (w *waiter) event(ev watch.Event) (bool, error) {
	m, ok := ev.Object.(*v1alpha1.EtcdMember)
	if !ok || m.Name != w.name {
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

// refetch re-reads the object after a pause, retrying errors that may pass until the deadline.
func (w *waiter) refetch(ctx context.Context) (*v1alpha1.EtcdMember, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, w.interrupted(ctx)
		case <-time.After(w.pause):
		}
		m, err := Get(ctx, w.c, w.name)
		switch {
		case err == nil:
			return m, nil
		case apierrors.IsNotFound(err):
			return nil, w.deleted()
		case apierrors.IsForbidden(err):
			return nil, Explain(err, "get", w.name, leaveNeeds)
		}
		w.lastErr = err
	}
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
