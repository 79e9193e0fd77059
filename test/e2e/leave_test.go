package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

func joined(m *v1alpha1.EtcdMember) bool {
	return hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList) ||
		hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonRejoined)
}

func removedByUs(m *v1alpha1.EtcdMember) bool {
	return hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved) &&
		hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)
}

// TestAgentsRegisterMembers: each agent creates its member's object with etcd's own view of it.
func TestAgentsRegisterMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	for _, m := range e.cluster.Members() {
		obj := e.waitFor(m.Name, "Joined=True", joined)
		if obj.Status.MemberID != m.IDHex() {
			t.Errorf("%s: memberID %q, want %q", m.Name, obj.Status.MemberID, m.IDHex())
		}
		if strings.Join(obj.Status.PeerURLs, ",") != m.PeerURL() || strings.Join(obj.Status.ClientURLs, ",") != m.ClientURL() {
			t.Errorf("%s: URLs %v %v, want %s %s", m.Name, obj.Status.PeerURLs, obj.Status.ClientURLs, m.PeerURL(), m.ClientURL())
		}
		if obj.Status.IsLearner || obj.Spec.Leave || obj.Status.Name != "" || obj.Labels[v1alpha1.LabelDiscovered] != "" {
			t.Errorf("%s: unexpected fields %s", m.Name, describe(obj))
		}
		if c := condition(obj, v1alpha1.ConditionJoined); c.LastTransitionTime.IsZero() || c.ObservedGeneration != obj.Generation {
			t.Errorf("%s: Joined lacks lastTransitionTime/observedGeneration: %+v", m.Name, c)
		}
	}
	// What an operator sees: the printer columns carry the IDs and the Joined state.
	out := e.kubectl("get", "etcdmembers")
	for _, col := range []string{"MEMBER ID", "PEER URLS", "LEARNER", "JOINED", "LEAVE", "AGE"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get etcdmembers lacks column %q:\n%s", col, out)
		}
	}
	for _, m := range e.cluster.Members() {
		if !strings.Contains(out, m.IDHex()) {
			t.Errorf("kubectl get etcdmembers lacks %s's ID %s:\n%s", m.Name, m.IDHex(), out)
		}
	}
}

// TestLeave: the operator's two commands remove the member by its ID and record the outcome.
func TestLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	leader := e.leaderAgent()
	target := otherThan(e, leader)
	id := target.ID()
	e.waitFor(target.Name, "Joined=True", joined)

	e.leave(target.Name)
	e.kubectl("wait", "etcdmember/"+target.Name, "--for=condition=Joined=false", "--timeout=45s")

	if e.etcdMemberIDs()[id] {
		t.Fatalf("member %s is still in etcd's member list", target.IDHex())
	}
	obj := e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	if !obj.Spec.Leave {
		t.Errorf("spec.leave was cleared: %s", describe(obj))
	}
	ev := e.waitEvent(target.Name, corev1.EventTypeNormal, v1alpha1.ReasonRemoved)
	if !strings.Contains(ev.Note, target.IDHex()) {
		t.Errorf("event note %q does not name the member ID", ev.Note)
	}
	// The other members are untouched.
	for _, m := range e.cluster.Members() {
		if m != target && !e.etcdMemberIDs()[m.ID()] {
			t.Errorf("member %s was removed too", m.Name)
		}
	}
	if n := e.removalsAnsweredStopped(); n != 0 {
		t.Errorf("%d removals were answered %q: sent to the member they removed", n, rpctypes.ErrStopped.Error())
	}
}

