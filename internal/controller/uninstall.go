package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Uninstalling is deleting the EtcdMember CRD: the apiserver deletes every EtcdMember with it (past
// admission, so the delete guard never sees those deletions) and keeps the CRD Terminating until
// they are gone. An operator removing the tool wants no member to leave, so the leading agent then
// lets go of each object's FinalizerMember and makes no membership change for it, and the node
// controller binds no Node to it (so FinalizerNode comes off, as with --leave-on-node-delete off).
//
// The CRD needs no watch of its own: its deletion reaches the leader as the objects' (each gets a
// deletionTimestamp, or goes at once when it holds no finalizer), and only then is the CRD read, to
// tell an uninstall from an operator deleting one object after its leave. So the agents may get
// that one CRD and nothing more: RBAC narrows a get by name, where a list or watch needs a
// metadata.name field selector from the client to be narrowed, and no other CRD is any of theirs.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=etcdmembers.etcdmember.io,verbs=get

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// goesWithCRD tells whether m is being deleted with the CRD, reading the CRD's metadata past every
// cache, and only for an object being deleted.
func goesWithCRD(ctx context.Context, reader client.Reader, m *v1alpha1.EtcdMember) (bool, error) {
	if m.DeletionTimestamp == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdGVK)
	err := reader.Get(ctx, types.NamespacedName{Name: v1alpha1.CRDName}, crd)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsForbidden(err):
		// Agents upgraded before config/default was applied again: the deletion is taken for an
		// operator's, as before, rather than holding up the leave it waits for.
		logf.FromContext(ctx).Info("Cannot tell an uninstall from the deletion of one object: the agents may not read the CRD; apply config/default again",
			"object", m.Name, "crd", v1alpha1.CRDName, "error", err.Error())
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading CustomResourceDefinition %s: %w", v1alpha1.CRDName, err)
	}
	return crd.DeletionTimestamp != nil, nil
}

// letGoWithCRD drops FinalizerMember from an object that goes with the CRD, and tells whether it
// does go: its member stays in etcd, and nothing else is to be done for it.
func (r *MembershipReconciler) letGoWithCRD(ctx context.Context, m *v1alpha1.EtcdMember) (bool, error) {
	goes, err := goesWithCRD(ctx, r.APIReader, m)
	if err != nil || !goes || !controllerutil.ContainsFinalizer(m, v1alpha1.FinalizerMember) {
		return goes, err
	}
	logf.FromContext(ctx).Info("Letting the object go with the CRD: uninstalling removes no etcd member",
		"object", m.Name, "memberID", m.Status.MemberID, "finalizer", v1alpha1.FinalizerMember)
	controllerutil.RemoveFinalizer(m, v1alpha1.FinalizerMember)
	err = onServerError(func() error {
		ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		defer cancel()
		return r.Client.Update(ctx, m)
	})
	if client.IgnoreNotFound(err) != nil {
		return true, fmt.Errorf("removing the finalizer of %s: %w", m.Name, err)
	}
	return true, nil
}
