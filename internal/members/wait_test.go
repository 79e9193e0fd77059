package members

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

func leftCond(s metav1.ConditionStatus, reason string) metav1.Condition {
	return withMessage(cond(v1alpha1.ConditionLeft, s, reason), reason+" message")
}

func TestJudge(t *testing.T) {
	stale := leftCond(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	stale.ObservedGeneration = 1
	notFound := cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound)
	cases := []struct {
		name      string
		leave     bool
		conds     []metav1.Condition
		wantLine  string
		wantState outcome
	}{
		{"no answer yet", true, []metav1.Condition{joined}, "node-2: leave requested, waiting for the controller", pending},
		{"answer for an older request", true, []metav1.Condition{joined, stale}, "node-2: leave requested, waiting for the controller", pending},
		{"handing over", true, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonHandingOver)}, "node-2: Left=False HandingOver: HandingOver message", pending},
		{"etcd error is retried", true, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonEtcdError)}, "node-2: Left=False EtcdError: EtcdError message", pending},
		{"quorum at risk", true, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)}, "node-2: Left=False QuorumAtRisk: QuorumAtRisk message", refused},
		{"last voter", true, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonLastVoter)}, "node-2: Left=False LastVoter: LastVoter message", refused},
		{"no other agent", true, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonNoOtherAgent)}, "node-2: Left=False NoOtherAgent: NoOtherAgent message", refused},
		{"no member ID", true, []metav1.Condition{leftCond(metav1.ConditionFalse, v1alpha1.ReasonNoMemberID)}, "node-2: Left=False NoMemberID: NoMemberID message", refused},
		{"member mismatch", true, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonMemberMismatch)}, "node-2: Left=False MemberMismatch: MemberMismatch message", refused},
		{"removed", true, []metav1.Condition{removed, leftCond(metav1.ConditionTrue, v1alpha1.ReasonRemoved)}, "node-2: Left=True Removed: Removed message", left},
		{"already gone", true, []metav1.Condition{notFound, leftCond(metav1.ConditionTrue, v1alpha1.ReasonNotFound)}, "node-2: Left=True NotFound: NotFound message", left},
		{"left but joined again", true, []metav1.Condition{joined, leftCond(metav1.ConditionTrue, v1alpha1.ReasonRemoved)}, "node-2: Left=True Removed: Removed message", pending},
		{"cancelled", false, []metav1.Condition{joined}, "node-2: leave cancelled (spec.leave is false)", cancelled},
		{"cancelled after a refusal", false, []metav1.Condition{joined, leftCond(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)}, "node-2: leave cancelled (spec.leave is false)", cancelled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Conditions answer the request at generation 2, unless marked as older.
			for i := range tc.conds {
				if tc.conds[i].ObservedGeneration == 0 {
					tc.conds[i].ObservedGeneration = 2
				}
			}
			m := object("node-2", "b", tc.leave, tc.conds...)
			line, state := judge(&m, 2)
			if line != tc.wantLine || state != tc.wantState {
				t.Errorf("judge = %q, %d; want %q, %d", line, state, tc.wantLine, tc.wantState)
			}
		})
	}
}

// watching returns a fake client holding objs whose watches deliver events, then stay open.
func watching(t *testing.T, events []watch.Event, objs ...client.Object) client.WithWatch {
	t.Helper()
	return newClient(t, interceptor.Funcs{
		Watch: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(len(events), false)
			for _, ev := range events {
				w.Action(ev.Type, ev.Object)
			}
			return w, nil
		},
	}, objs...)
}

func modified(conds ...metav1.Condition) watch.Event {
	m := object("node-2", "b", true, conds...)
	return watch.Event{Type: watch.Modified, Object: &m}
}

func leaveAndWait(t *testing.T, c client.WithWatch, timeout time.Duration) (string, string, error) {
	t.Helper()
	var progress bytes.Buffer
	summary, err := Leave(context.Background(), c, &progress, "node-2", LeaveOptions{Wait: true, Timeout: timeout})
	return summary, progress.String(), err
}

