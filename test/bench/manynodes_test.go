//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// manyNodes is how many Nodes besides the members' the many part creates: a large cluster's
// workers, of which the agents follow none.
const manyNodes = 5000

// manyNodesEnv overrides manyNodes, for trial runs: BENCH_MANY_NODES=500 go test -tags bench
// -run 'TestBench/nodes/many' ./test/bench/
const manyNodesEnv = "BENCH_MANY_NODES"

// createWorkers is how many creates run at once, through a client at benchQPS.
const createWorkers = 16

// manyNodesCost is the leading agent's cost with and without the extra Nodes, on two test beds
// that differ in nothing else.
type manyNodesCost struct {
	without, with manyNodesRun
}

// manyNodesRun is one test bed: 3 members bound to their Nodes, the agents at the production
// defaults with --leave-on-node-delete, and extra Nodes created before the agents started.
type manyNodesRun struct {
	extraNodes int
	// created is how long the creates took; metadataBytes is one extra Node's metadata as the
	// agents' metadata client receives it (JSON), managedFields included.
	created       time.Duration
	metadataBytes int
	// steady is the leading agent over quietWindow after quietWarmup; failover is the agent that
	// leads after the first one was SIGKILLed at the start of the window, from before the kill:
	// its election, its term's start and the term's sweep of every Node are inside.
	steady, failover agentWindow
}

// agentWindow is one agent over one window.
type agentWindow struct {
	agent  string
	window time.Duration
	// elected is from the window's start (the kill) to the new holder seen on the Lease; failover
	// windows only.
	elected time.Duration
	// rss is VmRSS at the end of the window, hwm VmHWM (the peak since the agent started), cpu
	// its CPU time in the window.
	rss, hwm int64
	cpu      time.Duration
	// requests are the agent's own API requests per minute by HTTP method
	// (rest_client_requests_total).
	requests map[string]float64
	// From the audit log, the agents' requests about Nodes in the window, counted: sweepPages are
	// lists without a field selector (the sweep: one per page), namedLists and namedWatches
	// those that select one Node by name, allWatches watches of every Node (none expected).
	sweepPages, namedLists, namedWatches, allWatches int
}

func (w agentWindow) requestsPerMinute() float64 { return total(w.requests) }

func benchManyNodes(t *testing.T, n int) *manyNodesCost {
	c := &manyNodesCost{}
	t.Run("without", func(t *testing.T) { c.without = manyNodesOnce(t, 0) })
	t.Run(strconv.Itoa(n), func(t *testing.T) { c.with = manyNodesOnce(t, n) })
	if t.Failed() {
		return nil
	}
	return c
}

