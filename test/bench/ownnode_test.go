//go:build bench

package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// ownNodeRounds is how many rounds the ownnode section runs; each round kills etcd once on the
// leading agent's node and once on another node, so that every row has ownNodeRounds samples of
// each kind. A cycle costs about 22 s, most of it the wait for the probe round to kill at, the
// re-join and the probe round that sees the member back.
const ownNodeRounds = 5

// ownNodeRoundsEnv overrides ownNodeRounds, to take more samples of the section alone:
// BENCH_OWNNODE_ROUNDS=10 go test -tags bench -run 'TestBench/ownnode' ./test/bench/
const ownNodeRoundsEnv = "BENCH_OWNNODE_ROUNDS"

// ownNodeMaxGoal bounds each of the section's rows of the leading agent's node at max, and
// ownNodeRatioGoal its p50 against the same row of another node.
const (
	ownNodeMaxGoal   = 15 * time.Second
	ownNodeRatioGoal = 1.5
)

// ownNodeAgentArgs log at debug level, so that the leader says when a probe or a member-list read
// failed, with timestamps to the nanosecond (the default is whole seconds), for the breakdown.
var ownNodeAgentArgs = []string{"--zap-log-level=1", "--zap-time-encoding=rfc3339nano"}

// ownNodeSample is one kill of a member's etcd and what followed; every instant is on this
// machine's clock, the agents' logs included.
type ownNodeSample struct {
	// leaderNode: the killed member is the leading agent's own; otherwise one whose agent does not
	// lead. Neither leads etcd when it is killed.
	leaderNode bool
	// victim is the killed member, other the healthy one whose leave is refused.
	victim, other string
	// phase is how long after the start of a probe round the kill came.
	phase time.Duration
	// killed is just before the SIGKILL; asked is when the patch of other's leave, sent right
	// after the kill, was accepted.
	killed, asked time.Time
	// down and refused are when watches opened before the kill saw the victim's Healthy=False and
	// other's Left=False/QuorumAtRisk.
	down, refused time.Time
	// request is when the patch of the victim's own leave was sent, once the refusal was seen and
	// cancelled: the leader acts on the apiserver's watch event, which can arrive well before the
	// patch's own answer does under load. gone is the first member list without the victim after
	// it (1 ms poll through other).
	request, gone time.Time
	// What the agents' logs say (the zero time when no line says it): the leader's first probe of
	// the victim that failed, its first failed member-list read, its first refusal, all after the
	// kill; the hand-over for the victim's removal and the next "Became leader" (the leading
	// agent's node only); the start of the removing reconcile and its log line once MemberRemove
	// answered.
	failedProbe, listFailed, refusing time.Time
	handOver, newLeader               time.Time
	removeStart, removed              time.Time
}

// benchOwnNode measures how soon a member's etcd failing is acted upon when that member is the
// leading agent's own and when it is another's, interleaved, at the production defaults: its
// object's Healthy=False, the refusal of a leave it makes unsafe, and the leave of the failed
// member itself. The apiserver stores on an etcd of its own, as in the e2e test of the same
// failure, so that killing a member never touches the API the bench reads through.
func benchOwnNode(t *testing.T, r *results) {
	rounds := runsFromEnv(t, ownNodeRoundsEnv, ownNodeRounds)
	e := newEnvWith(t, envOptions{size: 3, separateStorage: true}, append(append([]string{}, productionTimings...), ownNodeAgentArgs...)...)
	e.waitServing()
	// The same phases for both kinds, spread evenly over one probe interval and drawn in an order
	// of their own, so that each kind is killed as often early as late in the cycle and neither
	// meets the machine's drift at one phase only.
	probe := agent.DefaultOptions().ProbeInterval
	phases := make([]time.Duration, rounds)
	for i, k := range rand.New(rand.NewPCG(1, 2)).Perm(rounds) {
		phases[i] = time.Duration((float64(k) + 0.5) / float64(rounds) * float64(probe))
	}
	// Every cycle of the leading agent's node leaves a new leader behind; swapping the pair in odd
	// rounds puts either kind as often right after such a cycle.
	var samples []ownNodeSample
	for i := range rounds {
		kinds := []bool{true, false}
		if i%2 == 1 {
			kinds = []bool{false, true}
		}
		for _, leaderNode := range kinds {
			s := e.ownNodeCycle(leaderNode, phases[i])
			t.Logf("round %d/%d, %s (%s killed at +%s in the round, %s's leave refused): %s", i+1, rounds, whoseName(leaderNode),
				s.victim, s.phase.Round(time.Millisecond), s.other, s.summary())
			samples = append(samples, s)
		}
	}
	r.ownNode = samples
	// A missed goal's breakdown may need more of the agents' logs than the samples keep.
	for _, f := range ownNodeFigures(samples) {
		if !f.maxMet() || !f.ratioMet() {
			e.keepAgentLogs("ownnode")
			break
		}
	}
}