func TestWaitPrintsEachChangeUntilLeft(t *testing.T) {
	start := object("node-2", "b", false, joined)
	handingOver := withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonHandingOver), "handing over")
	c := watching(t, []watch.Event{
		modified(joined, handingOver),
		modified(joined, handingOver), // no change, no line
		{Type: watch.Bookmark, Object: &v1alpha1.EtcdMember{}},
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonEtcdError), "etcdserver: unhealthy cluster")),
		modified(removed, withMessage(leftDone, "Member b was removed from etcd on request.")),
	}, &start)

	summary, progress, err := leaveAndWait(t, c, 5*time.Second)
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, progress)
	}
	want := `node-2: leave requested, waiting for the controller
node-2: Left=False HandingOver: handing over
node-2: Left=False EtcdError: etcdserver: unhealthy cluster
node-2: Left=True Removed: Member b was removed from etcd on request.
`
	if progress != want {
		t.Errorf("progress\n%s\nwant\n%s", progress, want)
	}
	if want := "node-2: member b left etcd"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
	if !read(t, c, "node-2").Spec.Leave {
		t.Error("spec.leave not set")
	}
}

func TestWaitStopsAtRefusal(t *testing.T) {
	cases := []struct {
		reason      string
		quorumGuard bool
		wantPhrase  string
	}{
		{v1alpha1.ReasonQuorumAtRisk, true, "refused by the quorum guard (QuorumAtRisk)"},
		{v1alpha1.ReasonLastVoter, true, "refused by the quorum guard (LastVoter)"},
		{v1alpha1.ReasonNoOtherAgent, false, "cannot proceed (NoOtherAgent)"},
		{v1alpha1.ReasonNoMemberID, false, "cannot proceed (NoMemberID)"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			start := object("node-2", "b", false, joined)
			msg := "removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2."
			c := watching(t, []watch.Event{
				modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, tc.reason), msg)),
			}, &start)

			summary, progress, err := leaveAndWait(t, c, 5*time.Second)
			var refusal *RefusedError
			if !errors.As(err, &refusal) {
				t.Fatalf("want a *RefusedError, got %v (summary %q)\n%s", err, summary, progress)
			}
			if summary != "" {
				t.Errorf("summary %q on a refusal", summary)
			}
			if refusal.Name != "node-2" || refusal.Reason != tc.reason || refusal.Message != msg || refusal.DryRun {
				t.Errorf("refusal %+v", *refusal)
			}
			if refusal.QuorumGuard() != tc.quorumGuard {
				t.Errorf("QuorumGuard() = %t, want %t", refusal.QuorumGuard(), tc.quorumGuard)
			}
			for _, want := range []string{
				tc.wantPhrase,
				// The message's own full stop is not doubled.
				": " + strings.TrimSuffix(msg, ".") + ". The request stays pending",
				"kubectl etcdmember leave node-2 --cancel",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if !strings.HasSuffix(progress, "node-2: Left=False "+tc.reason+": "+msg+"\n") {
				t.Errorf("refusal not printed:\n%s", progress)
			}
			// The request stays in place for the controller to re-check.
			if !read(t, c, "node-2").Spec.Leave {
				t.Error("spec.leave not set")
			}
		})
	}
}

func TestWaitStopsAtCancellation(t *testing.T) {
	start := object("node-2", "b", false, joined)
	cancelledEv := modified(joined)
	cancelledEv.Object.(*v1alpha1.EtcdMember).Spec.Leave = false
	c := watching(t, []watch.Event{cancelledEv}, &start)

	_, progress, err := leaveAndWait(t, c, 5*time.Second)
	if want := "leave of node-2 was cancelled: spec.leave was set back to false"; errString(err) != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if !strings.HasSuffix(progress, "node-2: leave cancelled (spec.leave is false)\n") {
		t.Errorf("cancellation not printed:\n%s", progress)
	}
}

func TestWaitTimesOutWithLastState(t *testing.T) {
	start := object("node-2", "b", false, joined)
	c := watching(t, []watch.Event{
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonHandingOver), "handing over")),
	}, &start)

	_, _, err := leaveAndWait(t, c, 300*time.Millisecond)
	var timeout *TimeoutError
	if !errors.As(err, &timeout) {
		t.Fatalf("want a *TimeoutError, got %v", err)
	}
	want := "timed out after 300ms waiting for node-2 to leave; last state: node-2: Left=False HandingOver: handing over"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if timeout.APIError != nil {
		t.Errorf("APIError %v, want none", timeout.APIError)
	}
}

