//go:build bench

// Package bench measures etcdmember on the real test bed of test/framework: leave latency
// against etcd's own MemberRemove, leader failover, what a quiet cluster costs, what a member
// down for 10 minutes costs in status writes and Events, a full resync of many objects, the
// plugin's list against kubectl get, etcd failing on the leading agent's own node against another
// node, the removal of etcd's leader under a write load (the plugin's leave against a raw
// MemberRemove), and the Node lifecycle: kubectl delete node against the plugin's leave, and what
// thousands of Nodes cost the leading agent. `make bench` runs it, prints one table and writes
// docs/BENCHMARKS.md.
//
// The build tag keeps it out of `make test`: it takes most of an hour and checks
// nothing but that the test bed works; the figures are for people to judge.
package bench

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
)

// What one run measures, sized to keep `make bench` under 64 minutes on 2 cores (its timeout is
// 80, for a loaded machine), the outage's fixed outageWindow (10 minutes), the nodes section
// (about 13: nodeRounds, and two test beds of manyNodes with four quiet windows), the ownnode
// section (about 4: ownNodeRounds) and the leader section (about 7: leaderLeaveCycles) included: each leave cycle (a leave, a raw MemberRemove and a
// least-cost leave) costs about 35s, nearly all of it the three re-joins (a member that joins by
// snapshot often publishes itself only after its first attempt times out, 7s).
const (
	leaveCycles    = 30
	failoverRuns   = 5
	stallRuns      = 3
	quietWindow    = time.Minute
	scaleVoters    = 7
	historyObjects = 200
	resyncRuns     = 3
)

// failoverRunsEnv overrides failoverRuns, to take more samples of one section:
// BENCH_FAILOVER_RUNS=10 go test -tags bench -run 'TestBench/production/failover' ./test/bench/
const failoverRunsEnv = "BENCH_FAILOVER_RUNS"

// reportEnv names a file to write the report of whatever sections ran to, for trial runs of one
// section: docs/BENCHMARKS.md is only written when every section ran.
const reportEnv = "BENCH_REPORT"

// testTimings names the agent timings of the framework's TestAgentArgs.
const testTimings = "tests' timings (lease 4s, renew 3s, retry 0.5s)"

// productionTimings are the agent's defaults, passed explicitly: the framework starts agents
// with TestAgentArgs' shorter timings, and later flags win. They are read from
// agent.DefaultOptions so that the bench follows any change of the defaults.
var productionTimings = func() []string {
	o := agent.DefaultOptions()
	return []string{
		"--sync-interval=" + o.SyncInterval.String(),
		"--membership-poll-interval=" + o.MembershipPollInterval.String(),
		"--leader-elect-lease-duration=" + o.LeaseDuration.String(),
		"--leader-elect-renew-deadline=" + o.RenewDeadline.String(),
		"--leader-elect-retry-period=" + o.RetryPeriod.String(),
		"--recheck-interval=" + o.RecheckInterval.String(),
		"--hand-over-retry=" + o.HandOverRetry.String(),
		"--probe-interval=" + o.ProbeInterval.String(),
		"--probe-timeout=" + o.ProbeTimeout.String(),
		"--health-refresh-interval=" + o.HealthRefresh.String(),
	}
}()

// productionTimingsName names the production defaults in the report.
var productionTimingsName = func() string {
	o := agent.DefaultOptions()
	return fmt.Sprintf("production defaults (lease %s, renew %s, retry %s)", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
}()

// runsFromEnv returns the positive integer in the environment variable name, or def.
func runsFromEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestMain silences controller-runtime's client logging, which prints a warning with a stack
// trace when no logger is set.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// TestBench runs every measurement, each on a test bed of its own, prints the results and, when
// every section ran, writes docs/BENCHMARKS.md. `-run TestBench/<section>` runs one section
// and leaves the file alone (BENCH_REPORT=<file> writes what it measured there instead); the
// production section has parts of its own (quiet, failover, stall, detection, outage), so
// `-run TestBench/production/failover` runs its failovers alone, and so has the nodes section
// (delete, many); `-run TestBench/ownnode` runs the kills of etcd on the leading agent's node,
// `-run TestBench/leader` the removals of etcd's leader under a write load.
func TestBench(t *testing.T) {
	rep := newReport(t)
	sections := []struct {
		name string
		run  func(*testing.T, *results)
	}{
		{"leave", benchLeave},
		{"delayed", benchDelayed},
		{"production", benchProduction},
		{"leader", benchLeaderLeave},
		{"ownnode", benchOwnNode},
		{"scale", benchScale},
		{"plugin", benchPluginFrozen},
		{"nodes", benchNodes},
	}
	for _, s := range sections {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, &rep.results) }) {
			t.FailNow()
		}
	}
	rep.finish(t)
	fmt.Print("\n" + rep.table() + "\n")
	if path := os.Getenv(reportEnv); path != "" {
		if err := os.WriteFile(path, []byte(rep.markdown()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the report of the sections that ran to %s", path)
	}
	if !rep.complete() {
		t.Log("not every section ran: docs/BENCHMARKS.md left as it was")
		return
	}
	rep.write(t)
}
