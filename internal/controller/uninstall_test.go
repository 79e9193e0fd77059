package controller

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// crdState is what the EtcdMember CRD looks like to the leader.
type crdState int

const (
	crdInstalled crdState = iota
	crdDeleting
	// crdForbidden: the agents' RBAC predates the rule that lets them read it.
	crdForbidden
)

// crdReader serves the reads of the EtcdMember CRD's metadata, which the fake API cannot (its
// scheme has no CRD kind), and passes every other read on.
type crdReader struct {
	client.Reader
	state crdState
}

func (c crdReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	crd, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || crd.GroupVersionKind() != crdGVK {
		return c.Reader.Get(ctx, key, obj, opts...)
	}
	if key.Name != v1alpha1.CRDName {
		return apierrors.NewNotFound(schema.GroupResource{Group: crdGVK.Group, Resource: "customresourcedefinitions"}, key.Name)
	}
	switch c.state {
	case crdForbidden:
		return apierrors.NewForbidden(schema.GroupResource{Group: crdGVK.Group, Resource: "customresourcedefinitions"}, key.Name, nil)
	case crdDeleting:
		crd.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	crd.Name = key.Name
	return nil
}

// uninstallWorld is a node world whose leader reads the CRD in the given state.
func uninstallWorld(t *testing.T, state crdState) *nodeWorld {
	t.Helper()
	w := newNodeWorld(t, true)
	w.r.APIReader = crdReader{Reader: w.api, state: state}
	w.nr.APIReader = crdReader{Reader: w.api, state: state}
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		if !controllerutil.ContainsFinalizer(w.get(name), v1alpha1.FinalizerMember) || !w.held(name) {
			t.Fatalf("%s: the object or its Node is not held before the uninstall", name)
		}
	}
	return w
}

// deleteObject deletes the object as the apiserver does: it stays, being deleted, while
// finalizers hold it.
func (w *nodeWorld) deleteObject(name string) {
	w.t.Helper()
	if err := w.api.Delete(context.Background(), &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		w.t.Fatal(err)
	}
}

// exists tells whether the object is still there.
func (w *nodeWorld) exists(name string) bool {
	w.t.Helper()
	err := w.api.Get(context.Background(), types.NamespacedName{Name: name}, &v1alpha1.EtcdMember{})
	if err != nil && !apierrors.IsNotFound(err) {
		w.t.Fatal(err)
	}
	return err == nil
}

// TestUninstallRemovesNoMember: the CRD is being deleted, and with it every object (as its cleanup
// does, past the delete guard), while one member has a pending leave and one member's Node is
// deleted too. The leader lets every object go, removes no member, asks nobody to leave, and
// holds no Node; a new term after it does the same.
func TestUninstallRemovesNoMember(t *testing.T) {
	w := uninstallWorld(t, crdDeleting)
	w.askLeave("node-2")
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		w.deleteObject(name)
	}
	w.deleteNode("node-3")
	for _, name := range []string{"node-3", "node-1"} {
		w.reconcileNode(name)
	}
	// A new term starts on the objects still there.
	w.mustReconcile("node-1")
	w.newTerm()
	w.r.APIReader = crdReader{Reader: w.api, state: crdDeleting}
	for _, name := range []string{"node-2", "node-3"} {
		w.mustReconcile(name)
	}
	w.reconcileNode("node-2")

	if got := w.removals(); len(got) != 0 {
		t.Errorf("the uninstall removed members %v", got)
	}
	if got, err := w.etcd.MemberList(context.Background()); err != nil || len(got) != 3 {
		t.Errorf("etcd lists %d members (%v) after the uninstall, want 3", len(got), err)
	}
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		if w.exists(name) {
			t.Errorf("object %s is still there: %+v", name, w.get(name).ObjectMeta)
		}
		if w.held(name) || w.nodes.followed[name] {
			t.Errorf("Node %s: held %v, followed %v; want neither", name, w.held(name), w.nodes.followed[name])
		}
	}
	if w.node("node-3") != nil {
		t.Errorf("Node node-3, deleted during the uninstall, is still there")
	}
	if n := len(w.eventsOf("node-3", v1alpha1.ReasonNodeDeleted)); n != 0 {
		t.Errorf("the Node deleted during the uninstall asked its member to leave (%d NodeDeleted Events)", n)
	}
}

// TestOneObjectDeletedIsNoUninstall: an operator deleting one object after its leave, the CRD in
// place (or unreadable to agents whose RBAC predates the rule), still waits for the leave; the
// other objects and Nodes stay held.
func TestOneObjectDeletedIsNoUninstall(t *testing.T) {
	for name, state := range map[string]crdState{"CRD installed": crdInstalled, "CRD unreadable": crdForbidden} {
		t.Run(name, func(t *testing.T) {
			w := uninstallWorld(t, state)
			w.askLeave("node-2")
			w.deleteObject("node-2")
			w.reconcileNode("node-2")
			if !w.exists("node-2") || !w.held("node-2") {
				t.Fatalf("node-2: object there %v, Node held %v before the leave; want both", w.exists("node-2"), w.held("node-2"))
			}
			w.mustReconcile("node-2")
			if got := w.removals(); len(got) != 1 || got[0] != 2 {
				t.Errorf("removed %v, want [2]", got)
			}
			if w.exists("node-2") {
				t.Errorf("the object is still there after its member left")
			}
			for _, other := range []string{"node-1", "node-3"} {
				w.mustReconcile(other)
				w.reconcileNode(other)
				if !controllerutil.ContainsFinalizer(w.get(other), v1alpha1.FinalizerMember) || !w.held(other) {
					t.Errorf("%s: the object or its Node was let go", other)
				}
			}
		})
	}
}
