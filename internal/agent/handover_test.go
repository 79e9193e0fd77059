package agent

import (
	"context"
	"testing"
	"time"
)

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

// newTestLeadership returns a leadership in a term that began at termStart, with a stepDown that
// counts its calls.
func newTestLeadership(termStart time.Time) (*leadership, *int) {
	stepDowns := 0
	l := &leadership{opts: Options{LeaderElect: true, HandOverRetry: 30 * time.Second}}
	l.state.ctx, l.state.end, l.state.start = context.Background(), func() { stepDowns++ }, termStart
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
		if !l.state.steppedDown {
			t.Error("the next holdOff must know the term stepped down")
		}
	})
	t.Run("after nobody took the Lease, the term leads for the back-off", func(t *testing.T) {
		l, stepDowns := newTestLeadership(time.Now().Add(-2 * time.Second))
		l.state.noTakerFor, l.state.noTakerCount = member, 1
		if l.handOver(member) {
			t.Fatal("stepped down 2s into a term, under the first back-off of 3s")
		}
		if got := l.handOverRetry(); got != handOverFirstRetry {
			t.Errorf("retry %s, want %s", got, handOverFirstRetry)
		}
		l.state.start = time.Now().Add(-handOverFirstRetry)
		if !l.handOver(member) {
			t.Fatal("refused once the back-off had passed")
		}
		waitFor(t, func() bool { l.changeLock.Lock(); defer l.changeLock.Unlock(); return *stepDowns == 1 })
	})
	t.Run("the back-off doubles", func(t *testing.T) {
		l, _ := newTestLeadership(time.Now().Add(-5 * time.Second))
		l.state.noTakerFor, l.state.noTakerCount = member, 2
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
