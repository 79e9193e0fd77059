// Package e2e runs etcdmember agents (bin/etcdmember) against real etcd members and a real
// kube-apiserver started by test/framework.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	callTimeout = 10 * time.Second
	// settle bounds how long a leave, a registration or a hand-over may take in these tests.
	settle = 45 * time.Second
	// pollEvery is how often most waits look again; retryEvery is for the reads of retry and
	// waitFor, and for the windows of holds.
	pollEvery  = 200 * time.Millisecond
	retryEvery = 100 * time.Millisecond
)

// Parallelism. Each scenario has etcd members, an apiserver and agents of its own, on loopback
// addresses from one pool (the framework's allocator, which framework.ListenLoopback shares), with
// files under its own t.TempDir(), and environment for an agent passed to that agent's process
// (framework.Agent.SetEnv), never set in this one. So every test calls t.Parallel() first, and
// -parallel (scenariosPerCore per core unless given) bounds how many run at once. The scenarios
// that assert how fast something happens are not top-level tests: TestTimingSensitive runs them
// before the parallel ones, one per core (timing_test.go). A new test calls t.Parallel() or joins
// timingScenarios with its reason; TestParallelism checks that.

// scenariosPerCore bounds how many parallel scenarios run at once, unless -parallel says otherwise.
// A scenario's etcd members, apiserver and agents mostly wait on timers, but its start (an
// apiserver's, about 3 s of CPU) and its probes are not free: at 3 per core (6 on 2 cores) beside
// the node tier, etcd took up to 14 s for plain reads and agents lost their Leases (issue #48).
const scenariosPerCore = 2

// TestMain silences controller-runtime's client logging, which these tests do not read; without a
// logger it prints a warning with a stack trace instead. It sizes -parallel from the machine's
// cores when the command line leaves it alone.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(scenariosPerCore*runtime.NumCPU())); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	framework.ReportSlowestEtcdRequest("test/e2e")
	os.Exit(code)
}

// env is one scenario's world: etcd members, an apiserver on them with the CRD installed, and
// an agent per member.
type env struct {
	t       *testing.T
	cluster *framework.Cluster
	api     *framework.APIServer
	client  client.Client
	agents  map[string]*framework.Agent
	// agentKubeconfig is the least-privilege credential the agents run with.
	agentKubeconfig string
}

type envConfig struct {
	size int
	tls  bool
	// agents lists the members that get an agent; nil means all.
	agents    []string
	agentArgs []string
	// separateStorage puts the apiserver on a one-member etcd of its own, so that the cluster
	// under test can lose quorum or raise an alarm without taking the API down with it.
	separateStorage bool
	// etcdBinary is the etcd under bin/ the cluster under test runs (framework.ClusterConfig's
	// EtcdBinary); the separate storage always runs the default one.
	etcdBinary string
	// faultProxies puts the cluster's network paths behind fault proxies (framework.ClusterConfig's
	// FaultProxies), for the network-fault scenarios.
	faultProxies bool
	// nodes registers a Node object per member, named like it, before the agents start, and starts
	// each agent with --node-name set to it.
	nodes bool
}

// newEnv returns once every agent is ready and has registered its member's object itself.
func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: cfg.size, TLS: cfg.tls, EtcdBinary: cfg.etcdBinary, FaultProxies: cfg.faultProxies})
	storage := c
	if cfg.separateStorage {
		storage = framework.NewCluster(t, framework.ClusterConfig{Size: 1})
	}
	api := framework.StartAPIServer(t, storage)
	e := &env{t: t, cluster: c, api: api, agents: map[string]*framework.Agent{}}
	api.InstallEtcdmember(t)

	e.client = api.ObjectClient(t, 0)
	names := cfg.agents
	if names == nil {
		for _, m := range c.Members() {
			names = append(names, m.Name)
		}
	}
	// The agents run with least privilege: an identity in the group the shipped RBAC binds, and
	// nothing else. Every scenario thereby proves that config/default grants enough.
	_, agentKubeconfig := api.User(t, "etcdmember-agent", "etcdmember:agents")
	e.agentKubeconfig = agentKubeconfig
	args := append([]string{"--kubeconfig=" + agentKubeconfig}, cfg.agentArgs...)
	// The agents start together. The first to register leads, and gives any member still without
	// an object a discovered one after the discovery grace: started one after another on a loaded
	// machine, the last agent came later than that (issue #48), and its member stayed noted as
	// discovered. Ready is no evidence against it (framework.Agent.WaitOwnObject says why).
	for _, name := range names {
		agentArgs := args
		if cfg.nodes {
			api.RegisterNode(t, name)
			agentArgs = append(slices.Clone(args), "--node-name="+name)
		}
		a := framework.NewAgent(t, c.Member(name), api, agentArgs...)
		a.StartUnready(t)
		e.agents[name] = a
	}
	for _, name := range names {
		e.agents[name].WaitReady(t)
		e.agents[name].WaitOwnObject(t)
	}
	return e
}