// TestWaitTimeoutNamesLastAPIError: watches that keep failing are retried until the deadline,
// and the timeout tells what failed.
func TestWaitTimeoutNamesLastAPIError(t *testing.T) {
	start := object("node-2", "b", false, joined)
	c := newClient(t, interceptor.Funcs{
		Watch: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
			return nil, apierrors.NewServiceUnavailable("etcd is sulking")
		},
	}, &start)

	_, _, err := leaveAndWait(t, c, 500*time.Millisecond)
	var timeout *TimeoutError
	if !errors.As(err, &timeout) {
		t.Fatalf("want a *TimeoutError, got %v", err)
	}
	if !apierrors.IsServiceUnavailable(timeout.APIError) {
		t.Errorf("APIError %v, want the watch's error", timeout.APIError)
	}
	if want := "node-2: leave requested, waiting for the controller (last API error: etcd is sulking)"; !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %q, want it to end with %q", err, want)
	}
}

func TestWaitInterruptedIsNotATimeout(t *testing.T) {
	start := object("node-2", "b", false, joined)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t, interceptor.Funcs{
		Watch: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
			cancel() // Ctrl-C while waiting
			return watch.NewFake(), nil
		},
	}, &start)

	_, err := Leave(ctx, c, &bytes.Buffer{}, "node-2", LeaveOptions{Wait: true, Timeout: 5 * time.Second})
	var timeout *TimeoutError
	if errors.As(err, &timeout) || !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want a cancellation", err)
	}
	if want := "stopped waiting for node-2 to leave"; !strings.HasPrefix(errString(err), want) {
		t.Errorf("error %v, want it to start with %q", err, want)
	}
}

func TestWaitReportsDeletion(t *testing.T) {
	start := object("node-2", "b", false, joined)
	gone := modified(joined)
	gone.Type = watch.Deleted
	c := watching(t, []watch.Event{gone}, &start)

	_, _, err := leaveAndWait(t, c, 5*time.Second)
	if want := `EtcdMember "node-2" was deleted before its leave completed; last state: node-2: leave requested, waiting for the controller`; errString(err) != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestWaitForbidden: a list or watch RBAC forbids stops the wait at once, naming the verb, rather
// than being retried until the timeout.
func TestWaitForbidden(t *testing.T) {
	for _, verb := range []string{"list", "watch"} {
		t.Run(verb, func(t *testing.T) {
			start := object("node-2", "b", false, joined)
			funcs := interceptor.Funcs{}
			if verb == "list" {
				funcs.List = func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
					return forbidden(verb, "")
				}
			} else {
				funcs.Watch = func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
					return nil, forbidden(verb, "")
				}
			}
			c := newClient(t, funcs, &start)

			_, _, err := leaveAndWait(t, c, 5*time.Second)
			want := `forbidden to ` + verb + ` etcdmembers.etcdmember.io "node-2"; this command needs get, list, patch and, to wait, watch on etcdmembers.etcdmember.io`
			if !strings.HasPrefix(errString(err), want) || !apierrors.IsForbidden(err) {
				t.Errorf("error %v, want it to start with %q and wrap the Forbidden error", err, want)
			}
		})
	}
}

// TestWaitReportsDeletionBeforeFirstList: an object gone by the time the wait lists it yields no
// event at all; the wait must not sit out its timeout.
func TestWaitReportsDeletionBeforeFirstList(t *testing.T) {
	start := object("node-2", "b", false, joined)
	c := newClient(t, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.Delete(ctx, &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	}, &start)

	_, _, err := leaveAndWait(t, c, 5*time.Second)
	if want := `EtcdMember "node-2" was deleted before its leave completed; last state: node-2: leave requested, waiting for the controller`; errString(err) != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// counting counts the lists a fake client serves.
func counting(lists *atomic.Int32) func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
	return func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		lists.Add(1)
		return c.List(ctx, list, opts...)
	}
}