// summary is the log's note on one cycle, with its breakdown (ownNodeSteps).
func (s ownNodeSample) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Healthy=False %s after the kill, QuorumAtRisk %s after it, own leave gone %s after the request",
		s.down.Sub(s.killed).Round(time.Millisecond), s.refused.Sub(s.killed).Round(time.Millisecond), s.gone.Sub(s.request).Round(time.Millisecond))
	for _, step := range ownNodeSteps {
		if d, ok := s.span(step.start, step.end); ok && step.applies(s.leaderNode) {
			fmt.Fprintf(&b, "\n\t%s: %s ms", step.what, num(millis(d)))
		}
	}
	return b.String()
}

// ownNodeCycle kills the etcd of one member (the leading agent's own, or another's) at phase
// after the start of a probe round, asks at once for the leave of a healthy member that would
// leave one healthy voter of two, and times the failure's Healthy=False and the leave's refusal;
// then cancels that leave, asks for the killed member's own and times it until the member is gone.
// The member is then re-joined and every object seen Healthy=True/Serving before the next cycle.
func (e *env) ownNodeCycle(leaderNode bool, phase time.Duration) ownNodeSample {
	e.t.Helper()
	// The victim must not lead etcd: an election would add to its figures alone. Moving etcd's
	// leadership away changes what the next probe round sees, and the reconciles that follow it
	// are let pass before the round the kill is timed from.
	movedLeader := leaderNode && e.cluster.Leader(e.t) == e.cluster.Member(e.leaderAgent())
	victim, stay := e.pickNodeTarget(leaderNode)
	other := stay
	if !leaderNode {
		// stay is the leading agent's own member, whose leave would be handed over rather than
		// judged; the third member's is judged by the leader at once.
		for _, m := range e.cluster.Members() {
			if m != victim && m != stay {
				other = m
			}
		}
	}
	e.waitRemovable()
	ctx, cancel := context.WithTimeout(context.Background(), 3*settle)
	defer cancel()
	if movedLeader {
		e.probeRound(ctx)
	}
	s := ownNodeSample{leaderNode: leaderNode, victim: victim.Name, other: other.Name}
	idHex := victim.IDHex()
	down := e.watchMember(ctx, victim.Name, func(obj *v1alpha1.EtcdMember) bool {
		c := status.Get(obj, v1alpha1.ConditionHealthy)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	refused := e.watchMember(ctx, other.Name, func(obj *v1alpha1.EtcdMember) bool {
		return status.HasReason(obj, v1alpha1.ConditionLeft, v1alpha1.ReasonQuorumAtRisk)
	})
	round := e.probeRound(ctx)
	time.Sleep(time.Until(round.Add(phase)))
	s.killed = time.Now()
	s.phase = s.killed.Sub(round)
	victim.Kill(e.t)
	e.patchLeave(ctx, other.Name)
	s.asked = time.Now()
	s.down = await(ctx, e.t, down, victim.Name+" Healthy=False").at
	s.refused = await(ctx, e.t, refused, other.Name+" Left=False/QuorumAtRisk").at
	if listed, err := inMemberList(ctx, e.etcd[other.Name], other.ID()); err != nil || !listed {
		e.t.Fatalf("%s: not in etcd's member list after its leave was refused (err %v)", other.Name, err)
	}

	e.cancelLeave(ctx, other.Name)
	gone := goneAt(ctx, e.etcd[other.Name], victim.ID())
	s.request = time.Now()
	e.patchLeave(ctx, victim.Name)
	s.gone = await(ctx, e.t, gone, victim.Name+" gone from etcd")
	e.waitMember(victim.Name, "recorded gone", func(obj *v1alpha1.EtcdMember) bool {
		return obj.Status.MemberID == idHex && obj.RecordedGone()
	})
	e.ownNodeLogs(&s, idHex)

	e.rejoin(victim)
	e.waitServing()
	return s
}

// cancelLeave sets the member's spec.leave back to false and waits until the leader has dropped
// the refusal from its status.
func (e *env) cancelLeave(ctx context.Context, name string) {
	e.t.Helper()
	callCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	obj := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.client.Patch(callCtx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"leave":false}}`))); err != nil {
		e.t.Fatalf("patch spec.leave of %s back to false: %v", name, err)
	}
	e.waitMember(name, "leave cancelled", func(obj *v1alpha1.EtcdMember) bool {
		return !obj.Spec.Leave && obj.Status.ObservedGeneration == obj.Generation && status.Get(obj, v1alpha1.ConditionLeft) == nil
	})
}

// waitServing waits until every member's object says Healthy=True/Serving with its current
// member ID, and the leader counts every object and runs no reconcile. The leave queue's depth is
// not waited for: a leader in its second term can show workqueue_depth{name="leave"} at 1 for good
// with nothing left to do (seen twice here: the items its first term's queue held when the term
// ended stay counted).
func (e *env) waitServing() {
	e.t.Helper()
	members := e.cluster.Members()
	for _, m := range members {
		e.waitMember(m.Name, "Healthy=True/Serving", func(obj *v1alpha1.EtcdMember) bool {
			return obj.Status.MemberID == m.IDHex() && status.HasReason(obj, v1alpha1.ConditionHealthy, v1alpha1.ReasonServing)
		})
	}
	leader := e.agents[e.leaderAgent()]
	var seen string
	err := framework.Poll(settle, 200*time.Millisecond, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		f, err := scrapeURL(ctx, leader.MetricsURL())
		if err != nil {
			return false, err
		}
		objects, active := f.sum("etcdmember_objects"), f.sum("controller_runtime_active_workers", "controller", "leave")
		seen = fmt.Sprintf("objects %s, active leave workers %s", num(objects), num(active))
		return objects == float64(len(members)) && active == 0, nil
	}))
	if err != nil {
		e.t.Fatalf("leader %s did not settle on %d objects within %s: %s", leader.Name, len(members), settle, seen)
	}
}

// probeRoundPoll is how often probeRound reads the members' counters: the resolution of a
// kill's phase.
const probeRoundPoll = 50 * time.Millisecond

// probeRound waits for the start of the leader's next probe round and returns when it saw it.
// The watcher reads etcd's alarms once per round, as the round's probes go out, and nothing else
// calls AlarmList (the apiserver stores elsewhere): the first rise of the Maintenance/Alarm calls
// started, summed over the members, is a round starting. In a steady cluster rounds come only
// from the watcher's ticker, every --probe-interval.
func (e *env) probeRound(ctx context.Context) time.Time {
	e.t.Helper()
	before, err := e.alarmCalls(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	tick := time.NewTicker(probeRoundPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			e.t.Fatalf("no probe round seen: %v", ctx.Err())
		case <-tick.C:
		}
		n, err := e.alarmCalls(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if n > before {
			return time.Now()
		}
	}
}

// alarmCalls sums grpc_server_started_total of Maintenance/Alarm over every member, read at once.
// The lines are scanned rather than parsed: a member's page is about 160 kB, read every 50 ms.
func (e *env) alarmCalls(ctx context.Context) (float64, error) {
	members := e.cluster.Members()
	counts := make([]float64, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { counts[i], errs[i] = startedCalls(ctx, m.ClientURL()+"/metrics", "Alarm") })
	}
	wg.Wait()
	var n float64
	for i, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("etcd %s: %w", members[i].Name, err)
		}
		n += counts[i]
	}
	return n, nil
}

// startedCalls reads the gRPC calls of method started on a member, from its /metrics at url.
func startedCalls(ctx context.Context, url, method string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return sumCounterLines(resp.Body, "grpc_server_started_total{", `grpc_method="`+method+`"`)
}

// sumCounterLines adds up the values of the exposition lines that start with prefix and contain
// match.
func sumCounterLines(r io.Reader, prefix, match string) (float64, error) {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	var n float64
	for lines.Scan() {
		line := lines.Bytes()
		if !bytes.HasPrefix(line, []byte(prefix)) || !bytes.Contains(line, []byte(match)) {
			continue
		}
		fields := strings.Fields(string(line))
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", line, err)
		}
		n += v
	}
	return n, lines.Err()
}

// ownNodeLogs fills in what the agents' logs say of the cycle of member idHex.
func (e *env) ownNodeLogs(s *ownNodeSample, idHex string) {
	e.t.Helper()
	first := func(at *time.Time, l logEntry, after time.Time) {
		if l.TS.After(after) && (at.IsZero() || l.TS.Before(*at)) {
			*at = l.TS
		}
	}
	var became []time.Time
	for _, a := range e.agents {
		for _, l := range e.agentLog(a) {
			switch {
			case l.Msg == "Member unhealthy" && l.MemberID == idHex:
				first(&s.failedProbe, l, s.killed)
			case l.Msg == "Reading the member list failed":
				first(&s.listFailed, l, s.killed)
			case l.Msg == "Refusing leave":
				first(&s.refusing, l, s.killed)
			case l.Msg == "Handing leadership over to remove own member" && l.MemberID == idHex:
				first(&s.handOver, l, s.killed)
			case l.Msg == "Became leader" && l.TS.After(s.killed):
				became = append(became, l.TS)
			case l.Msg == "Removed member from etcd" && l.MemberID == idHex && l.Steps != nil:
				s.removed = l.TS
				s.removeStart = l.TS.Add(-time.Duration(l.Steps["removed"] * float64(time.Millisecond)))
			}
		}
	}
	if s.removed.IsZero() {
		e.t.Fatalf("%s: no agent logged the removal of member %s with its steps", whoseName(s.leaderNode), idHex)
	}
	if s.leaderNode && s.handOver.IsZero() {
		e.t.Fatalf("%s: no agent logged handing over for member %s", whoseName(s.leaderNode), idHex)
	}
	if !s.handOver.IsZero() {
		for _, at := range became {
			if at.After(s.handOver) && (s.newLeader.IsZero() || at.Before(s.newLeader)) {
				s.newLeader = at
			}
		}
	}
}