// TestLeaveOfLeadersOwnMember: the leading agent never removes its own member; it hands
// leadership over and another agent does it.
func TestLeaveOfLeadersOwnMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	leader := e.leaderAgent()
	target := e.cluster.Member(leader)
	id := target.ID()

	e.leave(leader)
	e.waitFor(leader, "Left=True/Removed", removedByUs)
	if e.etcdMemberIDs()[id] {
		t.Fatalf("member %s is still in etcd", target.IDHex())
	}
	if now := e.leaderAgent(); now == leader {
		t.Errorf("leadership stayed with %s", leader)
	}
	e.waitEvent(leader, corev1.EventTypeNormal, v1alpha1.ReasonHandingOver)
	if n := e.removalsAnsweredStopped(); n != 0 {
		t.Errorf("%d removals were answered %q: sent to the member they removed", n, rpctypes.ErrStopped.Error())
	}
}

// TestHandOverIsPrompt: the Lease the leader releases for its own member's leave is taken at once
// by an agent that watches it, not at that agent's next jittered retry. With a retry period of
// 10 s, a candidate that only retried would take it 0 to 22 s after the release.
func TestHandOverIsPrompt(t *testing.T) {
	t.Parallel()
	const retry, prompt = 10 * time.Second, 2 * time.Second
	e := newEnv(t, envConfig{size: 3, agentArgs: []string{
		"--leader-elect-retry-period=" + retry.String(), "--leader-elect-renew-deadline=15s", "--leader-elect-lease-duration=20s",
	}})
	leader := e.leaderAgent()
	// An agent starts campaigning a while after it is ready; the release must find the others
	// campaigning, which is what this test is about.
	for name, a := range e.agents {
		if name == leader {
			continue
		}
		err := framework.Poll(settle, retryEvery, func(context.Context) (bool, error) {
			data, err := os.ReadFile(a.LogFile())
			return strings.Contains(string(data), "Attempting to acquire leader lease"), err
		})
		if err != nil {
			t.Fatalf("agent %s never campaigned: %v", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := e.api.Clientset().CoordinationV1().Leases("kube-system").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", v1alpha1.LeaseName).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	e.leave(leader)
	var released time.Time
	for ev := range w.ResultChan() {
		lease, ok := ev.Object.(*coordinationv1.Lease)
		if !ok {
			t.Fatalf("the Lease watch ended: %v", ev.Object)
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		switch {
		case holder == "" && released.IsZero():
			released = time.Now()
		case holder != "" && !released.IsZero():
			if took := time.Since(released); took > prompt {
				t.Errorf("the released Lease was taken %s after the release, want at most %s", took.Round(time.Millisecond), prompt)
			} else {
				t.Logf("the released Lease was taken by %s %s after the release", holder, took.Round(time.Millisecond))
			}
			e.waitFor(leader, "Left=True/Removed", removedByUs)
			return
		}
	}
	t.Fatal("the leader never released the Lease, or nobody took it within a minute")
}

// TestLoneAgentRefusesOwnMember: with nobody to hand over to, the request is refused with a
// condition that says what to do, and nothing is removed.
func TestLoneAgentRefusesOwnMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agents: []string{"node-1"}})
	id := e.cluster.Member("node-1").ID()
	e.leave("node-1")
	obj := e.waitFor("node-1", "Left=False/NoOtherAgent", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonNoOtherAgent)
	})
	if msg := condition(obj, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, "Start the agent on another etcd node") {
		t.Errorf("message does not tell the operator what to do: %q", msg)
	}
	if !e.etcdMemberIDs()[id] {
		t.Fatalf("the lone agent removed its own member")
	}
	e.waitEvent("node-1", corev1.EventTypeWarning, v1alpha1.ReasonNoOtherAgent)

	// Once another agent runs, the hand-over succeeds.
	e.agents["node-2"] = framework.StartAgent(t, e.cluster.Member("node-2"), e.api)
	e.waitFor("node-1", "Left=True/Removed", removedByUs)
}

// TestLeaveWithAgentStopped: a member whose agent is down (the usual case: the node is being
// decommissioned) is removed by the leader.
func TestLeaveWithAgentStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	target := otherThan(e, e.leaderAgent())
	e.agents[target.Name].Stop(t)
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	if e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("member still in etcd")
	}
}

