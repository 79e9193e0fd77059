//go:build bench

package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// leaderLeaveCycles is how often each way of removing etcd's leader runs. A cycle costs about
// 20 s, nearly all of it the re-join and the wait before etcd lets a voter go again.
const leaderLeaveCycles = 6

// leaderLeaveCyclesEnv overrides leaderLeaveCycles, to take more samples of the section alone:
// BENCH_LEADER_CYCLES=10 go test -tags bench -run 'TestBench/leader' ./test/bench/
const leaderLeaveCyclesEnv = "BENCH_LEADER_CYCLES"

// writeTimeout bounds each write of the load, as a client's per-request deadline does.
const writeTimeout = 5 * time.Second

// Before the removal the load runs for loadLead, so that every cycle has a steady start to
// compare with; after etcd's member list no longer has the member it runs for loadTail, past the
// removed member's own exit (etcd stops a removed member about a second after it applies its
// removal), so that whatever the removal cost the writers has ended inside the window.
const (
	loadLead = time.Second
	loadTail = 3 * time.Second
)

// The outage goal of the writer on the members that stay: the plugin's outage at most
// leaderOutageRatioGoal of the raw removal's at p50, and at most leaderOutageMaxGoal at max.
const (
	leaderOutageRatioGoal = 0.1
	leaderOutageMaxGoal   = 100 * time.Millisecond
)

// leaderLeaveMode is how etcd's leader is removed in one cycle.
type leaderLeaveMode int

const (
	// rawRemove is a MemberRemove of the leader through a member that stays.
	rawRemove leaderLeaveMode = iota
	// pluginLeave is `kubectl etcdmember leave` of the leader, a member whose agent does not lead.
	pluginLeave
	// pluginLeaveOwnNode is the same of the leading agent's own member: the agent hands its
	// leadership over first, then the next leader moves etcd's and removes it.
	pluginLeaveOwnNode
)

var leaderLeaveModes = []leaderLeaveMode{rawRemove, pluginLeave, pluginLeaveOwnNode}

func (m leaderLeaveMode) String() string {
	switch m {
	case rawRemove:
		return "raw MemberRemove of the leader"
	case pluginLeave:
		return "kubectl etcdmember leave of the leader (another node's)"
	default:
		return "kubectl etcdmember leave of the leader (the leading agent's node)"
	}
}

// writerKind is which endpoints a writer of the load talks to.
type writerKind int

const (
	// stayingWriter talks only to the members that stay: what it sees is the cluster's own outage.
	stayingWriter writerKind = iota
	// everyWriter talks to every member, as an apiserver with every member in --etcd-servers does:
	// its requests in flight on the member removed are part of what it sees.
	everyWriter
)

var writerKinds = []writerKind{stayingWriter, everyWriter}

func (w writerKind) String() string {
	if w == stayingWriter {
		return "writer on the members that stay"
	}
	return "writer on every member"
}

// write is one Put of the load: when it was sent, how long it took, how it ended and the member
// it went to ("" when it reached none).
type write struct {
	start time.Time
	took  time.Duration
	err   error
	to    string
}

// servedBy receives, through a call's context, the address of the member the call last went to.
type servedBy struct{ addr string }

type servedByKey struct{}

// notePeer is a gRPC interceptor that fills in the call's servedBy. It runs inside etcd's client
// retries, once per attempt, so the address is that of the attempt that ended the call.
func notePeer(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var p peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
	if s, ok := ctx.Value(servedByKey{}).(*servedBy); ok && p.Addr != nil {
		s.addr = p.Addr.String()
	}
	return err
}

func (w write) end() time.Time { return w.start.Add(w.took) }

// leaderLeaveSample is one removal of etcd's leader under the two writers.
type leaderLeaveSample struct {
	mode   leaderLeaveMode
	target string
	// action is when the leave or the MemberRemove was sent; gone when etcd's member list, read
	// through a member that stays, first lacked the target.
	action, gone time.Time
	writes       [2][]write
}

// outage is the longest time between two successful writes of one writer in the cycle.
func (s leaderLeaveSample) outage(w writerKind) time.Duration {
	var longest time.Duration
	var last time.Time
	for _, wr := range s.writes[w] {
		if wr.err != nil {
			continue
		}
		if !last.IsZero() {
			longest = max(longest, wr.end().Sub(last))
		}
		last = wr.end()
	}
	return longest
}