// TestWaitRereadsAfterWatchEnds: a watch the API server closes is not the end; the object is
// listed again and its state judged.
func TestWaitRereadsAfterWatchEnds(t *testing.T) {
	start := object("node-2", "b", false, joined)
	var lists atomic.Int32
	c := newClient(t, interceptor.Funcs{
		List: counting(&lists),
		Watch: func(ctx context.Context, c client.WithWatch, _ client.ObjectList, _ ...client.ListOption) (watch.Interface, error) {
			m, err := Get(ctx, c, "node-2")
			if err != nil {
				return nil, err
			}
			m.Status.Conditions = []metav1.Condition{removed, leftCond(metav1.ConditionTrue, v1alpha1.ReasonRemoved)}
			if err := c.Update(ctx, m); err != nil {
				return nil, err
			}
			w := watch.NewFake()
			w.Stop()
			return w, nil
		},
	}, &start)

	summary, progress, err := leaveAndWait(t, c, 5*time.Second)
	if err != nil || !strings.HasSuffix(progress, "node-2: Left=True Removed: Removed message\n") {
		t.Errorf("wait: %v\n%s", err, progress)
	}
	if summary != "node-2: member b left etcd" {
		t.Errorf("summary %q", summary)
	}
	// No watch delivers the outcome: only a second list can have seen it.
	if n := lists.Load(); n < 2 {
		t.Errorf("%d lists, want the object listed again after the watch ended", n)
	}
}

// TestWaitRereadsAfterWatchError: an error event ends the watch too; the next list sees the outcome.
func TestWaitRereadsAfterWatchError(t *testing.T) {
	start := object("node-2", "b", false, joined)
	var lists, watches atomic.Int32
	c := newClient(t, interceptor.Funcs{
		List: counting(&lists),
		Watch: func(ctx context.Context, c client.WithWatch, _ client.ObjectList, _ ...client.ListOption) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(1, false)
			if watches.Add(1) > 1 {
				return w, nil
			}
			m, err := Get(ctx, c, "node-2")
			if err != nil {
				return nil, err
			}
			m.Status.Conditions = []metav1.Condition{removed, leftCond(metav1.ConditionTrue, v1alpha1.ReasonRemoved)}
			if err := c.Update(ctx, m); err != nil {
				return nil, err
			}
			gone := apierrors.NewResourceExpired("too old resource version")
			w.Error(&gone.ErrStatus)
			return w, nil
		},
	}, &start)

	summary, progress, err := leaveAndWait(t, c, 5*time.Second)
	if err != nil || summary != "node-2: member b left etcd" {
		t.Errorf("wait: %v, %q\n%s", err, summary, progress)
	}
	// Later watches deliver nothing: only a second list can have seen the outcome.
	if n := lists.Load(); n < 2 {
		t.Errorf("%d lists, want the object listed again after the error event", n)
	}
}

// TestWaitIgnoresAStateFromBeforeTheRequest: the informer's first list may come from the API
// server's watch cache, behind the patch that set spec.leave. That state predates the request and
// is no cancellation; the watch brings the request and its outcome.
func TestWaitIgnoresAStateFromBeforeTheRequest(t *testing.T) {
	// The fake client does not move metadata.generation on a spec change; the API server does.
	start := object("node-2", "b", false, joined)
	start.Generation = 2
	before := start.DeepCopy()
	before.Generation = 1
	gone, left := removed, withMessage(leftDone, "Member b was removed from etcd on request.")
	gone.ObservedGeneration, left.ObservedGeneration = 2, 2
	done := object("node-2", "b", true, gone, left)
	done.Generation = 2
	c := newClient(t, interceptor.Funcs{
		List: listedAs(before),
		Watch: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(1, false)
			w.Modify(&done)
			return w, nil
		},
	}, &start)

	summary, progress, err := leaveAndWait(t, c, 5*time.Second)
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, progress)
	}
	if strings.Contains(progress, "cancelled") || summary != "node-2: member b left etcd" {
		t.Errorf("summary %q, progress:\n%s", summary, progress)
	}
}

