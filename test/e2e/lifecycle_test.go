package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// probeInterval is the --probe-interval framework.TestAgentArgs gives every agent.
const probeInterval = 2 * time.Second

// waitForMember polls every object until the one recording member id satisfies ok. A learner that
// was seen before its agent registered it is discovered under another name, so tests that add
// members look them up by ID.
func (e *env) waitForMember(id uint64, what string, ok func(*v1alpha1.EtcdMember) bool) *v1alpha1.EtcdMember {
	e.t.Helper()
	idHex := fmt.Sprintf("%x", id)
	var last *v1alpha1.EtcdMember
	err := framework.Poll(settle, retryEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		var list v1alpha1.EtcdMemberList
		if err := e.client.List(ctx, &list); err != nil {
			return false, err
		}
		m := list.FindByMemberID(idHex)
		if m == nil {
			return false, nil
		}
		last = m
		return ok(m), nil
	}))
	if err != nil {
		e.t.Fatalf("member %s: %s not reached within %s; last status: %s", idHex, what, settle, describe(last))
	}
	return last
}

// joinLearner runs `etcdmember join` for a new member name and returns it, not started, with the
// settings file and the member ID etcd gave it.
func (e *env) joinLearner(name string) (*framework.Member, string, uint64) {
	e.t.Helper()
	pending := e.cluster.NewPendingMember(e.t, name)
	file := filepath.Join(e.t.TempDir(), name+".env")
	_, stderr, code := runJoin(e.t, e.cluster, e.cluster.Endpoints(), "--name", name, "--peer-urls", pending.PeerURL(), "--output", file)
	if code != 0 {
		e.t.Fatalf("join %s: exit %d: %s", name, code, stderr)
	}
	added := membersWithPeerURL(e.t, e.cluster.Client(e.t), pending.PeerURL())
	if len(added) != 1 || !added[0].IsLearner {
		e.t.Fatalf("etcd records %v for %s, want one learner", added, pending.PeerURL())
	}
	return pending, file, added[0].ID
}

// TestLearnerJoinedIsPromoted: the full way in. A member joined with `etcdmember join` and started
// with the settings it wrote is promoted by the leader once etcd lets it, the object shows the
// learner's progress and then a healthy voter, and an Event records the promotion.
func TestLearnerJoinedIsPromoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	node4, file, id := e.joinLearner("node-4")
	node4.StartWithSettings(t, framework.ReadEnvFile(t, file))
	e.agents["node-4"] = framework.StartAgent(t, node4, e.api, "--kubeconfig="+e.agentKubeconfig)

	m := e.waitForMember(id, "promoted and healthy", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionPromoted, metav1.ConditionTrue, v1alpha1.ReasonPromoted) &&
			!m.Status.IsLearner && hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
	})
	if added := membersWithPeerURL(t, e.cluster.Client(t), node4.PeerURL()); len(added) != 1 || added[0].IsLearner {
		t.Fatalf("object says promoted, etcd lists %v", added)
	}
	if h := m.Status.Health; h == nil || !h.Reachable || h.RaftTerm == 0 || h.RaftIndex == 0 || h.DBSizeBytes == 0 || h.LastProbeTime.IsZero() {
		t.Errorf("status.health = %+v, want a reachable member with raft term, index, DB size and probe time", h)
	}
	ev := e.waitEvent(m.Name, "Normal", v1alpha1.ReasonPromoted)
	if !strings.Contains(ev.Note, fmt.Sprintf("%x", id)) {
		t.Errorf("Promoted Event %q does not name member %x", ev.Note, id)
	}

	// Exactly one object is marked leader, the one etcd names, and kubectl shows the columns.
	leaderID := e.cluster.Leader(t).IDHex()
	var list v1alpha1.EtcdMemberList
	e.retry("list", func(ctx context.Context) error { return e.client.List(ctx, &list) })
	var leaders []string
	for _, o := range list.Items {
		if o.Status.Health != nil && o.Status.Health.Leader {
			leaders = append(leaders, o.Status.MemberID)
		}
	}
	if len(leaders) != 1 {
		// Leadership may have moved between the probe and now; one probe later it agrees.
		time.Sleep(2 * probeInterval)
		leaderID = e.cluster.Leader(t).IDHex()
		e.retry("list", func(ctx context.Context) error { return e.client.List(ctx, &list) })
		leaders = nil
		for _, o := range list.Items {
			if o.Status.Health != nil && o.Status.Health.Leader {
				leaders = append(leaders, o.Status.MemberID)
			}
		}
	}
	if len(leaders) != 1 || leaders[0] != leaderID {
		t.Errorf("objects marked leader: %v, want exactly etcd's leader %s", leaders, leaderID)
	}
	out := e.kubectl("get", "etcdmembers")
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if !slices.Contains(header, "HEALTHY") || !slices.Contains(header, "LEADER") {
		t.Errorf("kubectl get etcdmembers header %v, want HEALTHY and LEADER columns:\n%s", header, out)
	}
}

