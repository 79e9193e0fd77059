package members

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// Nodes tells, for each Node an object is bound to (v1alpha1.EtcdMember.BoundNode), whether it
// exists. A name it does not hold is unknown, and nil knows no Node: the Nodes could not be read,
// and then nothing is said about them rather than something wrong.
type Nodes map[string]bool

// Gone tells that the Node name was read and does not exist; false for "" and for unknown Nodes.
func (n Nodes) Gone(name string) bool {
	exists, known := n[name]
	return known && !exists
}

// ReadNodes GETs the Nodes the objects are bound to, one request per distinct name in name
// order, all within timeout: a cluster may have thousands of Nodes and a handful of members, so
// listing every Node would cost far more than it tells. Only metadata is asked for; a Node's
// status (its images, its conditions) can be large and is not needed. The first error ends the
// reads and returns no Nodes at all: a Forbidden answer would repeat for every name, and on an
// API that fails some reads, checking some members' Nodes and not others would make one answer
// depend on which request happened to fail.
func ReadNodes(ctx context.Context, c client.Client, objects []v1alpha1.EtcdMember, timeout time.Duration) (Nodes, error) {
	var names []string
	for i := range objects {
		if n := objects[i].BoundNode(); n != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return Nodes{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nodes := Nodes{}
	for _, name := range names {
		node := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}}
		switch err := c.Get(ctx, client.ObjectKey{Name: name}, node); {
		case err == nil:
			nodes[name] = true
		case apierrors.IsNotFound(err):
			nodes[name] = false
		default:
			return nil, err
		}
	}
	return nodes, nil
}