// kubectl runs bin/kubectl against the scenario's apiserver and returns its output. Reads are
// retried like e.get. A merge patch is retried only when the apiserver sent its write to a
// member just removed (removedMemberErrors; CI runs of 79e7004 and 4a39efb met both in the second
// object of a two-name patch, right after the first one's removal): sent again, it changes
// nothing it already changed. Anything else runs once.
func (e *env) kubectl(args ...string) string {
	e.t.Helper()
	if args[0] != "get" && args[0] != "patch" {
		return e.api.MustKubectl(e.t, args...)
	}
	what := "kubectl " + strings.Join(args, " ")
	var out string
	e.retry(what, func(context.Context) error {
		var err error
		out, err = e.api.Kubectl(e.t, args...)
		if err != nil && args[0] == "patch" && !slices.ContainsFunc(removedMemberErrors, func(s string) bool { return strings.Contains(out, s) }) {
			e.t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return err
	})
	return out
}

// removedMemberErrors are what the apiserver answers when its etcd client sent a request to a
// member just removed: the member's raft node has stopped, or it closed the connection as it
// exited (an EOF, or a reset when the close raced the read: seen in a full e2e run).
var removedMemberErrors = []string{
	"raft: stopped",
	"code = Unavailable desc = error reading from server: EOF",
	"code = Unavailable desc = error reading from server: connection reset by peer",
}

func (e *env) get(name string) *v1alpha1.EtcdMember {
	e.t.Helper()
	m := &v1alpha1.EtcdMember{}
	e.retry("get EtcdMember "+name, func(ctx context.Context) error {
		return e.client.Get(ctx, types.NamespacedName{Name: name}, m)
	})
	return m
}

// retry runs call until it succeeds, for reads that may meet a transient error: right after a
// removal, the apiserver or a client may still be talking to the removed member ("raft: stopped").
func (e *env) retry(what string, call func(ctx context.Context) error) {
	e.t.Helper()
	framework.Eventually(e.t, callTimeout, retryEvery, what, apiCall(call))
}

// apiCall is a call retried until it succeeds, each attempt within callTimeout.
func apiCall(call func(ctx context.Context) error) framework.Condition {
	return framework.PerAttempt(callTimeout, framework.Succeeds(call))
}

// leave asks for a member's removal the way an operator does.
func (e *env) leave(name string) {
	e.t.Helper()
	e.kubectl("patch", "etcdmembers.etcdmember.io", name, "--type", "merge", "-p", `{"spec":{"leave":true}}`)
}

// waitFor polls the object until ok holds, failing with the last state seen.
func (e *env) waitFor(name, what string, ok func(*v1alpha1.EtcdMember) bool) *v1alpha1.EtcdMember {
	e.t.Helper()
	var last *v1alpha1.EtcdMember
	err := framework.Poll(settle, retryEvery, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		m := &v1alpha1.EtcdMember{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: name}, m); err != nil {
			return false, err
		}
		last = m
		return ok(m), nil
	}))
	if err != nil {
		e.t.Fatalf("EtcdMember %s: %s not reached within %s; last status: %s", name, what, settle, describe(last))
	}
	return last
}

