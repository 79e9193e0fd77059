//go:build bench

// Package bench measures etcdmember on the real test bed of test/framework: leave latency
// against etcd's own MemberRemove, leader failover, what a quiet cluster costs, and a full
// resync of many objects. `make bench` runs it, prints one table and writes docs/BENCHMARKS.md.
//
// The build tag keeps it out of `make test`: it takes about a quarter of an hour and checks
// nothing but that the test bed works; the figures are for people to judge.
package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// What one run measures, sized to keep `make bench` near a quarter of an hour on 2 cores: each
// leave or MemberRemove cycle costs about 8s, nearly all of it the re-join (a member that joins
// by snapshot often publishes itself only after its first attempt times out, 7s).
const (
	leaveCycles    = 30
	failoverRuns   = 5
	quietWindow    = time.Minute
	scaleVoters    = 7
	historyObjects = 200
	resyncRuns     = 3
)

// The two sets of agent timings failover is measured with.
const (
	testTimings           = "tests' timings (lease 4s, renew 3s, retry 0.5s)"
	productionTimingsName = "production defaults (lease 8s, renew 6s, retry 1s)"
)

// productionTimings are the agent's defaults, passed explicitly: the framework starts agents
// with TestAgentArgs' shorter timings, and later flags win.
var productionTimings = []string{
	"--sync-interval=10s",
	"--membership-poll-interval=2s",
	"--leader-elect-lease-duration=8s",
	"--leader-elect-renew-deadline=6s",
	"--leader-elect-retry-period=1s",
	"--recheck-interval=5s",
	"--hand-over-retry=30s",
}

// TestMain silences controller-runtime's client logging, which prints a warning with a stack
// trace when no logger is set.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// TestBench runs every measurement, each on a test bed of its own, prints the results and, when
// every section ran, writes docs/BENCHMARKS.md. `-run TestBench/<section>` runs one section
// and leaves the file alone.
func TestBench(t *testing.T) {
	rep := newReport(t)
	sections := []struct {
		name string
		run  func(*testing.T, *results)
	}{
		{"leave", benchLeave},
		{"production", benchProduction},
		{"scale", benchScale},
	}
	for _, s := range sections {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, &rep.results) }) {
			t.FailNow()
		}
	}
	rep.finish(t)
	fmt.Print("\n" + rep.table() + "\n")
	if !rep.complete() {
		t.Log("not every section ran: docs/BENCHMARKS.md left as it was")
		return
	}
	rep.write(t)
}
