package agent

import (
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// TestDefaultLeaderElectionTimings: the defaults pass client-go's own checks, and a leader that
// cannot renew gives up (after its last renewal, one retry period, then the renew deadline)
// before any candidate may take the Lease (a lease duration after it saw that renewal).
func TestDefaultLeaderElectionTimings(t *testing.T) {
	o := DefaultOptions()
	if o.LeaseDuration <= o.RenewDeadline {
		t.Errorf("lease duration %s must exceed renew deadline %s", o.LeaseDuration, o.RenewDeadline)
	}
	if o.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(o.RetryPeriod)) {
		t.Errorf("renew deadline %s must exceed %v × retry period %s", o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod)
	}
	if o.RetryPeriod+o.RenewDeadline >= o.LeaseDuration {
		t.Errorf("retry period %s + renew deadline %s must stay under the lease duration %s", o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	if o.LeaseDuration%time.Second != 0 {
		t.Errorf("lease duration %s: the Lease records whole seconds", o.LeaseDuration)
	}
}

// TestDefaultsMeetTheirGoals checks the arithmetic behind the defaults (docs/architecture.md,
// "Leader election") against the goals of issue #48; test/e2e's TestTimingSensitive/LeaderRidesOutEtcdStall and
// make bench measure the same on real etcd.
func TestDefaultsMeetTheirGoals(t *testing.T) {
	const (
		// stallGoal: no apiserver-to-etcd request completes for this long, then they all do.
		stallGoal = 7 * time.Second
		// failoverGoal bounds a SIGKILLed leader's replacement.
		failoverGoal = 20 * time.Second
		// drain is what the queued requests take once the stall ends, on a loaded machine.
		drain = time.Second
	)
	o := DefaultOptions()
	// The renewal that meets the stall: the optimistic update is sent as it starts and times out
	// after half the renew deadline (client-go's resourcelock.NewFromKubeconfig); the slow path's
	// read and update then wait the stall out. Both must be done within the renew deadline.
	perRequest := o.RenewDeadline / 2
	if perRequest*2 <= stallGoal {
		t.Errorf("two renewal requests of %s each time out within a %s stall", perRequest, stallGoal)
	}
	if stallGoal+drain >= o.RenewDeadline {
		t.Errorf("renew deadline %s: a %s stall and %s to drain it end the term", o.RenewDeadline, stallGoal, drain)
	}
	// A candidate last saw the Lease change at most one jittered retry (2.2 retry periods) before
	// the stall began, and may take it a lease duration after that: the leader's renewal must land
	// first.
	jittered := time.Duration(leaderelection.JitterFactor*float64(o.RetryPeriod)) + o.RetryPeriod
	if earliest := o.LeaseDuration - jittered; earliest <= stallGoal+drain {
		t.Errorf("a candidate may take the Lease %s into a %s stall, before the leader's renewal lands", earliest, stallGoal)
	}
	// Failover: the last renewal a candidate sees can be up to one jittered retry old, and its
	// try after the lease duration another jittered retry late.
	if worst := o.LeaseDuration + 2*jittered; worst > failoverGoal-drain {
		t.Errorf("a killed leader is replaced up to %s after its death, goal %s (less %s to start the new term)", worst, failoverGoal, drain)
	}
}