// manyNodesOnce runs one test bed with extra Nodes created before the agents start, as in a
// cluster whose workers registered before the etcd agents were installed.
func manyNodesOnce(t *testing.T, extra int) manyNodesRun {
	run := manyNodesRun{extraNodes: extra}
	before := func(e *env) {
		if extra == 0 {
			return
		}
		start := time.Now()
		e.createWorkerNodes(extra)
		run.created = time.Since(start)
		run.metadataBytes = e.nodeMetadataBytes(framework.WorkerNodeName(0))
		t.Logf("%d Nodes created in %s; one Node's metadata is %d bytes", extra, run.created.Round(time.Millisecond), run.metadataBytes)
	}
	args := append(append([]string{}, productionTimings...), "--leave-on-node-delete")
	e := newEnvWith(t, envOptions{size: 3, audit: true, nodes: true, beforeAgents: before}, args...)
	for _, m := range e.cluster.Members() {
		e.waitNodeHeld(m.Name)
	}
	time.Sleep(quietWarmup)
	run.steady = e.leaderWindow()
	run.failover = e.failoverWindow()
	for _, what := range []string{"steady", "failover"} {
		w := run.steady
		if what == "failover" {
			w = run.failover
		}
		t.Logf("%d extra Nodes, %s: %s RSS %.2f MiB (peak %.2f MiB), %.1f requests/min %v; Node lists of all %d pages, by name %d, watches by name %d, of all %d",
			extra, what, w.agent, mib(w.rss), mib(w.hwm), w.requestsPerMinute(), w.requests, w.sweepPages, w.namedLists, w.namedWatches, w.allWatches)
	}
	return run
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// createWorkerNodes creates n Nodes as kubelets register theirs (framework.WorkerNode), in
// parallel at benchQPS, so that each carries the metadata (managedFields included) of a real one.
func (e *env) createWorkerNodes(n int) {
	e.t.Helper()
	e.api.CreateWorkerNodes(e.t, n, createWorkers, benchQPS)
}

// nodeMetadataBytes is the size of the Node's metadata as the agents' metadata client receives it.
func (e *env) nodeMetadataBytes(name string) int {
	e.t.Helper()
	cl, err := metadata.NewForConfig(e.api.RESTConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	obj, err := cl.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("metadata of Node %s: %v", name, err)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(data)
}

// leaderWindow measures the leading agent over quietWindow.
func (e *env) leaderWindow() agentWindow {
	e.t.Helper()
	leader := e.leaderAgent()
	pids := e.agentPIDs()
	ctx, cancel := context.WithTimeout(context.Background(), quietWindow+settle)
	defer cancel()
	before := e.agentSnapshot(ctx, leader, pids[leader])
	time.Sleep(quietWindow)
	after := e.agentSnapshot(ctx, leader, pids[leader])
	if now := e.leaderAgent(); now != leader {
		e.t.Fatalf("leadership moved from %s to %s during the steady window", leader, now)
	}
	return e.window(leader, before, after)
}

// failoverWindow SIGKILLs the leading agent at the start of a quietWindow and measures the agent
// that leads at its end from before the kill, so that its term's start is inside.
func (e *env) failoverWindow() agentWindow {
	e.t.Helper()
	old := e.leaderAgent()
	pids := e.agentPIDs()
	ctx, cancel := context.WithTimeout(context.Background(), quietWindow+settle)
	defer cancel()
	before := map[string]agentSnapshot{}
	for name := range e.agents {
		if name != old {
			before[name] = e.agentSnapshot(ctx, name, pids[name])
		}
	}
	elected := e.watchLeader(ctx, func(l *coordinationv1.Lease) bool {
		holder := framework.LeaseHolder(l)
		return holder != "" && holder != old
	})
	killed := time.Now()
	e.agents[old].Kill(e.t)
	seen := await(ctx, e.t, elected, "a new leader")
	time.Sleep(time.Until(killed.Add(quietWindow)))
	leader := framework.LeaseHolder(seen.obj)
	after := e.agentSnapshot(ctx, leader, pids[leader])
	if now := e.leaderAgent(); now != leader {
		e.t.Fatalf("leadership moved from %s to %s during the failover window", leader, now)
	}
	w := e.window(leader, before[leader], after)
	w.elected = seen.at.Sub(killed)
	return w
}

// agentSnapshot is one agent's counters at one moment.
type agentSnapshot struct {
	at       time.Time
	requests map[string]float64
	usage    procUsage
	hwm      int64
}

func (e *env) agentSnapshot(ctx context.Context, name string, pid int) agentSnapshot {
	e.t.Helper()
	s := agentSnapshot{at: time.Now()}
	s.requests = e.mustScrape(ctx, e.agents[name]).sumBy("rest_client_requests_total", func(l map[string]string) (string, bool) {
		return l["method"], true
	})
	var err error
	if s.usage, err = readUsage(pid); err != nil {
		e.t.Fatalf("agent %s: %v", name, err)
	}
	if s.hwm, err = vmHWM(pid); err != nil {
		e.t.Fatalf("agent %s: %v", name, err)
	}
	return s
}

// window turns two snapshots of an agent into its cost per minute, and adds what the audit log
// says of the agents' requests about Nodes between them.
func (e *env) window(agent string, before, after agentSnapshot) agentWindow {
	e.t.Helper()
	w := agentWindow{
		agent: agent, window: after.at.Sub(before.at),
		rss: after.usage.rss, hwm: after.hwm, cpu: after.usage.cpu - before.usage.cpu,
		requests: map[string]float64{},
	}
	for k, v := range after.requests {
		if d := v - before.requests[k]; d > 0 {
			w.requests[k] = d * float64(time.Minute) / float64(w.window)
		}
	}
	for _, ev := range e.readAudit() {
		if ev.User.Username != agentUser || ev.ObjectRef.Resource != "nodes" || ev.Received.Before(before.at) || ev.Received.After(after.at) {
			continue
		}
		named := strings.HasPrefix(ev.fieldSelector(), "metadata.name=")
		switch {
		case ev.Verb == "list" && ev.Stage == "ResponseComplete" && named:
			w.namedLists++
		case ev.Verb == "list" && ev.Stage == "ResponseComplete":
			w.sweepPages++
		case ev.Verb == "watch" && ev.Stage == "ResponseStarted" && named:
			w.namedWatches++
		case ev.Verb == "watch" && ev.Stage == "ResponseStarted":
			w.allWatches++
		}
	}
	return w
}

// fieldSelector is the request's field selector, "" when it has none.
func (ev auditEvent) fieldSelector() string {
	u, err := url.ParseRequestURI(ev.RequestURI)
	if err != nil {
		return ""
	}
	return u.Query().Get("fieldSelector")
}

func vmHWM(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
}