// TestLeaveOfAGoneMember: a member removed behind etcdmember's back ends NotFound, without error.
func TestLeaveOfAGoneMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	target := otherThan(e, e.leaderAgent())
	e.agents[target.Name].Stop(t)
	removeByHand(t, e, target)
	e.waitFor(target.Name, "Joined=False/NotFound", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonNotFound)
	})
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/NotFound", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonNotFound)
	})
}

// otherThan returns a member other than the named one.
func otherThan(e *env, name string) *framework.Member {
	for _, m := range e.cluster.Members() {
		if m.Name != name {
			return m
		}
	}
	e.t.Fatalf("no member other than %s", name)
	return nil
}

// TestLeaveWithTLS: the same leave on a cluster with client and peer mutual TLS, the agents using
// etcdctl-style certificate flags and the guard probing every voter over TLS.
func TestLeaveWithTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, tls: true})
	target := otherThan(e, e.leaderAgent())
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	if e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("member still in etcd")
	}
	assertNoKeyMaterial(t, e)
	if n := e.removalsAnsweredStopped(); n != 0 {
		t.Errorf("%d removals were answered %q: sent to the member they removed", n, rpctypes.ErrStopped.Error())
	}
}

// assertNoKeyMaterial checks that no private key, neither etcd's client key nor the agents' API
// credential, shows in the agents' logs, the Events or the objects.
func assertNoKeyMaterial(t *testing.T, e *env) {
	t.Helper()
	var secrets []string
	for _, path := range []string{e.cluster.TLS().ClientKey, e.agentKubeconfig} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, keyLines(string(data))...)
	}
	if len(secrets) == 0 {
		t.Fatal("found no key material to look for")
	}
	var haystacks []string
	for _, a := range e.agents {
		data, err := os.ReadFile(a.LogFile())
		if err != nil {
			t.Fatal(err)
		}
		haystacks = append(haystacks, string(data))
	}
	haystacks = append(haystacks, e.kubectl("get", "etcdmembers", "-o", "yaml"),
		e.kubectl("get", "events.events.k8s.io", "-n", "kube-system", "-o", "yaml"))
	for _, h := range haystacks {
		if strings.Contains(h, "PRIVATE KEY") {
			t.Errorf("a PEM private key header leaked")
		}
		for _, secret := range secrets {
			if strings.Contains(h, secret) {
				t.Errorf("key material leaked: %.12s...", secret)
			}
		}
	}
}

// keyLines returns the base64 body lines of PEM private keys in a file, and the inline
// client-key-data of a kubeconfig.
func keyLines(text string) []string {
	var out []string
	inKey := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "-----BEGIN") && strings.Contains(line, "PRIVATE KEY"):
			inKey = true
		case strings.HasPrefix(line, "-----END"):
			inKey = false
		case inKey && len(line) > 16:
			out = append(out, line)
		case strings.HasPrefix(line, "client-key-data:"):
			out = append(out, strings.TrimSpace(strings.TrimPrefix(line, "client-key-data:")))
		}
	}
	return out
}

// TestLeaderWithoutLocalEtcdStepsDown: a leading agent whose own etcd member has died still
// carries out a leave at once, its calls routed to the members that serve, and then gives up the
// Lease so that an agent with a working member leads. The chaos run once found a leave waiting
// on such a leader for good.
func TestLeaderWithoutLocalEtcdStepsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 4})
	leader := e.leaderAgent()
	e.cluster.Member(leader).Kill(t)
	// Four voters, one dead: removing a healthy one leaves 2 healthy of 3, quorum 2.
	target := otherThan(e, leader)
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	framework.Eventually(t, stepDownBound, retryEvery, "another agent holds the Lease", func(context.Context) (bool, error) {
		return e.leaderAgent() != leader, nil
	})
	if !e.agentLogsContain("Local etcd member unusable; stepping down") {
		t.Errorf("no agent logged stepping down for its unusable local member")
	}
}