// failed counts the writes of one writer that ended with an error.
func (s leaderLeaveSample) failed(w writerKind) int {
	n := 0
	for _, wr := range s.writes[w] {
		if wr.err != nil {
			n++
		}
	}
	return n
}

// unanswered counts the writes of one writer that ended with their own deadline: nothing but the
// client's timeout answered them.
func (s leaderLeaveSample) unanswered(w writerKind) int {
	n := 0
	for _, wr := range s.writes[w] {
		if deadlineEnded(wr.err) {
			n++
		}
	}
	return n
}

// deadlineEnded tells whether a write ended with its own deadline, seen on either side: the
// client's context ran out, or the member, which gets the deadline with the gRPC call, saw it run
// out first and answered that the request timed out.
func deadlineEnded(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// ending names how a failed write ended, without the addresses and ports that differ each time.
func ending(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "its deadline"
	case deadlineEnded(err):
		return "its deadline, seen by the member (" + strconv.Quote(msg) + ")"
	case strings.Contains(msg, "raft: stopped"):
		return `"raft: stopped"`
	case strings.Contains(msg, "raft proposal dropped"):
		return `"raft proposal dropped"`
	case strings.Contains(msg, "error reading from server"), strings.Contains(msg, "transport is closing"), strings.Contains(msg, "connection reset"):
		return "the connection closed"
	}
	return strconv.Quote(msg)
}

// failedOn describes the failed writes of one writer by where they went, the member removed or
// one that stays, and how they ended, e.g. "the member removed: 2 (\"raft: stopped\"), ≤ 31 ms".
func (s leaderLeaveSample) failedOn(w writerKind, removed bool) (n int, longest time.Duration, endings map[string]int) {
	endings = map[string]int{}
	for _, wr := range s.writes[w] {
		if wr.err == nil || (wr.to == s.target) != removed {
			continue
		}
		n++
		longest = max(longest, wr.took)
		endings[ending(wr.err)]++
	}
	return n, longest, endings
}

// slow describes the writes of one writer that failed or took longer than the outage goal, with
// when they were sent relative to the action, for the log and the report's explanation.
func (s leaderLeaveSample) slow(w writerKind) []string {
	var out []string
	for _, wr := range s.writes[w] {
		if wr.err == nil && wr.took <= leaderOutageMaxGoal {
			continue
		}
		what := "ok"
		if wr.err != nil {
			what = wr.err.Error()
		}
		out = append(out, fmt.Sprintf("sent at %+dms to %s, took %s: %s", wr.start.Sub(s.action).Milliseconds(), cmp.Or(wr.to, "no member"), wr.took.Round(time.Millisecond), what))
	}
	return out
}

// benchLeaderLeave removes etcd's leader under a steady write load, by each leaderLeaveMode in
// turn, on a 3-member TLS cluster with the agents at their production defaults. The apiserver
// stores on an etcd of its own, so that the leave's own path (the patch, the agents' reads and
// status writes) never waits on the cluster whose leader goes.
func benchLeaderLeave(t *testing.T, r *results) {
	cycles := runsFromEnv(t, leaderLeaveCyclesEnv, leaderLeaveCycles)
	e := newEnvWith(t, envOptions{size: 3, tls: true, separateStorage: true}, productionTimings...)
	e.waitServing()
	for i := range cycles {
		for _, mode := range leaderLeaveModes {
			s := e.leaderLeaveOnce(mode)
			r.leaderLeave = append(r.leaderLeave, s)
			t.Logf("cycle %d/%d, %s of %s: gone %s after it was sent", i+1, cycles, mode, s.target, s.gone.Sub(s.action).Round(time.Millisecond))
			for _, w := range writerKinds {
				t.Logf("\t%s: outage %s, %d writes, %d failed%s", w, s.outage(w).Round(time.Millisecond), len(s.writes[w]), s.failed(w),
					strings.Join(append([]string{""}, s.slow(w)...), "\n\t\t"))
			}
		}
	}
	if slices.ContainsFunc(r.leaderLeave, func(s leaderLeaveSample) bool {
		return s.outage(stayingWriter) > leaderOutageMaxGoal && s.mode != rawRemove
	}) {
		e.keepAgentLogs("leader")
	}
}

