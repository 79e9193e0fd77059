// Package chaos runs seeded random sequences of faults and membership requests against the real
// test bed of test/framework, and checks etcdmember's promises after every step: the controller
// never takes the cluster below quorum; it removes no member that no leave asked for; every leave
// reaches an outcome, explained in its Left condition, in bounded time; a leader that crashes
// inside the leave sequence leaves enough behind for the next one to report the removal as its
// own; a deleted member's Node goes within its hold and a failover's slack; and the objects come
// back to what etcd says.
//
// `make test` runs a short run with a fixed seed; `make chaos` a long one (CHAOS_SCENARIOS,
// CHAOS_SEED). docs/testing.md describes both.
package chaos

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// The run's shape. Four voters tolerate one member down, like three, but also make the case the
// serialization of leaves exists for: with one member dead, the first of two leaves for healthy
// members is allowed and the second, judged after it, must be refused.
const (
	members = 4
	// The short run inside `make test`: a fixed seed whose five scenarios include both crash
	// points, two leaves on a cluster with a member down (the second must be refused until it
	// is back), a re-join mid-scenario (no network fault, no other leave pending), an
	// apiserver crash, a partition (a link between the etcd leader and another member cut
	// both ways), an outage for the dead-member policy, the deletion of a member's Node and a
	// member fault on the leading agent's node (a kill); TestShortRunCoversItsCases checks the
	// plan still does.
	shortSeed      = 3192167
	shortScenarios = 5
)

// The dead-member policy every agent of a run has on (CHAOS_AGENT_ARGS may override it): a voter
// that etcd's leader no longer hears is asked to leave once unreachable for policyAfter (two of
// the tests' 2s probe intervals, the shortest the agent accepts), and never when fewer than
// policyMinVoters would remain. An outage step waits up to outageBound for that request, which
// takes up to a probe interval until a probe fails, policyAfter, and the policy's 2s listen for
// the member's raft traffic; longer when the leading agent was just paused and the next one
// measures the outage afresh (17s once).
const (
	policyAfter     = 4 * time.Second
	policyMinVoters = 3
	outageBound     = 30 * time.Second
)

// policyArgs turn the dead-member policy on.
var policyArgs = []string{"--remove-unreachable-after=" + policyAfter.String(), fmt.Sprintf("--min-voters=%d", policyMinVoters)}

// TestMain silences controller-runtime's client logging, which these tests do not read; without a
// logger it prints a warning with a stack trace instead.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	code := m.Run()
	framework.ReportSlowestEtcdRequest("test/chaos")
	os.Exit(code)
}

// config is what the environment asks of a run.
type config struct {
	seed      uint64
	scenarios int
	// only, when not 0, runs that one scenario of the seed.
	only int
	// wholeNodes makes etcd faults take the node's agent with them, and stops the agent of a
	// removed member until its node re-joins: nodes fail and are decommissioned as a whole. It
	// keeps agents whose etcd is gone out of the leader election, which the default run does not.
	wholeNodes bool
	// agentArgs are extra agent flags (CHAOS_AGENT_ARGS, space-separated) after the tests'
	// timings, e.g. production ones.
	agentArgs []string
}

func (c config) total() int {
	if c.only != 0 {
		return 1
	}
	return c.scenarios
}

