package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestCompatEtcd36: the core scenarios on etcd 3.6, the minor before the one kubeadm 1.37 deploys
// (3.7, which every other test runs), and what clusters not yet upgraded run.
func TestCompatEtcd36(t *testing.T) {
	t.Parallel()
	coreScenariosOn(t, "etcd-3.6", "3.6.")
}

// TestCompatEtcd35: the core scenarios on etcd 3.5, which kubeadm up to 1.30 and k3s still run.
func TestCompatEtcd35(t *testing.T) {
	t.Parallel()
	coreScenariosOn(t, "etcd-3.5", "3.5.")
}

// coreScenariosOn runs the core scenarios on bin/<binary>, whose members report versions starting
// with version, the apiserver storing in the same cluster as in the other tests. One test bed
// serves them all, one after the other, because a fresh one per scenario would cost half a minute
// each; each step leaves three started voters, which is what the next one needs.
func coreScenariosOn(t *testing.T, binary, version string) {
	e := newEnv(t, envConfig{size: 3, etcdBinary: binary})
	step := func(name string) func() {
		start := time.Now()
		return func() {
			t.Logf("etcd %s: %s took %s", strings.TrimSuffix(version, "."), name, time.Since(start).Round(time.Millisecond))
		}
	}

	done := step("versions and registration")
	assertEtcdVersion(t, e.cluster, version)
	for _, m := range e.cluster.Members() {
		obj := e.waitFor(m.Name, "Joined=True", joined)
		if obj.Status.MemberID != m.IDHex() || !slices.Equal(obj.Status.PeerURLs, []string{m.PeerURL()}) ||
			!slices.Equal(obj.Status.ClientURLs, []string{m.ClientURL()}) || obj.Status.IsLearner || obj.Spec.Leave {
			t.Errorf("%s registered as %s, peer %v, client %v; want member %s at %s and %s, a voter, no leave",
				m.Name, describe(obj), obj.Status.PeerURLs, obj.Status.ClientURLs, m.IDHex(), m.PeerURL(), m.ClientURL())
		}
	}
	done()

	// With one of three dead, removing another healthy one would leave 1 healthy voter of 2.
	done = step("guard refusal, then the leave")
	dead, target, refused := refusedLeave(e)
	want := "removing " + target.Name + " would leave 1 healthy voter of 2; quorum of 2 needs 2"
	if msg := condition(refused, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, want) {
		t.Errorf("refusal message %q lacks %q", msg, want)
	}
	e.waitEvent(target.Name, corev1.EventTypeWarning, v1alpha1.ReasonQuorumAtRisk)
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("the guard refused, yet member %s is gone from etcd", target.IDHex())
	}
	dead.Start(t)
	obj := e.waitFor(target.Name, "Left=True/Removed once the dead member is back", removedByUs)
	if !obj.Spec.Leave {
		t.Errorf("spec.leave was cleared: %s", describe(obj))
	}
	assertMembers(t, e, without(e.cluster.Members(), target))
	if ev := e.waitEvent(target.Name, corev1.EventTypeNormal, v1alpha1.ReasonRemoved); !strings.Contains(ev.Note, target.IDHex()) {
		t.Errorf("Removed Event %q does not name member %s", ev.Note, target.IDHex())
	}
	done()

	done = step("re-join")
	oldID := target.IDHex()
	e.cluster.Rejoin(t, target, false)
	if target.IDHex() == oldID {
		t.Fatalf("re-joined member kept its ID %s", oldID)
	}
	obj = e.waitFor(target.Name, "Joined=True/Rejoined with the new ID", func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex() &&
			hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonRejoined)
	})
	if obj.Spec.Leave || condition(obj, v1alpha1.ConditionLeft) != nil {
		t.Errorf("the old leave survived the re-join: %s", describe(obj))
	}
	assertMembers(t, e, e.cluster.Members())
	done()

	done = step("learner join and promotion")
	node4, file, id := e.joinLearner("node-4")
	node4.StartWithSettings(t, framework.ReadEnvFile(t, file))
	e.agents["node-4"] = framework.StartAgent(t, node4, e.api, "--kubeconfig="+e.agentKubeconfig)
	learner := e.waitForMember(id, "promoted and healthy", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionPromoted, metav1.ConditionTrue, v1alpha1.ReasonPromoted) &&
			!m.Status.IsLearner && hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
	})
	if rec := membersWithPeerURL(t, e.cluster.Client(t), node4.PeerURL()); len(rec) != 1 || rec[0].IsLearner {
		t.Fatalf("object says promoted, etcd records %v for %s", rec, node4.PeerURL())
	}
	e.waitEvent(learner.Name, corev1.EventTypeNormal, v1alpha1.ReasonPromoted)
	assertEtcdVersion(t, e.cluster, version)
	done()

	// The leading agent never removes its own member: it hands the Lease over and another agent
	// carries the leave out.
	done = step("leader hand-off")
	leader := e.leaderAgent()
	leaving := e.cluster.Member(leader)
	e.leave(leader)
	e.waitFor(leader, "Left=True/Removed by another agent", removedByUs)
	assertMembers(t, e, without(e.cluster.Members(), leaving))
	if now := e.leaderAgent(); now == leader {
		t.Errorf("leadership stayed with %s, whose member left", leader)
	}
	e.waitEvent(leader, corev1.EventTypeNormal, v1alpha1.ReasonHandingOver)
	done()

	if e.agentLogsContain(etcd.ErrEtcdTooOld.Error()) {
		t.Errorf("an agent refused to lead etcd %s", strings.TrimSuffix(version, "."))
	}
}