// stalledLearnerEvicted: a learner that never starts is removed after
// --learner-stall-timeout with an Event, and the next join is no longer blocked by etcd's one
// learner limit.
func stalledLearnerEvicted(t *testing.T) {
	const stall = 12 * time.Second
	e := newEnv(t, envConfig{size: 3, agentArgs: []string{fmt.Sprintf("--learner-stall-timeout=%s", stall)}})
	_, _, id := e.joinLearner("node-4")

	// etcd allows one learner: while node-4 waits, another join is refused.
	node5 := e.cluster.NewPendingMember(t, "node-5")
	_, stderr, code := runJoin(t, e.cluster, e.cluster.Endpoints(), "--name", "node-5", "--peer-urls", node5.PeerURL())
	if code == 0 || !strings.Contains(stderr, "too many learner members") {
		t.Fatalf("second join while a learner waits: exit %d, stderr %q; want etcd's learner limit", code, stderr)
	}

	m := e.waitForMember(id, "discovered as a learner that has not started", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonNotStarted) &&
			hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonNotStarted)
	})
	seen := time.Now()
	if !strings.Contains(condition(m, v1alpha1.ConditionPromoted).Message, "--learner-stall-timeout") {
		t.Errorf("Promoted message %q does not say when the learner is evicted", condition(m, v1alpha1.ConditionPromoted).Message)
	}
	m = e.waitForMember(id, "evicted", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonEvicted)
	})
	if waited := time.Since(seen); waited > stall+5*time.Second {
		t.Errorf("evicted %s after the learner was first shown, want about --learner-stall-timeout %s", waited, stall)
	}
	if !hasCondition(m, v1alpha1.ConditionPromoted, metav1.ConditionFalse, v1alpha1.ReasonStalled) {
		t.Errorf("Promoted after eviction: %s", describe(m))
	}
	if e.etcdMemberIDs()[id] {
		t.Fatalf("object says evicted, etcd still lists %x", id)
	}
	e.waitEvent(m.Name, "Warning", v1alpha1.ReasonEvicted)

	if _, stderr, code := runJoin(t, e.cluster, e.cluster.Endpoints(), "--name", "node-5", "--peer-urls", node5.PeerURL()); code != 0 {
		t.Fatalf("join after the eviction: exit %d, stderr %q", code, stderr)
	}
}

// healthFollowsSIGSTOP: a stopped member turns Healthy=False within two probe intervals and
// back after SIGCONT, and the Removable pre-flight of the others follows. The apiserver stores in
// an etcd of its own, as a kubeadm apiserver talks to its local member only: ours balances over
// every member, and its requests stuck on the stopped one would measure the apiserver, not us.
func healthFollowsSIGSTOP(t *testing.T) {
	e := newEnv(t, envConfig{size: 3, separateStorage: true})
	// The leading agent reads the member list through its own member; stop another.
	leader := e.leaderAgent()
	var victim *framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != leader {
			victim = m
			break
		}
	}
	e.waitFor(victim.Name, "healthy", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
	})

	start := time.Now()
	victim.Pause(t)
	m := e.waitFor(victim.Name, "unhealthy", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})
	took := time.Since(start)
	t.Logf("Healthy=False %s after SIGSTOP", took)
	if took > 2*probeInterval {
		t.Errorf("Healthy=False %s after SIGSTOP, want within two probe intervals (%s)", took, 2*probeInterval)
	}
	if m.Status.Health == nil || m.Status.Health.Reachable {
		t.Errorf("status.health of the stopped member = %+v, want reachable=false", m.Status.Health)
	}
	e.waitFor(leader, "not removable while another voter is down", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	})
	e.waitEvent(victim.Name, "Warning", v1alpha1.ReasonUnreachable)

	start = time.Now()
	victim.Resume(t)
	e.waitFor(victim.Name, "healthy again", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
	})
	took = time.Since(start)
	t.Logf("Healthy=True %s after SIGCONT", took)
	if took > 2*probeInterval {
		t.Errorf("Healthy=True %s after SIGCONT, want within two probe intervals (%s)", took, 2*probeInterval)
	}
	e.waitFor(leader, "removable again", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept)
	})
}

