package members

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// nodeReads is a fake API with Nodes that records the Node GETs it answers, fails every list,
// and answers the GET of a name in failing with that error.
type nodeReads struct {
	mu      sync.Mutex
	gets    []string
	failing map[string]error
}

func (r *nodeReads) client(t *testing.T, nodes ...string) client.Client {
	t.Helper()
	scheme := newScheme(t)
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for _, n := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, metadataOnly := obj.(*metav1.PartialObjectMetadata); !metadataOnly {
				t.Errorf("GET of %s asks for a whole %T, not its metadata", key.Name, obj)
			}
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("GET of %s without a deadline", key.Name)
			}
			r.mu.Lock()
			r.gets = append(r.gets, key.Name)
			r.mu.Unlock()
			if err := r.failing[key.Name]; err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			t.Error("Nodes are read one by one by name, never listed")
			return errors.New("no lists")
		},
	}).Build()
}

func TestReadNodes(t *testing.T) {
	objects := []v1alpha1.EtcdMember{
		boundTo(object("node-1", "a", false), "worker-1"),
		boundTo(object("node-2", "b", false), "worker-2"),
		// Two members on one Node (a test bed, a lab) cost one read.
		boundTo(object("node-3", "c", false), "worker-1"),
		boundBy(boundTo(object("node-4", "d", false), "worker-1"), "worker-0"),
		object("node-5", "e", false),
	}
	r := &nodeReads{}
	nodes, err := ReadNodes(context.Background(), r.client(t, "worker-0", "worker-1", "worker-9"), objects, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Nodes{"worker-0": true, "worker-1": true, "worker-2": false}); !maps.Equal(nodes, want) {
		t.Errorf("Nodes %v, want %v", nodes, want)
	}
	if want := []string{"worker-0", "worker-1", "worker-2"}; !slices.Equal(r.gets, want) {
		t.Errorf("GETs %v, want one per distinct bound Node in name order: %v", r.gets, want)
	}
	if !nodes.Gone("worker-2") || nodes.Gone("worker-1") || nodes.Gone("worker-4") || nodes.Gone("") || Nodes(nil).Gone("worker-2") {
		t.Errorf("Gone: only a Node read and not found is gone")
	}
}

func TestReadNodesWithoutBoundNodes(t *testing.T) {
	r := &nodeReads{}
	nodes, err := ReadNodes(context.Background(), r.client(t, "worker-1"), []v1alpha1.EtcdMember{object("node-1", "a", false)}, time.Minute)
	if err != nil || len(nodes) != 0 || len(r.gets) != 0 {
		t.Errorf("no bound Node: Nodes %v, error %v, GETs %v; want no Node, no error, no request", nodes, err, r.gets)
	}
}

// TestReadNodesFailure: any failed read makes every Node unknown, so that no answer depends on
// which read failed; a Forbidden one ends the reads at once.
func TestReadNodesFailure(t *testing.T) {
	forbiddenNode := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "worker-1",
		errors.New(`User "viewer" cannot get resource "nodes" in API group "" at the cluster scope`))
	objects := []v1alpha1.EtcdMember{
		boundTo(object("node-1", "a", false), "worker-1"),
		boundTo(object("node-2", "b", false), "worker-2"),
		boundTo(object("node-3", "c", false), "worker-3"),
	}
	cases := []struct {
		name     string
		failing  map[string]error
		wantGets []string
		is       func(error) bool
	}{
		{"forbidden", map[string]error{"worker-1": forbiddenNode}, []string{"worker-1"}, apierrors.IsForbidden},
		{"transient", map[string]error{"worker-2": apierrors.NewServiceUnavailable("etcd leader changed")},
			[]string{"worker-1", "worker-2"}, apierrors.IsServiceUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &nodeReads{failing: tc.failing}
			nodes, err := ReadNodes(context.Background(), r.client(t, "worker-1"), objects, time.Minute)
			if nodes != nil || !tc.is(err) {
				t.Errorf("Nodes %v, error %v; want no Nodes and the API's error", nodes, err)
			}
			if !slices.Equal(r.gets, tc.wantGets) {
				t.Errorf("GETs %v, want %v", r.gets, tc.wantGets)
			}
		})
	}
}
