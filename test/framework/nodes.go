package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RegisterNode creates a Node object the way a kubelet registers its node: the name, the hostname
// label and the control-plane role label kubeadm puts on etcd nodes. The test bed runs no kubelet
// and no controller-manager, so nothing else ever writes the Node. A Node that exists already is
// left as it is.
func (a *APIServer) RegisterNode(t TB, name string) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			corev1.LabelHostname:                    name,
			"node-role.kubernetes.io/control-plane": "",
		},
	}}
	var created *corev1.Node
	err := poll(callTimeout, func(ctx context.Context) error {
		var err error
		created, err = a.clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = a.clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		}
		return err
	})
	if err != nil {
		t.Fatalf("registering Node %s: %v", name, err)
	}
	return created
}

// Node returns the Node, or nil when there is none.
func (a *APIServer) Node(t TB, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := poll(callTimeout, func(ctx context.Context) error {
		var err error
		node, err = a.clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node = nil
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatalf("reading Node %s: %v", name, err)
	}
	return node
}

// NodeString renders what a test looks at on a Node: its UID, deletion and finalizers.
func NodeString(node *corev1.Node) string {
	if node == nil {
		return "<no Node>"
	}
	deleting := "not deleting"
	if node.DeletionTimestamp != nil {
		deleting = "deleting since " + node.DeletionTimestamp.UTC().String()
	}
	return fmt.Sprintf("Node %s uid=%s %s finalizers=%v", node.Name, node.UID, deleting, node.Finalizers)
}
