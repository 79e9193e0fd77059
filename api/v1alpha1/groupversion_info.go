// Package v1alpha1 holds the etcdmember.io/v1alpha1 API: one cluster-scoped EtcdMember object per
// etcd member.
// +kubebuilder:object:generate=true
// +groupName=etcdmember.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CRDName is the name of the CustomResourceDefinition that serves EtcdMembers. Its deletion is an
// uninstall: the apiserver deletes every EtcdMember with it, and the leading agent then lets go of
// their FinalizerMember and removes no etcd member.
const CRDName = "etcdmembers.etcdmember.io"

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "etcdmember.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &EtcdMember{}, &EtcdMemberList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
