//go:build bench

package bench

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	// rideOutGoal is the stall the production defaults must ride out (issue #48).
	rideOutGoal = 7 * time.Second
	// rideOutStep is how much longer each stall is than the one before, from rideOutGoal.
	rideOutStep = time.Second
	// rideOutAfter is how long after a stall the Lease is judged: the renewals it held back land
	// first.
	rideOutAfter = 5 * time.Second
)

// rideOut measures the longest stall of every apiserver-to-etcd link that the leader rides out
// with the production defaults: stalls of rideOutGoal, then a second longer each time, until one
// ends the leader's term or moves the Lease, up to a lease duration. It returns the longest stall
// ridden out (0 if even rideOutGoal was not) and the first that was not (0 if none up to the lease
// duration).
func (e *env) rideOut(lease time.Duration) (longest, lost time.Duration) {
	e.t.Helper()
	var links []*framework.Link
	for _, m := range e.cluster.Members() {
		links = append(links, e.api.EtcdLink(e.t, m))
	}
	for d := rideOutGoal; d <= lease; d += rideOutStep {
		before, ended := e.leaderLease(), e.agentLogCount("Leadership term ended")
		for _, l := range links {
			l.Stall(framework.BothWays)
		}
		// The fault lasts d: this sleep is its duration.
		time.Sleep(d)
		for _, l := range links {
			l.Heal()
		}
		time.Sleep(rideOutAfter)
		after := e.leaderLease()
		kept := ptr.Deref(after.Spec.HolderIdentity, "") == ptr.Deref(before.Spec.HolderIdentity, "") &&
			ptr.Deref(after.Spec.LeaseTransitions, 0) == ptr.Deref(before.Spec.LeaseTransitions, 0) &&
			e.agentLogCount("Leadership term ended") == ended
		e.t.Logf("a %s stall of every apiserver-to-etcd link: leadership kept %v (holder %q)", d, kept, ptr.Deref(after.Spec.HolderIdentity, ""))
		if !kept {
			return longest, d
		}
		longest = d
	}
	return longest, 0
}

// leaderLease reads the leader Lease, retrying through the apiserver's recovery from a stall.
func (e *env) leaderLease() *coordinationv1.Lease {
	e.t.Helper()
	var lease *coordinationv1.Lease
	err := framework.Poll(settle, 100*time.Millisecond, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		var err error
		lease, err = e.api.Clientset().CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
		return err == nil, nil
	}))
	if err != nil {
		e.t.Fatalf("reading the leader Lease: %v", err)
	}
	return lease
}

// agentLogCount counts the occurrences of text in every agent's log.
func (e *env) agentLogCount(text string) int {
	e.t.Helper()
	n := 0
	for _, a := range e.agents {
		c, err := a.LogCount(text)
		if err != nil {
			e.t.Fatal(err)
		}
		n += c
	}
	return n
}
