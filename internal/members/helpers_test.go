package members

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// object is an EtcdMember as an agent registers it: peer URL http://NAME:2380.
func object(name, id string, leave bool, conds ...metav1.Condition) v1alpha1.EtcdMember {
	return v1alpha1.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.EtcdMemberSpec{Leave: leave},
		Status: v1alpha1.EtcdMemberStatus{
			MemberID:   id,
			PeerURLs:   []string{"http://" + name + ":2380"},
			Conditions: conds,
		},
	}
}

func cond(condType string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: s, Reason: reason}
}

func withMessage(c metav1.Condition, msg string) metav1.Condition {
	c.Message = msg
	return c
}

func since(c metav1.Condition, t metav1.Time) metav1.Condition {
	c.LastTransitionTime = t
	return c
}

var (
	joined   = cond(v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	removed  = cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved)
	notFound = cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound)
	leftDone = cond(v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)
	atRisk   = cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
)

func member(id uint64, name string) etcd.Member {
	return etcd.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, ClientURLs: []string{"http://" + name + ":2379"}}
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	// The fake client answers a field selector only from an index; the leave wait lists and
	// watches its one object by metadata.name, as it does on a real API server.
	return fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).WithInterceptorFuncs(funcs).
		WithIndex(&v1alpha1.EtcdMember{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		Build()
}

// noPatch fails every patch: for requests that must change nothing.
func noPatch(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
	return errors.New("this request must not patch")
}

// patchLog records the patches a fake client receives, by object name, and passes them on.
type patchLog struct {
	mu      sync.Mutex
	names   []string
	bodies  []string
	dryRuns []bool
}

func (l *patchLog) patch(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	po := &client.PatchOptions{}
	po.ApplyOptions(opts)
	data, err := p.Data(obj)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.names = append(l.names, obj.GetName())
	l.bodies = append(l.bodies, string(data))
	l.dryRuns = append(l.dryRuns, slices.Contains(po.DryRun, metav1.DryRunAll))
	l.mu.Unlock()
	return c.Patch(ctx, obj, p, opts...)
}

func (l *patchLog) calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.names)
}

func forbidden(verb, name string) error {
	return apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "etcdmembers"}, name,
		errors.New(`User "viewer" cannot `+verb+` resource "etcdmembers"`))
}

func read(t *testing.T, c client.Client, name string) *v1alpha1.EtcdMember {
	t.Helper()
	m, err := Get(context.Background(), c, name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return m
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
