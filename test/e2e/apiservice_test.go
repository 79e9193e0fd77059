package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// storagelessAPIBound is how soon after the leader's etcd member stops its object must say so,
// with every agent's connection on the apiserver that stored through that member: the Lease's
// 14 s, which the stepped-down leader cannot release through that apiserver, a Lease request's
// 5 s timeout (half the renew deadline) before an agent dials again, two probe intervals, and a
// few seconds for a loaded machine.
const storagelessAPIBound = 30 * time.Second

// agentsLeaveStoragelessAPIServer is kubeadm's control plane, where each node's apiserver stores
// through its own etcd member only, and agents reach the apiservers through the "kubernetes"
// Service, which balances connections, not requests. Every agent's connection is with the
// apiserver of the leader's node when the leader's etcd member stops (as `kubeadm upgrade` stops
// it): that apiserver still accepts connections, and answers nothing that needs storage. The
// agents must leave it for another, or nobody leads and the stopped member stays Healthy=True
// (issue #48's run 15, in the kubeadm tier).
func agentsLeaveStoragelessAPIServer(t *testing.T) {
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	other := framework.StartAPIServer(t, c)
	other.InstallEtcdmember(t)
	svc := framework.NewAPIService(t, other)
	e := &env{t: t, cluster: c, api: other, client: other.ObjectClient(t, 0), agents: map[string]*framework.Agent{}}
	_, kubeconfig := other.User(t, "etcdmember-agent", "etcdmember:agents")
	args := append(append([]string{"--kubeconfig=" + kubeconfig}, svc.ClientArgs()...), shippedElection()...)
	for _, m := range c.Members() {
		a := framework.NewAgent(t, m, other, args...)
		a.StartUnready(t)
		e.agents[m.Name] = a
	}
	for _, a := range e.agents {
		a.WaitReady(t)
		a.WaitOwnObject(t)
	}
	healthyWithLeader(e)

	// The leader's node gets its apiserver, and every agent's connection goes there.
	leader := c.Member(e.leaderAgent())
	pinned := framework.StartAPIServerWith(t, c, framework.APIServerConfig{Storage: []*framework.Member{leader}})
	svc.Route(pinned)
	t.Logf("%s leads; every agent's connection closed, to open again to %s's apiserver", leader.Name, leader.Name)
	if n := svc.Reset(); n < len(e.agents) {
		t.Fatalf("closed %d connections through the service, want one or more per agent (%d)", n, len(e.agents))
	}
	framework.Eventually(t, callTimeout, retryEvery, "every agent connected again, to "+leader.Name+"'s apiserver",
		func(context.Context) (bool, error) {
			if n := svc.Open(pinned); n < len(e.agents) {
				return false, fmt.Errorf("%d connections open to it", n)
			}
			return true, nil
		})
	if n := svc.Open(other); n != 0 {
		t.Fatalf("%d connections still open to the apiserver on every member, want none", n)
	}

	svc.Route(other)
	start := time.Now()
	leader.Stop(t)
	t.Logf("%s's etcd member stopped; new connections go to the other apiserver", leader.Name)
	var last *v1alpha1.EtcdMember
	err := framework.Poll(storagelessAPIBound, retryEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		m := &v1alpha1.EtcdMember{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: leader.Name}, m); err != nil {
			return false, err
		}
		last = m
		c := condition(m, v1alpha1.ConditionHealthy)
		return c != nil && c.Status == metav1.ConditionFalse, nil
	}))
	t.Logf("after %s: %d connections open to %s's apiserver, %d to the other", time.Since(start).Round(100*time.Millisecond),
		svc.Open(pinned), leader.Name, svc.Open(other))
	if err != nil {
		t.Fatalf("%s's etcd member stopped %s ago, and its object still says: %s", leader.Name, storagelessAPIBound, describe(last))
	}
	t.Logf("%s Healthy=False %s after its etcd member stopped; %s leads", leader.Name,
		time.Since(start).Round(100*time.Millisecond), e.leaderAgent())

	leader.Start(t)
	healthyWithLeader(e)
}
