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
