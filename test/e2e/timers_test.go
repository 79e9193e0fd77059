package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// alarmThenUnreachableWaitsFullTime: a voter under a NOSPACE alarm (Healthy=False/Alarm) for
// twice --remove-unreachable-after, then killed, is asked to leave only once it has been
// unreachable for --remove-unreachable-after, not at the first probe that finds it unreachable:
// the Healthy condition's lastTransitionTime, which did not move when the reason changed, says
// it has been unhealthy far longer. The apiserver stores in an etcd of its own, which the alarm
// does not reach.
func alarmThenUnreachableWaitsFullTime(t *testing.T) {
	const after = 6 * time.Second
	e := newEnv(t, envConfig{size: 3, separateStorage: true, agentArgs: []string{
		fmt.Sprintf("--remove-unreachable-after=%s", after), "--min-voters=2",
	}})
	victim := e.notLeading(1)[0]
	cli := e.cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: victim.ID(), Alarm: etcdserverpb.AlarmType_NOSPACE,
	}); err != nil {
		t.Fatalf("raising NOSPACE: %v", err)
	}
	m := e.waitFor(victim.Name, "Healthy=False/Alarm", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonAlarm)
	})
	unhealthySince := condition(m, v1alpha1.ConditionHealthy).LastTransitionTime
	time.Sleep(2 * after)

	e.agents[victim.Name].Kill(t)
	victim.Kill(t)
	m = e.waitFor(victim.Name, "Healthy=False/Unreachable", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})
	if got := condition(m, v1alpha1.ConditionHealthy).LastTransitionTime; !got.Equal(&unhealthySince) {
		t.Fatalf("Healthy's lastTransitionTime moved from %s to %s with the reason: the test no longer shows what it is for", unhealthySince, got)
	}
	// The leader started its clock no earlier than it wrote Unreachable, which was before we saw it.
	e.holds(victim.Name, "not asked to leave before it was unreachable for "+after.String(), after-time.Second, func(m *v1alpha1.EtcdMember) bool {
		return !m.Spec.Leave
	})
	m = e.waitFor(victim.Name, "asked to leave by the dead-member policy", func(m *v1alpha1.EtcdMember) bool {
		return m.Spec.Leave
	})
	if why := m.Annotations[v1alpha1.AnnotationLeaveReason]; !strings.Contains(why, "--remove-unreachable-after") {
		t.Errorf("leave-reason annotation %q does not name the policy", why)
	}

	// The removal itself needs the intent write that NOSPACE refuses: once the alarm is gone, the
	// request goes through the guard (two healthy voters of two remain) and completes.
	ctx, cancel = context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: victim.ID(), Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("disarming NOSPACE: %v", err)
	}
	e.waitFor(victim.Name, "removed", removedByUs)
}