// leaderLeaveOnce arranges etcd's leadership for mode, removes the leader under the two writers
// and brings it back.
func (e *env) leaderLeaveOnce(mode leaderLeaveMode) leaderLeaveSample {
	e.t.Helper()
	target := e.placeEtcdLeader(mode == pluginLeaveOwnNode)
	var stay []*framework.Member
	for _, m := range e.cluster.Members() {
		if m != target {
			stay = append(stay, m)
		}
	}
	e.waitServing()
	e.waitRemovable()
	s := leaderLeaveSample{mode: mode, target: target.Name}

	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	gone := goneAt(ctx, e.etcd[stay[0].Name], target.ID())
	stopLoad := make(chan struct{})
	note := grpc.WithChainUnaryInterceptor(notePeer)
	clients := [2]*clientv3.Client{e.cluster.ClientOf(e.t, stay, note), e.cluster.ClientOf(e.t, e.cluster.Members(), note)}
	names := map[string]string{}
	for _, m := range e.cluster.Members() {
		names[m.IP()] = m.Name
	}
	var wg sync.WaitGroup
	for _, w := range writerKinds {
		wg.Go(func() { s.writes[w] = writeLoad(ctx, stopLoad, clients[w], fmt.Sprintf("/bench/load/%d", w), names) })
	}
	time.Sleep(loadLead)

	left := make(chan error, 1)
	s.action = time.Now()
	if mode == rawRemove {
		callCtx, callCancel := context.WithTimeout(ctx, callTimeout)
		_, err := e.etcd[stay[0].Name].MemberRemove(callCtx, target.ID())
		callCancel()
		left <- err
	} else {
		go func() {
			run := e.api.Plugin(e.t, nil, nil, "leave", target.Name)
			if run.Code != 0 {
				left <- fmt.Errorf("kubectl etcdmember leave %s: exit %d: %s", target.Name, run.Code, run.Output())
				return
			}
			left <- nil
		}()
	}
	s.gone = await(ctx, e.t, gone, target.Name+" gone from etcd")
	time.Sleep(time.Until(s.gone.Add(loadTail)))
	close(stopLoad)
	wg.Wait()
	for _, cli := range clients {
		_ = cli.Close()
	}
	if err := await(ctx, e.t, left, "the removal's end"); err != nil {
		e.t.Fatalf("%s of %s: %v", mode, target.Name, err)
	}
	e.rejoin(target)
	return s
}