// loadConfig reads CHAOS_SEED, CHAOS_SCENARIOS, CHAOS_ONLY, CHAOS_WHOLE_NODES and
// CHAOS_AGENT_ARGS. Without CHAOS_SCENARIOS it is the short fixed-seed run; with it and no seed,
// a random seed.
func loadConfig(t *testing.T) config {
	t.Helper()
	cfg := config{seed: shortSeed, scenarios: shortScenarios}
	number := func(name string, bits int) (uint64, bool) {
		v := os.Getenv(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return n, true
	}
	if n, ok := number("CHAOS_SCENARIOS", 31); ok {
		if n == 0 {
			t.Fatalf("CHAOS_SCENARIOS must be at least 1")
		}
		cfg.scenarios = int(n)
		var b [8]byte
		_, _ = rand.Read(b[:])
		// Small enough to type when replaying.
		cfg.seed = binary.LittleEndian.Uint64(b[:]) % 1_000_000_000
	}
	if n, ok := number("CHAOS_SEED", 64); ok {
		cfg.seed = n
	}
	if n, ok := number("CHAOS_ONLY", 31); ok {
		cfg.only = int(n)
	}
	if n, ok := number("CHAOS_WHOLE_NODES", 1); ok {
		cfg.wholeNodes = n == 1
	}
	cfg.agentArgs = strings.Fields(os.Getenv("CHAOS_AGENT_ARGS"))
	return cfg
}

// TestChaos runs the scenarios of one seed on one test bed, restoring the baseline after each,
// and stops after the first scenario with a violation.
func TestChaos(t *testing.T) {
	cfg := loadConfig(t)
	first, last := 1, cfg.scenarios
	if cfg.only != 0 {
		first, last = cfg.only, cfg.only
	}
	mode := "etcd members and agents fail independently"
	if cfg.wholeNodes {
		mode = "whole nodes (CHAOS_WHOLE_NODES=1)"
	}
	args := append(append(slices.Clone(nodeArgs), policyArgs...), cfg.agentArgs...)
	hold, slack, err := nodeTimings(args)
	if err != nil {
		t.Fatal(err)
	}
	healthBound, err := healthTimings(args)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("chaos: seed %d, scenarios %d..%d, %d members, %s, agent args %v\n", cfg.seed, first, last, members, mode, args)
	w := newWorld(t, members, args)
	r := newRun(t, cfg, w)
	r.hold, r.slack, r.healthBound = hold, slack, healthBound
	defer func() {
		fmt.Print(r.summary())
		if t.Failed() {
			r.keepLogs()
			mode := ""
			if cfg.wholeNodes {
				mode = " CHAOS_WHOLE_NODES=1"
			}
			if len(cfg.agentArgs) > 0 {
				mode += fmt.Sprintf(" CHAOS_AGENT_ARGS='%s'", strings.Join(cfg.agentArgs, " "))
			}
			fmt.Printf("replay the run:              make chaos CHAOS_SEED=%d CHAOS_SCENARIOS=%d%s\n", cfg.seed, r.lastScenario(), mode)
			fmt.Printf("replay the failing scenario: make chaos CHAOS_SEED=%d CHAOS_ONLY=%d%s\n", cfg.seed, r.lastScenario(), mode)
		}
	}()
	stop := r.monitor()
	defer stop()
	r.logf("test bed up: %d members, kube-apiserver, %d agents", members, members)
	r.converge()

	for index := first; index <= last && !r.violated(); index++ {
		r.runScenario(planScenario(cfg.seed, index, members))
	}
}

func (r *run) lastScenario() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scenario
}

func (r *run) runScenario(sc scenario) {
	r.t.Helper()
	start := time.Now()
	r.mu.Lock()
	r.scenario = sc.index
	r.leaves = nil
	r.mu.Unlock()
	r.logf("scenario %d/%d: %s", sc.index, r.cfg.scenarios, sc)
	if sc.crash != nil {
		r.runCrash(sc.crash)
	} else {
		for _, s := range sc.steps {
			r.runStep(s)
		}
		r.sleep(sc.tail)
	}
	r.restore()
	took := time.Since(start)
	r.mu.Lock()
	if r.netScenario {
		r.c.netScenarios++
	}
	r.netScenario = false
	r.c.scenarios++
	r.c.scenarioTime = append(r.c.scenarioTime, took)
	r.mu.Unlock()
	r.logf("scenario %d done in %s", sc.index, took.Round(100*time.Millisecond))
}

// keepLogs copies every process's whole log out of the test's temporary directory, which is
// deleted when the test ends: the tails the framework prints rarely reach back to the scenario
// that failed.
func (r *run) keepLogs() {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("etcdmember-chaos-%d-%d", r.cfg.seed, r.lastScenario()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Printf("keeping the logs: %v\n", err)
		return
	}
	logs := map[string]string{"kube-apiserver.log": r.w.api.LogFile()}
	for i, m := range r.w.members {
		logs[m.Name+"-etcd.log"] = m.LogFile()
		logs[m.Name+"-agent.log"] = r.w.agents[i].LogFile()
	}
	for name, path := range logs {
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if err != nil {
			fmt.Printf("keeping %s: %v\n", path, err)
		}
	}
	fmt.Printf("every process's log:        %s\n", dir)
}
