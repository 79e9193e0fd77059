package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// ownMemberBound is how long the leader may take, at the tests' timings (--probe-interval 2s,
// --leader-elect-lease-duration 4s), to show a failure of its own etcd member: two probe
// intervals (the round after the failure may start up to one interval later, and its verdict needs
// the probe timeout) plus a lease duration (a reconcile that went to the failed member before
// the round saw it waits out its call there, or the term changes hands meanwhile). The same bound
// holds for refusing a leave that the failure makes unsafe, and for carrying out one it leaves
// safe: the failed member's own, which the leader hands over.
const ownMemberBound = 2*2*time.Second + 4*time.Second

// leadersOwnMemberFails: the etcd member of the leading agent's own node is killed, frozen or
// cut off from everything, while that agent runs on. In each case its object turns Healthy=False,
// a leave requested at the same moment, which would leave one healthy voter of two, is refused
// with the guard's numbers, and the leave of the failed member itself goes through, each within
// ownMemberBound. The apiserver stores on an etcd of its own, so that its requests to the failed
// member cannot stall the API the test reads through.
func leadersOwnMemberFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(e *env, m *framework.Member)
	}{
		{"killed", func(e *env, m *framework.Member) { m.Kill(e.t) }},
		{"frozen", func(e *env, m *framework.Member) { m.Pause(e.t) }},
		{"cut off", func(e *env, m *framework.Member) { isolate(e, m) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{size: 3, separateStorage: true, faultProxies: tc.name == "cut off"})
			leader := e.leaderAgent()
			failed := e.cluster.Member(leader)
			other := otherThan(e, leader)
			healthyWithLeader(e)

			watchCtx, stopWatch := context.WithCancel(context.Background())
			defer stopWatch()
			falseWrites := e.falseWrites(watchCtx, failed.Name)
			start := time.Now()
			tc.fault(e, failed)
			e.leave(other.Name)
			within := func(what string, ok func(*v1alpha1.EtcdMember) bool, name string) *v1alpha1.EtcdMember {
				t.Helper()
				obj := e.waitFor(name, what, ok)
				took := time.Since(start)
				if took > ownMemberBound {
					t.Errorf("%s: %s after the fault, want at most %s", what, took.Round(100*time.Millisecond), ownMemberBound)
				}
				t.Logf("%s %s after the fault", what, took.Round(100*time.Millisecond))
				return obj
			}
			within(failed.Name+" Healthy=False", func(m *v1alpha1.EtcdMember) bool {
				c := condition(m, v1alpha1.ConditionHealthy)
				return c != nil && c.Status == metav1.ConditionFalse
			}, failed.Name)
			refused := within(other.Name+" Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk), other.Name)
			if msg := condition(refused, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, "would leave 1 healthy voter of 2") {
				t.Errorf("the refusal does not carry the guard's numbers: %q", msg)
			}
			if !e.etcdMemberIDs()[other.ID()] {
				t.Fatalf("%s was removed with the leader's own member failed", other.Name)
			}
			stopWatch()
			for _, w := range <-falseWrites {
				t.Errorf("written after the fault: %s", w)
			}

			e.kubectl("patch", "etcdmembers.etcdmember.io", other.Name, "--type", "merge", "-p", `{"spec":{"leave":false}}`)
			start = time.Now()
			e.leave(failed.Name)
			within(failed.Name+" Left=True/Removed", removedByUs, failed.Name)
			if e.etcdMemberIDs()[failed.ID()] || !e.etcdMemberIDs()[other.ID()] {
				t.Errorf("etcd lists %v; want %s removed and %s kept", e.etcdMemberIDs(), failed.Name, other.Name)
			}
		})
	}
}

// isolate cuts m off from everything: its peers both ways, its client URL, and its own agent.
func isolate(e *env, m *framework.Member) {
	e.t.Helper()
	for _, o := range e.cluster.Members() {
		if o != m {
			e.cluster.PeerLink(e.t, m, o).Blackhole()
			e.cluster.PeerLink(e.t, o, m).Blackhole()
		}
	}
	m.PeerIngress(e.t).Blackhole(framework.BothWays)
	m.ClientLink(e.t).Blackhole(framework.BothWays)
	e.agents[m.Name].EtcdLink(e.t).Blackhole(framework.BothWays)
}

// falseWrites records every status write, from now until ctx ends, that the failure of the member
// of the object failed makes false: Healthy=True on that object, or Removable=True on another
// (with one of three voters failed, removing a healthy one would leave one healthy voter of two).
// A write before the leader noticed the failure, made from what it knew before, would show here.
// The writes arrive on the channel once ctx has ended.
func (e *env) falseWrites(ctx context.Context, failed string) <-chan []string {
	e.t.Helper()
	var list v1alpha1.EtcdMemberList
	e.retry("listing EtcdMembers", func(ctx context.Context) error { return e.client.List(ctx, &list) })
	w, err := e.api.ObjectClient(e.t, 0).Watch(ctx, &v1alpha1.EtcdMemberList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		e.t.Fatalf("watching EtcdMembers: %v", err)
	}
	// A spec or metadata change (the test's own patches) is no status write: only an event whose
	// status differs from the object's last counts.
	last := map[string]v1alpha1.EtcdMemberStatus{}
	for _, m := range list.Items {
		last[m.Name] = m.Status
	}
	out := make(chan []string, 1)
	go func() {
		defer w.Stop()
		var found []string
		for {
			select {
			case <-ctx.Done():
				out <- found
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					found = append(found, "(the watch ended early; writes after it were not checked)")
					<-ctx.Done()
					out <- found
					return
				}
				m, isMember := ev.Object.(*v1alpha1.EtcdMember)
				if !isMember || equality.Semantic.DeepEqual(last[m.Name], m.Status) {
					continue
				}
				last[m.Name] = m.Status
				switch {
				case m.Name == failed && conditionIs(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue):
					found = append(found, fmt.Sprintf("%s Healthy=True (resourceVersion %s): %s", m.Name, m.ResourceVersion, condition(m, v1alpha1.ConditionHealthy).Message))
				case m.Name != failed && conditionIs(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue):
					found = append(found, fmt.Sprintf("%s Removable=True (resourceVersion %s): %s", m.Name, m.ResourceVersion, condition(m, v1alpha1.ConditionRemovable).Message))
				}
			}
		}
	}()
	return out
}

func conditionIs(m *v1alpha1.EtcdMember, condType string, status metav1.ConditionStatus) bool {
	c := condition(m, condType)
	return c != nil && c.Status == status
}