// placeEtcdLeader moves etcd's leadership, untimed, to the leading agent's member (ownNode) or
// to a member whose agent does not lead, and returns the leader.
func (e *env) placeEtcdLeader(ownNode bool) *framework.Member {
	e.t.Helper()
	agentLeader := e.cluster.Member(e.leaderAgent())
	leader := e.cluster.Leader(e.t)
	want := agentLeader
	if !ownNode {
		if leader != agentLeader {
			return leader
		}
		for _, m := range e.cluster.Members() {
			if m != agentLeader {
				want = m
				break
			}
		}
	}
	if leader == want {
		return leader
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := e.etcd[leader.Name].MoveLeader(ctx, want.ID()); err != nil {
		e.t.Fatalf("moving etcd leadership from %s to %s: %v", leader.Name, want.Name, err)
	}
	if now := e.cluster.Leader(e.t); now != want {
		e.t.Fatalf("etcd leadership went to %s, not %s", now.Name, want.Name)
	}
	return want
}

// writeLoad Puts to key one write after another, each with its own writeTimeout, until stop is
// closed and a write has succeeded since, and returns every write, named by names (member name
// by IP) with the member it went to. Ending the load never cuts a write short: a write that a
// removal left waiting counts with the time it waited and how it ended, and the gap it caused
// with the success that ends it. ctx bounds the whole load.
func writeLoad(ctx context.Context, stop <-chan struct{}, cli *clientv3.Client, key string, names map[string]string) []write {
	var out []write
	for i := 0; ctx.Err() == nil; i++ {
		served := &servedBy{}
		callCtx, cancel := context.WithTimeout(context.WithValue(ctx, servedByKey{}, served), writeTimeout)
		start := time.Now()
		_, err := cli.Put(callCtx, key, fmt.Sprintf("write %d", i))
		wr := write{start: start, took: time.Since(start), err: err}
		if host, _, splitErr := net.SplitHostPort(served.addr); splitErr == nil {
			wr.to = names[host]
		}
		out = append(out, wr)
		cancel()
		select {
		case <-stop:
			if err == nil {
				return out
			}
		default:
		}
	}
	return out
}

// leaderLeaveSamples returns the samples of one mode.
func (r *results) leaderLeaveSamples(mode leaderLeaveMode) []leaderLeaveSample {
	var out []leaderLeaveSample
	for _, s := range r.leaderLeave {
		if s.mode == mode {
			out = append(out, s)
		}
	}
	return out
}

// leaderLeaveRows report, per writer and mode, the outage, the failed writes and the writes'
// latency, and the outage goals of the writer on the members that stay.
func (r *report) leaderLeaveRows() []row {
	if len(r.leaderLeave) == 0 {
		return nil
	}
	var rows []row
	outages := map[writerKind]map[leaderLeaveMode]stats{}
	for _, w := range writerKinds {
		outages[w] = map[leaderLeaveMode]stats{}
		for _, mode := range leaderLeaveModes {
			samples := r.leaderLeaveSamples(mode)
			var outage []time.Duration
			var failed, unanswered []float64
			var latency []time.Duration
			for _, s := range samples {
				outage = append(outage, s.outage(w))
				failed = append(failed, float64(s.failed(w)))
				unanswered = append(unanswered, float64(s.unanswered(w)))
				for _, wr := range s.writes[w] {
					latency = append(latency, wr.took)
				}
			}
			st := summarize(inUnit(outage, time.Millisecond))
			outages[w][mode] = st
			prefix := fmt.Sprintf("Removing etcd's leader under load, %s, %s: ", mode, w)
			rows = append(rows,
				distRow(prefix+"outage, longest gap between successful writes, per removal (ms)", st),
				distRow(prefix+"failed writes per removal", summarize(failed)),
				distRow(prefix+fmt.Sprintf("of them, writes answered only by their %s deadline", writeTimeout), summarize(unanswered)),
				latencyRow(prefix+"write latency, every write of every removal (ms)", summarize(inUnit(latency, time.Millisecond))))
		}
	}
	raw := outages[stayingWriter][rawRemove]
	for _, mode := range []leaderLeaveMode{pluginLeave, pluginLeaveOwnNode} {
		st := outages[stayingWriter][mode]
		ratio := st.p50 / raw.p50
		rows = append(rows,
			row{what: fmt.Sprintf("Removing etcd's leader under load, %s: %s ÷ raw MemberRemove, outage p50", stayingWriter, mode), n: none, min: none, p50: num(ratio) + "×", p90: none, p99: none, max: none}.
				withGoal(fmt.Sprintf("≤ %s×", num(leaderOutageRatioGoal)), ratio <= leaderOutageRatioGoal, num(ratio)+"×"),
			row{what: fmt.Sprintf("Removing etcd's leader under load, %s: %s, outage max", stayingWriter, mode), n: strconv.Itoa(st.n), min: none, p50: none, p90: none, p99: none, max: num(st.max)}.
				withGoal(fmt.Sprintf("≤ %d ms", leaderOutageMaxGoal.Milliseconds()), st.max <= float64(leaderOutageMaxGoal.Milliseconds()), "max "+num(st.max)+" ms"))
	}
	return rows
}

// latencyRow is distRow with p99 shown however few the samples: a load has thousands.
func latencyRow(what string, s stats) row {
	r := distRow(what, s)
	r.p90, r.p99 = num(s.p90), num(s.p99)
	return r
}

// writeLeaderLeave says, under the section's rows, how often a removal left a write to its
// deadline, and what such a write waited for.
func (r *report) writeLeaderLeave(b *strings.Builder) {
	if len(r.leaderLeave) == 0 {
		return
	}
	b.WriteString("### Removing etcd's leader under a write load\n\n")
	fmt.Fprintf(b, "A 3-member TLS cluster, agents at their %s; the apiserver stores on an etcd of its own. Two\n", productionTimingsName)
	fmt.Fprintf(b, "writers Put one write after another, each with a %s deadline, from %s before the removal until %s\n", writeTimeout, loadLead, loadTail)
	b.WriteString("after etcd's member list lacks the member and a write has succeeded since; the outage is the\n")
	b.WriteString("longest time between two successful writes. Removals with a write answered only by its deadline:\n\n")
	b.WriteString("| mode | removals | writer on the members that stay | writer on every member |\n|---|--:|--:|--:|\n")
	for _, mode := range leaderLeaveModes {
		samples := r.leaderLeaveSamples(mode)
		counts := [2]int{}
		for _, s := range samples {
			for _, w := range writerKinds {
				if s.unanswered(w) > 0 {
					counts[w]++
				}
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d |\n", mode, len(samples), counts[stayingWriter], counts[everyWriter])
	}
	b.WriteString("\n")
	b.WriteString("Failed writes by the member they went to (the member removed, or one that stays), their longest\n")
	b.WriteString("time and how they ended, over every removal of each mode:\n\n")
	b.WriteString("| mode | writer | to | failed | longest (ms) | ended with |\n|---|---|---|--:|--:|---|\n")
	for _, mode := range leaderLeaveModes {
		for _, w := range writerKinds {
			for _, removed := range []bool{true, false} {
				total, longest, endings := 0, time.Duration(0), map[string]int{}
				for _, s := range r.leaderLeaveSamples(mode) {
					n, l, e := s.failedOn(w, removed)
					total, longest = total+n, max(longest, l)
					for k, v := range e {
						endings[k] += v
					}
				}
				if total == 0 {
					continue
				}
				to := "a member that stays"
				if removed {
					to = "the member removed"
				}
				var parts []string
				for _, k := range slices.Sorted(maps.Keys(endings)) {
					parts = append(parts, fmt.Sprintf("%s %d", k, endings[k]))
				}
				fmt.Fprintf(b, "| %s | %s | %s | %d | %s | %s |\n", mode, w, to, total, num(millis(longest)), strings.Join(parts, ", "))
			}
		}
	}
	b.WriteString("\n")
	b.WriteString(leaderLeaveText)
}

// leaderLeaveText is what the investigation of the slow writes found (docs/testing.md has the
// command that repeats it with etcd's debug log).
const leaderLeaveText = `What a write answered only by its deadline waited for: a proposal that was dropped. A member
that is not the leader forwards a Put to the leader as a raft message and waits for the entry to
be applied. While a leader hands leadership over it drops every proposal it receives (raft's
"transfer leadership to … is in progress; dropping proposal"), and a member that has just lost
its leader drops them too; raft tells the member that forwarded it nothing (etcd-io/etcd#8975:
only proposals dropped on the member itself fail at once, with "raft proposal dropped"). The
waiting request ends only with the client's deadline (the member gets it with the call and, when
it sees it run out first, answers "etcdserver: request timed out"), or etcd's own request timeout
(5 s plus two election timeouts) for a client without one. In etcd's debug log of such a
removal, the Put arrived on a follower 1.7 ms after the leader began the transfer, the leader
logged the drop 1.6 ms later, and the Put ended 5.0 s after it was sent.

Every change of etcd's leader has that window, a few milliseconds long; the removal of a leader
cannot avoid a change of leader. A raw MemberRemove of the leader adds an election (the leader
stops leading once it applies its own removal, and the others elect a new one after an election
timeout, 1 to 2 s), and the writes forwarded to the removed leader in flight are lost the same
way. The hand-over makes the window the transfer alone: most hand-overs drop no write of the
writers here, and the outage is then tens of milliseconds; when one does, that write costs its
deadline. No call a member accepts answers a dropped forwarded proposal early, so no agent-side
step can bound the max below the client's deadline. What bounds it is on the client: a
per-request deadline shorter than the longest pause it can bear, with a retry of the write.

What a request in flight on the member removed waits for: the member applies its own removal
(after the leader, when leadership was moved first), its peers then refuse its connections, and
it stops within milliseconds; a request it was serving ends with "raft: stopped" or a closed
connection, and one it received while it handed leadership over with "raft proposal dropped": a
failed write rather than a wait (the table above has their longest time). etcd's client does not
retry a Put that reached a member, so the writer on every member sees failed writes (its rows
above) that the writer on the members that stay does not, and its next write goes to a member
that stays. There is no wait for the agent to shorten; an apiserver should have the member's URL
removed from its --etcd-servers when the node goes.

`