// TestWaitReportsAnObjectCreatedAgain: deleted and created again under its name between two
// lists, the object is another one, and the request went with the first.
func TestWaitReportsAnObjectCreatedAgain(t *testing.T) {
	start := object("node-2", "b", false, joined)
	start.UID = "first"
	again := object("node-2", "c", false, joined)
	again.UID = "second"
	c := newClient(t, interceptor.Funcs{
		List: listedAs(&again),
	}, &start)

	_, _, err := leaveAndWait(t, c, 5*time.Second)
	if want := `EtcdMember "node-2" was deleted before its leave completed`; !strings.HasPrefix(errString(err), want) {
		t.Errorf("error %v, want it to start with %q", err, want)
	}
}

// listedAs makes lists made after the leave's patch answer obj in place of the stored object: what
// the API server's watch cache may still hold, or what it holds after the object was replaced.
func listedAs(obj *v1alpha1.EtcdMember) func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
	return func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if err := c.List(ctx, list, opts...); err != nil {
			return err
		}
		items := list.(*v1alpha1.EtcdMemberList).Items
		for i := range items {
			if !items[i].Spec.Leave {
				return fmt.Errorf("listed before the patch")
			}
			items[i] = *obj.DeepCopy()
		}
		return nil
	}
}

func leaveWithGrace(t *testing.T, c client.WithWatch, grace time.Duration) (string, string, error) {
	t.Helper()
	var progress bytes.Buffer
	summary, err := Leave(context.Background(), c, &progress, "node-2", LeaveOptions{Wait: true, Timeout: 5 * time.Second, RefusalGrace: grace})
	return summary, progress.String(), err
}

// TestWaitRidesOutAPassingRefusal: a QuorumAtRisk that the leader lifts within the grace (a member
// back to Healthy) does not end the wait; the member's removal does.
func TestWaitRidesOutAPassingRefusal(t *testing.T) {
	start := object("node-2", "b", false, joined)
	msg := "removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2."
	c := watching(t, []watch.Event{
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk), msg)),
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonEtcdError), "etcdserver: unhealthy cluster")),
		modified(removed, withMessage(leftDone, "Member b was removed from etcd on request.")),
	}, &start)
	summary, progress, err := leaveWithGrace(t, c, 5*time.Second)
	if err != nil {
		t.Fatalf("a refusal lifted within the grace ended the wait: %v\n%s", err, progress)
	}
	if summary != "node-2: member b left etcd" {
		t.Errorf("summary %q", summary)
	}
	for _, want := range []string{
		"node-2: Left=False QuorumAtRisk: " + msg + "\nnode-2: waiting up to 5s for the refusal to pass",
		"node-2: Left=True Removed",
	} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}
}

// TestWaitEndsOnALastingRefusal: a refusal still standing when the grace runs out ends the wait
// with the refusal, no sooner; one that no re-check lifts (LastVoter) ends it at once.
func TestWaitEndsOnALastingRefusal(t *testing.T) {
	for _, tc := range []struct {
		reason string
		grace  time.Duration
		rides  bool
	}{
		{v1alpha1.ReasonQuorumAtRisk, 300 * time.Millisecond, true},
		{v1alpha1.ReasonNoOtherAgent, 300 * time.Millisecond, true},
		{v1alpha1.ReasonLastVoter, 3 * time.Second, false},
		{v1alpha1.ReasonMemberMismatch, 3 * time.Second, false},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			start := object("node-2", "b", false, joined)
			c := watching(t, []watch.Event{
				modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, tc.reason), "refused")),
			}, &start)
			began := time.Now()
			_, progress, err := leaveWithGrace(t, c, tc.grace)
			took := time.Since(began)
			var refusal *RefusedError
			if !errors.As(err, &refusal) || refusal.Reason != tc.reason {
				t.Fatalf("want a *RefusedError %s, got %v\n%s", tc.reason, err, progress)
			}
			waited := strings.Contains(progress, "waiting up to") && strings.Contains(progress, "still refused after "+tc.grace.String())
			switch {
			case tc.rides && (took < tc.grace || !waited):
				t.Errorf("ended after %s, grace %s; progress:\n%s", took, tc.grace, progress)
			case !tc.rides && (took >= tc.grace || strings.Contains(progress, "waiting up to")):
				t.Errorf("%s waited (%s) for a grace that cannot help; progress:\n%s", tc.reason, took, progress)
			}
		})
	}
}