// TestCompatEtcd34Refused: before 3.5 etcd answers the member list from the serving member alone,
// so the agents must not lead it: no agent ever holds the Lease, each says why in its log, and
// etcd's membership stays as it was. The apiserver stores in a current etcd of its own: the test
// is about the agents' floor, not the apiserver's.
func TestCompatEtcd34Refused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, etcdBinary: "etcd-3.4", separateStorage: true})
	assertEtcdVersion(t, e.cluster, "3.4.")
	// newEnv has waited for every agent to register its member: only leading is refused.
	for name, a := range e.agents {
		waitLogContains(t, a, etcd.ErrEtcdTooOld.Error(), "older than "+etcd.MinLeadableVersion)
		t.Logf("agent %s logged its refusal", name)
	}
	// Three lease durations (framework.TestAgentArgs): any agent campaigning would have won.
	err := framework.Hold(12*time.Second, pollEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		lease, err := e.api.Clientset().CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("reading the Lease %s: %w", v1alpha1.LeaseName, err)
		case framework.LeaseHolder(lease) != "":
			return false, fmt.Errorf("agent %s leads an etcd 3.4 cluster", framework.LeaseHolder(lease))
		}
		return true, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	assertMembers(t, e, e.cluster.Members())
}

// waitLogContains waits until the agent's log has a line with every one of the texts.
func waitLogContains(t *testing.T, a *framework.Agent, texts ...string) {
	t.Helper()
	var last string
	err := framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		data, err := os.ReadFile(a.LogFile())
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("agent %s log: %v", a.Name, err)
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if containsAll(line, texts) {
				return true, nil
			}
		}
		last = string(data)
		return false, nil
	})
	if err != nil {
		t.Fatalf("agent %s logged no line with %q within %s; its log:\n%s", a.Name, texts, settle, last)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// assertEtcdVersion checks that every running member of c reports a server version with prefix,
// so a test of an older etcd cannot pass on the default one.
func assertEtcdVersion(t *testing.T, c *framework.Cluster, prefix string) {
	t.Helper()
	for _, m := range c.Members() {
		if !m.Running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		st, err := m.Client(t).Status(ctx, m.ClientURL())
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", m.Name, err)
		}
		if !strings.HasPrefix(st.Version, prefix) {
			t.Fatalf("%s runs etcd %s, want %s*", m.Name, st.Version, prefix)
		}
	}
}

// assertMembers checks that etcd lists exactly the IDs of members, all of them voters.
func assertMembers(t *testing.T, e *env, members []*framework.Member) {
	t.Helper()
	var want []string
	for _, m := range members {
		want = append(want, m.IDHex())
	}
	var got []string
	e.retry("member list", func(ctx context.Context) error {
		resp, err := e.cluster.Client(t).MemberList(ctx)
		if err != nil {
			return err
		}
		got = nil
		for _, m := range resp.Members {
			if m.IsLearner {
				return errors.New("member " + m.Name + " is still a learner")
			}
			got = append(got, strconv.FormatUint(m.ID, 16))
		}
		return nil
	})
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("etcd lists members %v, want %v", got, want)
	}
}

// without returns members less the one given.
func without(members []*framework.Member, gone *framework.Member) []*framework.Member {
	return slices.DeleteFunc(slices.Clone(members), func(m *framework.Member) bool { return m == gone })
}
