package agent

import (
	"context"
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

func TestHandOverBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		limit    time.Duration
		want     time.Duration
	}{
		{0, 30 * time.Second, 30 * time.Second},
		{1, 30 * time.Second, 3 * time.Second},
		{2, 30 * time.Second, 6 * time.Second},
		{3, 30 * time.Second, 12 * time.Second},
		{4, 30 * time.Second, 24 * time.Second},
		{5, 30 * time.Second, 30 * time.Second},
		{1000, 30 * time.Second, 30 * time.Second},
		{1, 2 * time.Second, 2 * time.Second},
		{3, 10 * time.Second, 10 * time.Second},
	} {
		if got := handOverBackoff(tc.failures, tc.limit); got != tc.want {
			t.Errorf("handOverBackoff(%d, %s) = %s, want %s", tc.failures, tc.limit, got, tc.want)
		}
	}
}

func TestLeaseVacancy(t *testing.T) {
	const lease = 5 * time.Second
	t0 := time.Now()
	at := t0.Add

	t.Run("released", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("", "10", at(0))
		v.observe("", "10", at(3*time.Second))
		if got := v.freeFor(at(3 * time.Second)); got != 3*time.Second {
			t.Errorf("free for %s, want 3s from the first sight of the released Lease", got)
		}
	})
	t.Run("missing", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("", "", at(0))
		if got := v.freeFor(at(lease)); got != lease {
			t.Errorf("free for %s, want %s", got, lease)
		}
	})
	t.Run("held and renewed", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("other", "1", at(0))
		v.observe("other", "2", at(4*time.Second))
		if got := v.freeFor(at(8 * time.Second)); got != 0 {
			t.Errorf("free for %s, want 0: renewed 4s ago", got)
		}
		if !v.sawOther {
			t.Error("a renewal by another agent must count as another agent seen")
		}
	})
	t.Run("held by a dead agent", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("dead", "1", at(0))
		v.observe("dead", "1", at(7*time.Second))
		if got := v.freeFor(at(7 * time.Second)); got != 2*time.Second {
			t.Errorf("free for %s, want 2s: expired a lease duration after it was first seen", got)
		}
		if v.sawOther {
			t.Error("a record that never changed shows no live agent")
		}
	})
	t.Run("own unreleased record", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("me", "1", at(0))
		v.observe("", "2", at(time.Second))
		if v.sawOther {
			t.Error("our own record and its release are not another agent")
		}
	})
	t.Run("a failed read starts over", func(t *testing.T) {
		v := leaseVacancy{self: "me", leaseDuration: lease}
		v.observe("", "1", at(0))
		v.forget()
		if got := v.freeFor(at(10 * time.Second)); got != 0 {
			t.Errorf("free for %s after a failed read, want 0", got)
		}
		v.observe("", "1", at(10*time.Second))
		if got := v.freeFor(at(11 * time.Second)); got != time.Second {
			t.Errorf("free for %s, want 1s from the next answer", got)
		}
	})
}

// newTestLeadership returns a leadership in a term that began at termStart, with a stepDown that
// counts its calls.
func newTestLeadership(termStart time.Time) (*leadership, *int) {
	stepDowns := 0
	l := &leadership{
		opts:      Options{LeaderElect: true, HandOverRetry: 30 * time.Second},
		termStart: termStart,
		stepDown:  func() { stepDowns++ },
	}
	return l, &stepDowns
}

func TestHandOver(t *testing.T) {
	const member = 0x1234

	t.Run("first hand-over steps down", func(t *testing.T) {
		l, stepDowns := newTestLeadership(time.Now().Add(-time.Minute))
		if !l.handOver(member) {
			t.Fatal("refused")
		}
		waitFor(t, func() bool { l.changeLock.Lock(); defer l.changeLock.Unlock(); return *stepDowns == 1 })
		if !l.steppedDown {
			t.Error("the next holdOff must know the term stepped down")
		}
	})
	t.Run("after nobody took the Lease, the term leads for the back-off", func(t *testing.T) {
		l, stepDowns := newTestLeadership(time.Now().Add(-2 * time.Second))
		l.noTakerFor, l.noTakerCount = member, 1
		if l.handOver(member) {
			t.Fatal("stepped down 2s into a term, under the first back-off of 3s")
		}
		if got := l.handOverRetry(); got != handOverFirstRetry {
			t.Errorf("retry %s, want %s", got, handOverFirstRetry)
		}
		l.termStart = time.Now().Add(-handOverFirstRetry)
		if !l.handOver(member) {
			t.Fatal("refused once the back-off had passed")
		}
		waitFor(t, func() bool { l.changeLock.Lock(); defer l.changeLock.Unlock(); return *stepDowns == 1 })
	})
	t.Run("the back-off doubles", func(t *testing.T) {
		l, _ := newTestLeadership(time.Now().Add(-5 * time.Second))
		l.noTakerFor, l.noTakerCount = member, 2
		if l.handOver(member) {
			t.Fatal("stepped down 5s into a term, under the second back-off of 6s")
		}
	})
	t.Run("without leader election nobody else can take over", func(t *testing.T) {
		l, _ := newTestLeadership(time.Now().Add(-time.Hour))
		l.opts.LeaderElect = false
		if l.handOver(member) {
			t.Fatal("stepped down without leader election")
		}
	})
}

func TestWithdraw(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	l, stepDowns := newTestLeadership(time.Time{})
	if l.withdraw(ended) {
		t.Error("a finished term's watcher withdrew the next term")
	}
	if !l.withdraw(live) || *stepDowns != 1 {
		t.Errorf("a campaigning term was not withdrawn (stepDowns %d)", *stepDowns)
	}
	l, stepDowns = newTestLeadership(time.Now())
	if l.withdraw(live) || *stepDowns != 0 {
		t.Error("a leading term was withdrawn; its controller must hand over instead")
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
