package e2e

import (
	"flag"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// timingScenario is a scenario that asserts how fast something happens. CPU taken by a crowd of
// other scenarios would break such an assertion without the product being wrong, so these do not
// run among the parallel tests.
type timingScenario struct {
	name string
	// why is the bound the scenario asserts, the reason it cannot share the machine freely.
	why string
	run func(t *testing.T)
}

// timingScenarios, longest first (seconds each took on the 2-core CI machine, issue #48), so that
// the lanes of TestTimingSensitive end close together.
var timingScenarios = []timingScenario{
	{"SlowPeerLinks", "each member's Healthy verdict may change at most once in 70s under 200ms peer delay; " +
		"probes starved of CPU would time out for reasons of their own", slowPeerLinks}, // 78 s
	{"LeaderRidesOutEtcdStall", "the leader must keep its Lease through a 7s etcd stall with 3s of its renew " +
		"deadline to spare; a renewal starved of CPU would eat that margin", leaderRidesOutEtcdStall}, // 46 s
	{"LeadersOwnMemberFails", "the leader must show its own member's failure within two probe intervals and a " +
		"lease duration (8s); probes starved of CPU would time out for reasons of their own", leadersOwnMemberFails}, // 31 s
	{"AlarmThenUnreachableWaitsFullTime", "its hold starts when the test sees Unreachable, which may lag the " +
		"leader's clock by at most 1s", alarmThenUnreachableWaitsFullTime}, // 29 s
	{"AgentsLeaveStoragelessAPIServer", "the stopped member's object must say so within a lease duration, a " +
		"Lease request's timeout and two probe intervals; renewals starved of CPU would cost more", agentsLeaveStoragelessAPIServer}, // 28 s
	{"StalledLearnerEvicted", "eviction within --learner-stall-timeout + 5s of the test seeing the learner",
		stalledLearnerEvicted}, // 26 s
	{"FrozenLeaderChangesNothing", "the leader must be frozen within its 8s failpoint block, and the " +
		"cancellation (a kubectl run) must land within the ~4s its Lease has left", frozenLeaderChangesNothing}, // 20 s
	{"PluginList", "a list with a frozen member must take at most --timeout + 1s", pluginList}, // 15 s
	{"HealthFollowsSIGSTOP", "Healthy must flip within two probe intervals of SIGSTOP and of SIGCONT",
		healthFollowsSIGSTOP}, // 9 s
	{"LeaveOfEtcdLeader", "no gap of etcd's election timeout (1s) between successful writes", leaveOfEtcdLeader}, // 7 s
}

// TestTimingSensitive runs timingScenarios before any parallel test (Go runs a test that does not
// call t.Parallel() first), one per core at a time and nothing else beside them. A scenario mostly
// waits on timers: alone, one used 16 % of two cores on average, a cluster's start half of them
// for a few seconds. So one per core leaves each a core through its starts and its probes, and
// the nine take about half the time they took one after another.
func TestTimingSensitive(t *testing.T) {
	lanes := min(runtime.NumCPU(), parallelFlag(t))
	queue := make(chan timingScenario, len(timingScenarios))
	for _, s := range timingScenarios {
		queue <- s
	}
	close(queue)
	var wg sync.WaitGroup
	for range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// t.Run from several goroutines runs their subtests at once; each returns when its
			// subtest has ended, so a lane runs one scenario at a time. A scenario -run leaves
			// out returns at once.
			for s := range queue {
				t.Run(s.name, s.run)
			}
		}()
	}
	wg.Wait()
}

// parallelFlag is -test.parallel, which TestMain sets from the core count unless given.
func parallelFlag(t *testing.T) int {
	t.Helper()
	f := flag.Lookup("test.parallel")
	if f == nil {
		t.Fatal("no -test.parallel flag")
	}
	n, err := strconv.Atoi(f.Value.String())
	if err != nil || n < 1 {
		t.Fatalf("-test.parallel=%q: %v", f.Value.String(), err)
	}
	return n
}