// holds checks for a while that the object keeps satisfying ok: for what must not happen, such as
// a restarted agent revoking a leave, a window of observation is the only evidence there is.
func (e *env) holds(name, what string, window time.Duration, ok func(*v1alpha1.EtcdMember) bool) {
	e.t.Helper()
	framework.Consistently(e.t, window, retryEvery, fmt.Sprintf("EtcdMember %s: %s no longer holds", name, what),
		func(context.Context) (bool, error) {
			if m := e.get(name); !ok(m) {
				return false, errors.New(describe(m))
			}
			return true, nil
		})
}

func describe(m *v1alpha1.EtcdMember) string {
	if m == nil {
		return "<never read>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leave=%v memberID=%s learner=%v", m.Spec.Leave, m.Status.MemberID, m.Status.IsLearner)
	for _, c := range m.Status.Conditions {
		fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func condition(m *v1alpha1.EtcdMember, condType string) *metav1.Condition {
	return meta.FindStatusCondition(m.Status.Conditions, condType)
}

// hasCondition tells whether the object has the condition with that status and reason.
func hasCondition(m *v1alpha1.EtcdMember, condType string, status metav1.ConditionStatus, reason string) bool {
	c := condition(m, condType)
	return c != nil && c.Status == status && c.Reason == reason
}

// etcdMemberIDs returns the IDs in etcd's member list, as a set.
func (e *env) etcdMemberIDs() map[uint64]bool {
	e.t.Helper()
	var resp *clientv3.MemberListResponse
	e.retry("member list", func(ctx context.Context) error {
		var err error
		resp, err = e.cluster.Client(e.t).MemberList(ctx)
		return err
	})
	ids := map[uint64]bool{}
	for _, m := range resp.Members {
		ids[m.ID] = true
	}
	return ids
}

// leaderAgent returns the name of the agent holding the leader Lease.
func (e *env) leaderAgent() string {
	e.t.Helper()
	return e.api.LeaderAgent(e.t)
}

// agentLogsContain tells whether any agent's log has the text.
func (e *env) agentLogsContain(text string) bool {
	e.t.Helper()
	name, err := e.agentWhoseLogHas(text)
	if err != nil {
		e.t.Fatalf("agent log: %v", err)
	}
	return name != ""
}

// removalsAnsweredStopped counts the removals, in every agent's log, that a member answered with
// "etcdserver: server stopped": what the member being removed answers when the removal reaches it
// as it applies it. The leader never sends a removal there, so a leave test expects none.
func (e *env) removalsAnsweredStopped() int {
	e.t.Helper()
	n := 0
	for _, a := range e.agents {
		data, err := os.ReadFile(a.LogFile())
		if err != nil {
			e.t.Fatalf("agent log: %v", err)
		}
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, "etcd member remove") && strings.Contains(line, rpctypes.ErrStopped.Error()) {
				n++
			}
		}
	}
	return n
}

// agentWhoseLogHas returns the name of an agent whose log has the text, or "" if none has.
func (e *env) agentWhoseLogHas(text string) (string, error) {
	for name, a := range e.agents {
		data, err := os.ReadFile(a.LogFile())
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", a.LogFile(), err)
		}
		if strings.Contains(string(data), text) {
			return name, nil
		}
	}
	return "", nil
}

// events returns the Events in kube-system about the named EtcdMember.
func (e *env) events(name string) []eventsv1.Event {
	e.t.Helper()
	var list eventsv1.EventList
	e.retry("list events", func(ctx context.Context) error {
		return e.client.List(ctx, &list, client.InNamespace("kube-system"))
	})
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "EtcdMember" && ev.Regarding.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvent waits for an Event about name with this type and reason, and returns it.
func (e *env) waitEvent(name, eventType, reason string) eventsv1.Event {
	e.t.Helper()
	ev, found := e.awaitEvent(name, func(ev eventsv1.Event) bool { return ev.Type == eventType && ev.Reason == reason })
	if !found {
		e.t.Fatalf("no %s Event %s about %s in kube-system; events: %+v", eventType, reason, name, e.events(name))
	}
	return ev
}

// awaitEvent waits up to settle for an Event about name that ok accepts.
func (e *env) awaitEvent(name string, ok func(eventsv1.Event) bool) (eventsv1.Event, bool) {
	e.t.Helper()
	var found eventsv1.Event
	err := framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		for _, ev := range e.events(name) {
			if ok(ev) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found, err == nil
}
