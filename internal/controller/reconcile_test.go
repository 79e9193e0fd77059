package controller

import (
	"context"
	"errors"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

func member(leave bool, conds ...metav1.Condition) *v1alpha1.EtcdMember {
	m := &v1alpha1.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: "node-2", Generation: 2},
		Spec:       v1alpha1.EtcdMemberSpec{Leave: leave},
		Status:     v1alpha1.EtcdMemberStatus{MemberID: "2c9ac577d3e7c665"},
	}
	for _, c := range conds {
		status.Set(m, c.Type, c.Status, c.Reason, c.Message)
	}
	return m
}

// testScheme knows the objects a reconciler writes: EtcdMembers and Events.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := eventsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: "m"}
}

func TestMarkGone(t *testing.T) {
	joined := cond(v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	cases := []struct {
		name       string
		in         *v1alpha1.EtcdMember
		by         removal
		joined     string
		leftStatus metav1.ConditionStatus
		leftReason string
	}{
		{"vanished without a request", member(false, joined), removedElsewhere, v1alpha1.ReasonNotFound, "", ""},
		{"already gone when asked to leave", member(true, joined), removedElsewhere, v1alpha1.ReasonNotFound, metav1.ConditionTrue, v1alpha1.ReasonNotFound},
		{"leader stopped between removing and writing status", member(true, joined), removedOnRequest,
			v1alpha1.ReasonRemoved, metav1.ConditionTrue, v1alpha1.ReasonRemoved},
		{"removed earlier stays removed", member(true,
			cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved),
			cond(v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)), removedOnRequest,
			v1alpha1.ReasonRemoved, metav1.ConditionTrue, v1alpha1.ReasonRemoved},
		{"refused request whose member then vanished", member(true, joined,
			cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)), removedElsewhere,
			v1alpha1.ReasonNotFound, metav1.ConditionTrue, v1alpha1.ReasonNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			markGone(tc.in, tc.by)
			j := status.Get(tc.in, v1alpha1.ConditionJoined)
			if j.Status != metav1.ConditionFalse || j.Reason != tc.joined {
				t.Errorf("Joined = %s/%s, want False/%s", j.Status, j.Reason, tc.joined)
			}
			if j.ObservedGeneration != 2 {
				t.Errorf("Joined.observedGeneration = %d", j.ObservedGeneration)
			}
			l := status.Get(tc.in, v1alpha1.ConditionLeft)
			switch {
			case tc.leftReason == "" && l != nil:
				t.Errorf("Left set without a request: %+v", l)
			case tc.leftReason != "" && (l == nil || l.Status != tc.leftStatus || l.Reason != tc.leftReason):
				t.Errorf("Left = %+v, want %s/%s", l, tc.leftStatus, tc.leftReason)
			}
		})
	}
}

func TestChangedAnnouncesEachStateOnce(t *testing.T) {
	before := member(true, cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk))
	same := before.DeepCopy()
	if c := changed(before, same, v1alpha1.ConditionLeft); c != nil {
		t.Errorf("an unchanged condition was announced: %+v", c)
	}
	after := before.DeepCopy()
	removed(after)
	c := changed(before, after, v1alpha1.ConditionLeft)
	if c == nil || c.Reason != v1alpha1.ReasonRemoved {
		t.Errorf("the transition to Removed was not announced: %+v", c)
	}
	fresh := member(true)
	if c := changed(fresh, fresh.DeepCopy(), v1alpha1.ConditionLeft); c != nil {
		t.Errorf("an absent condition was announced: %+v", c)
	}
}

// TestReconcileOfSettledObjectReadsNoMemberList runs Reconcile without any etcd client: an object
// whose member is recorded as gone must be reconciled from its own record (a full resync of a
// cluster's history would otherwise cost one etcd round trip per object).
func TestReconcileOfSettledObjectReadsNoMemberList(t *testing.T) {
	scheme := testScheme(t)
	// Removed long ago, then asked to leave again: the request is answered without etcd.
	gone := member(true, cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(gone).WithStatusSubresource(gone).Build()
	r := &MembershipReconciler{Client: c, ChangeLock: &sync.Mutex{}, Events: &events.Recorder{Client: c, Namespace: "kube-system"}}

	ctx := context.Background()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: gone.Name}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	got := &v1alpha1.EtcdMember{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(gone), got); err != nil {
		t.Fatal(err)
	}
	if !status.HasReason(got, v1alpha1.ConditionLeft, v1alpha1.ReasonNotFound) || status.IsTrue(got, v1alpha1.ConditionJoined) {
		t.Errorf("conditions = %+v, want Joined=False and Left=True/NotFound", got.Status.Conditions)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration = %d, want %d", got.Status.ObservedGeneration, got.Generation)
	}
}

// TestStatusWriteRetriedOnServerError: the apiserver failing a write on its side (its etcd client
// still on a member just removed) is retried at once, so the outcome is not held back by the
// reconcile's back-off; a conflict is not retried.
func TestStatusWriteRetriedOnServerError(t *testing.T) {
	scheme := testScheme(t)
	for _, tc := range []struct {
		name      string
		failWith  error
		wantCalls int
		wantErr   bool
	}{
		{"raft stopped behind the apiserver", apierrors.NewInternalError(errors.New("raft: stopped")), 2, false},
		{"conflict", apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("etcdmembers").GroupResource(), "node-2", errors.New("changed")), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := member(true, cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound))
			calls := 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(gone).WithStatusSubresource(gone).WithInterceptorFuncs(interceptor.Funcs{
				SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					calls++
					if calls == 1 {
						return tc.failWith
					}
					return c.SubResource(sub).Update(ctx, obj, opts...)
				},
			}).Build()
			r := &MembershipReconciler{Client: c, ChangeLock: &sync.Mutex{}, Events: &events.Recorder{Client: c, Namespace: "kube-system"}}
			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: gone.Name}})
			if calls != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Errorf("%d status writes, error %v; want %d writes, error %t", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