// TestNoSpaceAlarmShows: a NOSPACE alarm, raised through etcd's own alarm API and refusing writes,
// shows in the member's status and metrics, and clears when disarmed. The apiserver stores in an
// etcd of its own: a NOSPACE cluster refuses the very status write that would report it.
func TestNoSpaceAlarmShows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, separateStorage: true})
	victim := e.cluster.Member("node-2")
	cli := e.cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: victim.ID(), Alarm: etcdserverpb.AlarmType_NOSPACE,
	})
	if err != nil {
		t.Fatalf("raising NOSPACE: %v", err)
	}
	if _, err := cli.Put(ctx, "after-nospace", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("put with NOSPACE raised: %v, want %v", err, rpctypes.ErrNoSpace)
	}

	m := e.waitFor(victim.Name, "NOSPACE shown", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonAlarm)
	})
	if m.Status.Health == nil || !slices.Equal(m.Status.Health.Alarms, []string{"NOSPACE"}) {
		t.Errorf("status.health = %+v, want alarms [NOSPACE]", m.Status.Health)
	}
	if msg := condition(m, v1alpha1.ConditionHealthy).Message; !strings.Contains(msg, "alarm disarm") {
		t.Errorf("Healthy message %q does not tell the operator how to clear it", msg)
	}
	want := fmt.Sprintf(`etcdmember_member_alarm{alarm="NOSPACE",member=%q,member_id="%x"} 1`, victim.EtcdName(), victim.ID())
	leaderMetrics := e.agents[e.leaderAgent()].MetricsURL()
	if _, body := httpGet(t, leaderMetrics); !strings.Contains(body, want) {
		t.Errorf("leader's metrics lack %s", want)
	}

	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: victim.ID(), Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("disarming NOSPACE: %v", err)
	}
	m = e.waitFor(victim.Name, "alarm cleared", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
	})
	if m.Status.Health == nil || len(m.Status.Health.Alarms) != 0 {
		t.Errorf("status.health after disarm = %+v, want no alarms", m.Status.Health)
	}
}

// removeAfter is the --remove-unreachable-after of the dead-member policy tests.
const removeAfter = 5 * time.Second

// TestUnreachableVoterRemoved: with --remove-unreachable-after, a killed voter is asked to leave
// (spec.leave, an annotation and an Event saying why) and removed through the quorum guard; the
// next killed voter is not, because fewer than --min-voters would remain.
func TestUnreachableVoterRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 4, agentArgs: []string{
		fmt.Sprintf("--remove-unreachable-after=%s", removeAfter), "--min-voters=3",
	}})
	victims := e.notLeading(2)

	dead := victims[0]
	e.agents[dead.Name].Kill(t)
	dead.Kill(t)
	e.waitRemovedByPolicy(dead)

	// Three voters are left, the --min-voters floor: the next dead one stays, visibly unhealthy.
	next := victims[1]
	e.agents[next.Name].Kill(t)
	next.Kill(t)
	e.waitFor(next.Name, "unreachable", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})
	e.holds(next.Name, "not asked to leave below --min-voters", 3*removeAfter, func(m *v1alpha1.EtcdMember) bool {
		return !m.Spec.Leave && hasCondition(m, v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	})
	if !e.etcdMemberIDs()[next.ID()] {
		t.Fatalf("member %s was removed below --min-voters", next.Name)
	}
}

