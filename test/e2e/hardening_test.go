package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// TestForceIsOneShot: a forced leave is for the removal it was set for. Once the node re-joins,
// the take-over clears the force annotation with the request, so a second leave of that node,
// with another member dead, meets the quorum guard again instead of costing the cluster its
// quorum. The apiserver has its own etcd, so that the refusal can be read whatever happens.
func TestForceIsOneShot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, separateStorage: true})
	others := nonLeaders(e)
	target, dead := others[0], others[1]

	e.kubectl("annotate", "etcdmembers.etcdmember.io", target.Name, v1alpha1.AnnotationForceLeave+"=true")
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)

	e.cluster.Rejoin(t, target, false)
	obj := e.waitFor(target.Name, "taken over by the re-joined member", func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex() && joined(m)
	})
	if _, forced := obj.Annotations[v1alpha1.AnnotationForceLeave]; forced || obj.Spec.Leave {
		t.Fatalf("take-over kept the earlier request: leave=%t annotations %v", obj.Spec.Leave, obj.Annotations)
	}

	dead.Kill(t)
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("%s was removed with %s dead: the force of its earlier leave was used again", target.Name, dead.Name)
	}
}

// TestAgentsCannotForceOrAskUnexplained: the shipped admission policy refuses an agent identity
// setting etcdmember.io/force-leave, or spec.leave without the reason annotation that
// --remove-unreachable-after writes; with that annotation the request goes through.
func TestAgentsCannotForceOrAskUnexplained(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	cfg, _ := e.api.User(t, "etcdmember-agent-misused", "etcdmember:agents")
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	asAgent, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	target := nonLeaders(e)[0].Name
	// The leader writes the object too (status, its finalizer), so an update that lost the race
	// is made again on a fresh read; admission judges each attempt before storage does.
	update := func(what string, change func(*v1alpha1.EtcdMember)) error {
		t.Helper()
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			m := &v1alpha1.EtcdMember{}
			if err := asAgent.Get(ctx, types.NamespacedName{Name: target}, m); err != nil {
				t.Fatalf("%s: get as an agent: %v", what, err)
			}
			change(m)
			return asAgent.Update(ctx, m)
		})
	}
	annotate := func(key, value string) func(*v1alpha1.EtcdMember) {
		return func(m *v1alpha1.EtcdMember) {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[key] = value
		}
	}

	err = update("force", annotate(v1alpha1.AnnotationForceLeave, "true"))
	if err == nil || !strings.Contains(err.Error(), "may not set etcdmember.io/force-leave") {
		t.Errorf("an agent set the force annotation: %v", err)
	}
	err = update("leave", func(m *v1alpha1.EtcdMember) { m.Spec.Leave = true })
	if err == nil || !strings.Contains(err.Error(), "only with the etcdmember.io/leave-reason annotation") {
		t.Errorf("an agent set spec.leave without a reason: %v", err)
	}
	if obj := e.get(target); obj.Spec.Leave || obj.Annotations[v1alpha1.AnnotationForceLeave] != "" {
		t.Fatalf("a refused update changed %s: %s", target, describe(obj))
	}
	err = update("leave with a reason", func(m *v1alpha1.EtcdMember) {
		annotate(v1alpha1.AnnotationLeaveReason, "unreachable since a test said so")(m)
		m.Spec.Leave = true
	})
	if err != nil {
		t.Errorf("an agent's leave with the reason annotation was refused: %v", err)
	}
	e.waitFor(target, "Left=True/Removed", removedByUs)
}

// TestReappliedLeaveSparesTheRejoinedMember: a leave names its member. After the node re-joined
// under the same name, re-applying the stored request (a late automation patch, a GitOps sync)
// removes nothing, and the Left condition says why.
func TestReappliedLeaveSparesTheRejoinedMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	target := nonLeaders(e)[0]
	oldID := target.IDHex()
	if run := e.plugin("leave", target.Name, "--timeout", "45s"); run.Code != 0 {
		t.Fatalf("leave: %s", run.Output())
	}
	if stored := e.get(target.Name); stored.Spec.MemberID != oldID {
		t.Fatalf("the plugin's request does not name member %s: spec %+v", oldID, stored.Spec)
	}

	e.cluster.Rejoin(t, target, false)
	obj := e.waitFor(target.Name, "taken over by the re-joined member", func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == target.IDHex() && joined(m)
	})
	if obj.Spec.Leave || obj.Spec.MemberID != "" {
		t.Fatalf("take-over kept the earlier request: spec %+v", obj.Spec)
	}

	e.kubectl("patch", "etcdmembers.etcdmember.io", target.Name, "--type", "merge", "-p",
		`{"spec":{"leave":true,"memberID":"`+oldID+`"}}`)
	obj = e.waitFor(target.Name, "Left=False/MemberMismatch", leftReason(v1alpha1.ReasonMemberMismatch))
	if msg := condition(obj, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, oldID) || !strings.Contains(msg, target.IDHex()) {
		t.Errorf("the reason does not name both members: %q", msg)
	}
	e.holds(target.Name, "the re-joined member stays", 3*time.Second, joined)
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("the re-joined %s was removed by a request for its earlier member", target.Name)
	}
}

// TestProbeKnowsWhoAnswered: a member whose recorded client URL another member answers on (a VIP,
// a reused address) is not counted healthy on that answer. Here the member "impostor" publishes
// the leading agent's member's URL and is then killed: counted healthy, the guard would allow a
// removal that leaves one running voter of two.
func TestProbeKnowsWhoAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, separateStorage: true})
	others := nonLeaders(e)
	impostor, target := others[0], others[1]
	stays := e.cluster.Member(e.leaderAgent())

	impostor.AdvertiseClientURL(stays.ClientURL())
	impostor.Restart(t)
	obj := e.waitFor(impostor.Name, "Healthy=False/AnsweredByOther", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonAnsweredByOther)
	})
	if msg := condition(obj, v1alpha1.ConditionHealthy).Message; !strings.Contains(msg, stays.IDHex()) {
		t.Errorf("the Healthy message does not name the member that answered (%s): %q", stays.IDHex(), msg)
	}

	impostor.Kill(t)
	e.leave(target.Name)
	refused := e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	if msg := condition(refused, v1alpha1.ConditionLeft).Message; !strings.Contains(msg, "answered by member "+stays.IDHex()) {
		t.Errorf("the guard's numbers do not say why %s was not counted: %q", impostor.Name, msg)
	}
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("%s was removed while the only other running voter was %s", target.Name, stays.Name)
	}
}
