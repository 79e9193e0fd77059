package events

import (
	"context"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// TestUnansweredTryIsTriedAgain: a first try that gets no answer (an apiserver whose etcd is gone)
// is tried again within the write's time, and the Event is written once, whether the first try
// was lost or applied unanswered.
func TestUnansweredTryIsTriedAgain(t *testing.T) {
	for _, applied := range []bool{false, true} {
		scheme := runtime.NewScheme()
		if err := eventsv1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		tries := 0
		c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				tries++
				if tries == 1 {
					if applied {
						// Applied, and the answer lost: the caller's object learns nothing.
						if err := c.Create(ctx, obj.DeepCopyObject().(client.Object), opts...); err != nil {
							return err
						}
					}
					<-ctx.Done()
					return ctx.Err()
				}
				return c.Create(ctx, obj, opts...)
			},
		}).Build()
		r := &Recorder{Client: c, Namespace: "kube-system", attemptTimeout: 50 * time.Millisecond}
		start := time.Now()
		r.Normal(context.Background(), &v1alpha1.EtcdMember{}, v1alpha1.ReasonRemoved, "Remove", "removed")
		var list eventsv1.EventList
		if err := c.List(context.Background(), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || tries != 2 {
			t.Errorf("first try applied %t: %d Events after %d tries, want 1 after 2", applied, len(list.Items), tries)
		}
		if took := time.Since(start); took > writeTimeout/2 {
			t.Errorf("first try applied %t: the write took %s", applied, took)
		}
	}
}