// TestFrozenVoterRemoved: a voter frozen with SIGSTOP, its agent too (a hung machine that still
// answers TCP), keeps its raft connections open, so etcd still counts it an active peer; but
// etcd's leader receives nothing from it, and the policy asks it to leave and removes it. Judged
// by etcd_network_active_peers alone, it was kept for as long as it stayed frozen. The apiserver
// stores in an etcd of its own: its etcd client keeps sending to a frozen member whose connection
// looks open, and its requests would time out for reasons that are not the agents'.
func TestFrozenVoterRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 4, separateStorage: true, agentArgs: []string{
		fmt.Sprintf("--remove-unreachable-after=%s", removeAfter), "--min-voters=3",
	}})
	frozen := e.notLeading(1)[0]
	e.agents[frozen.Name].Pause(t)
	frozen.Pause(t)
	ev := e.waitRemovedByPolicy(frozen)
	if !strings.Contains(ev.Note, "received nothing from it") {
		t.Errorf("%s Event %q does not say etcd's leader received nothing from the member", v1alpha1.ReasonUnreachableMember, ev.Note)
	}
}

// waitRemovedByPolicy waits until the dead-member policy has asked member to leave and removed
// it: the object says so with the request and its reason, etcd no longer lists it, and the Warning
// that explains the request, which it returns, was written.
func (e *env) waitRemovedByPolicy(member *framework.Member) eventsv1.Event {
	e.t.Helper()
	id := member.ID()
	m := e.waitFor(member.Name, "removed by the policy", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)
	})
	if !m.Spec.Leave || !strings.Contains(m.Annotations[v1alpha1.AnnotationLeaveReason], "--remove-unreachable-after") {
		e.t.Errorf("removed member: leave=%v annotations=%v, want spec.leave and the reason annotation", m.Spec.Leave, m.Annotations)
	}
	if e.etcdMemberIDs()[id] {
		e.t.Fatalf("object says removed, etcd still lists %x", id)
	}
	return e.waitEvent(member.Name, "Warning", v1alpha1.ReasonUnreachableMember)
}

// TestUnreachableNotRemovedWithoutQuorum: with two of three voters dead the policy removes
// nothing (the floor is set to 1 so only the guard stands in the way); once one comes back and
// the cluster has quorum again, the one still dead is removed through the guard. The apiserver
// stores in an etcd of its own so it outlives the lost quorum.
func TestUnreachableNotRemovedWithoutQuorum(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, separateStorage: true, agentArgs: []string{
		fmt.Sprintf("--remove-unreachable-after=%s", removeAfter), "--min-voters=1",
	}})
	victims := e.notLeading(2)
	for _, v := range victims {
		v.Kill(t)
	}
	survivor := e.cluster.Member(e.leaderAgent())
	err := framework.Hold(3*removeAfter, pollEvery, func(context.Context) (bool, error) {
		for _, v := range victims {
			if m := e.get(v.Name); m.Spec.Leave {
				return false, fmt.Errorf("%s asked to leave while the cluster has no quorum: %s", v.Name, describe(m))
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(serializableMembers(t, survivor)); n != 3 {
		t.Fatalf("%s lists %d members while quorum was lost, want all 3", survivor.Name, n)
	}

	back, still := victims[0], victims[1]
	back.Start(t)
	e.waitFor(still.Name, "removed once quorum is back", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)
	})
	if m := e.get(back.Name); m.Spec.Leave {
		t.Errorf("%s, back in time, was asked to leave: %s", back.Name, describe(m))
	}
}

// notLeading returns n members whose agents do not hold the leader Lease: the leading agent reads
// the member list through its own member.
func (e *env) notLeading(n int) []*framework.Member {
	e.t.Helper()
	leader := e.leaderAgent()
	var out []*framework.Member
	for _, m := range e.cluster.Members() {
		if m.Name != leader && len(out) < n {
			out = append(out, m)
		}
	}
	return out
}

// serializableMembers reads the member list from m alone, which works without quorum.
func serializableMembers(t *testing.T, m *framework.Member) []*etcdserverpb.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := m.Client(t).MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("serializable member list from %s: %v", m.Name, err)
	}
	return resp.Members
}
