package framework

import (
	"context"
	"errors"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// errNoHolder: the Lease exists but nobody holds it, between two leaders.
var errNoHolder = errors.New("the Lease has no holder")

// leaderTimeout bounds the wait for an agent to hold the leader Lease.
const leaderTimeout = 45 * time.Second

// LeaseHolder returns the name of the agent holding the Lease: agents identify themselves as
// "<name>_<random>".
func LeaseHolder(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	name, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return name
}

// LeaderAgent waits until an agent holds the leader Lease and returns its name.
func (a *APIServer) LeaderAgent(t TB) string {
	t.Helper()
	var name string
	err := poll(leaderTimeout, func(ctx context.Context) error {
		lease, err := a.Clientset().CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if name = LeaseHolder(lease); name == "" {
			return errNoHolder
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no agent holds the %s Lease after %s: %v", v1alpha1.LeaseName, leaderTimeout, err)
	}
	return name
}
