package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
)

func withMessage(c metav1.Condition, msg string) metav1.Condition {
	c.Message = msg
	return c
}

func leftCond(s metav1.ConditionStatus, reason string) metav1.Condition {
	return withMessage(cond(v1alpha1.ConditionLeft, s, reason), reason+" message")
}

func TestJudge(t *testing.T) {
	stale := leftCond(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	stale.ObservedGeneration = 1
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
		{"removed", true, []metav1.Condition{removed, leftCond(metav1.ConditionTrue, v1alpha1.ReasonRemoved)}, "node-2: Left=True Removed: Removed message", left},
		{"already gone", true, []metav1.Condition{cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound), leftCond(metav1.ConditionTrue, v1alpha1.ReasonNotFound)}, "node-2: Left=True NotFound: NotFound message", left},
		{"left but joined again", true, []metav1.Condition{joined, leftCond(metav1.ConditionTrue, v1alpha1.ReasonRemoved)}, "node-2: Left=True Removed: Removed message", pending},
		{"cancelled", false, []metav1.Condition{joined}, "node-2: leave cancelled (spec.leave is false)", cancelled},
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

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// watching returns a fake client holding objs whose watches deliver events, then stay open.
func watching(t *testing.T, events []watch.Event, objs ...client.Object) client.WithWatch {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Watch: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(len(events), false)
			for _, ev := range events {
				w.Action(ev.Type, ev.Object)
			}
			return w, nil
		},
	}).Build()
}

func modified(conds ...metav1.Condition) watch.Event {
	m := object("node-2", "b", true, conds...)
	return watch.Event{Type: watch.Modified, Object: &m}
}

func leaveAndWait(t *testing.T, c client.WithWatch, timeout time.Duration) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Leave(context.Background(), c, &out, LeaveOptions{Name: "node-2", Wait: true, Timeout: timeout})
	return out.String(), err
}

func TestWaitPrintsEachChangeUntilLeft(t *testing.T) {
	start := object("node-2", "b", false, joined)
	handingOver := withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonHandingOver), "handing over")
	c := watching(t, []watch.Event{
		modified(joined, handingOver),
		modified(joined, handingOver), // no change, no line
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonEtcdError), "etcdserver: unhealthy cluster")),
		modified(removed, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved), "Member b was removed from etcd on request.")),
	}, &start)

	out, err := leaveAndWait(t, c, 5*time.Second)
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, out)
	}
	want := `node-2: leave requested, waiting for the controller
node-2: Left=False HandingOver: handing over
node-2: Left=False EtcdError: etcdserver: unhealthy cluster
node-2: Left=True Removed: Member b was removed from etcd on request.
`
	if out != want {
		t.Errorf("output\n%s\nwant\n%s", out, want)
	}
	m, err := getMember(context.Background(), c, "node-2")
	if err != nil || !m.Spec.Leave {
		t.Errorf("spec.leave not set: %v", err)
	}
}

func TestWaitStopsAtRefusal(t *testing.T) {
	start := object("node-2", "b", false, joined)
	msg := "removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2"
	c := watching(t, []watch.Event{
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk), msg)),
	}, &start)

	out, err := leaveAndWait(t, c, 5*time.Second)
	if err == nil {
		t.Fatalf("want a refusal, got success:\n%s", out)
	}
	for _, want := range []string{"refused (QuorumAtRisk): " + msg + ". The controller keeps re-checking", `kubectl patch etcdmember node-2 --type merge -p '{"spec":{"leave":false}}'`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !strings.HasSuffix(out, "node-2: Left=False QuorumAtRisk: "+msg+"\n") {
		t.Errorf("refusal not printed:\n%s", out)
	}
}

func TestWaitTimesOutWithLastState(t *testing.T) {
	start := object("node-2", "b", false, joined)
	c := watching(t, []watch.Event{
		modified(joined, withMessage(cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonHandingOver), "handing over")),
	}, &start)

	_, err := leaveAndWait(t, c, 300*time.Millisecond)
	want := "timed out after 300ms waiting for node-2 to leave; last state: node-2: Left=False HandingOver: handing over"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestWaitReportsDeletion(t *testing.T) {
	start := object("node-2", "b", false, joined)
	gone := modified(joined)
	gone.Type = watch.Deleted
	c := watching(t, []watch.Event{gone}, &start)

	_, err := leaveAndWait(t, c, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), `EtcdMember "node-2" was deleted before its leave completed`) {
		t.Errorf("error %v", err)
	}
}

// TestWaitRereadsAfterWatchEnds: a watch the API server closes is not the end; the object is read
// again and its state judged.
func TestWaitRereadsAfterWatchEnds(t *testing.T) {
	start := object("node-2", "b", false, joined)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(&start).WithInterceptorFuncs(interceptor.Funcs{
		Watch: func(ctx context.Context, c client.WithWatch, _ client.ObjectList, _ ...client.ListOption) (watch.Interface, error) {
			m, err := getMember(ctx, c, "node-2")
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
	}).Build()

	out, err := leaveAndWait(t, c, 5*time.Second)
	if err != nil || !strings.HasSuffix(out, "node-2: Left=True Removed: Removed message\n") {
		t.Errorf("wait: %v\n%s", err, out)
	}
}
