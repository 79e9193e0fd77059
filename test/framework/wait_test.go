package framework_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

var errNotYet = errors.New("not yet")

func TestPoll(t *testing.T) {
	const every = time.Millisecond
	t.Run("done at once", func(t *testing.T) {
		calls := 0
		err := framework.Poll(time.Second, time.Hour, func(context.Context) (bool, error) {
			calls++
			return true, nil
		})
		if err != nil || calls != 1 {
			t.Errorf("Poll = %v after %d calls, want nil after 1", err, calls)
		}
	})
	t.Run("retries errors until done", func(t *testing.T) {
		calls := 0
		err := framework.Poll(10*time.Second, every, framework.Succeeds(func(context.Context) error {
			if calls++; calls < 3 {
				return errNotYet
			}
			return nil
		}))
		if err != nil || calls != 3 {
			t.Errorf("Poll = %v after %d calls, want nil after 3", err, calls)
		}
	})
	t.Run("timeout reports the last error", func(t *testing.T) {
		calls := 0
		err := framework.Poll(50*time.Millisecond, every, func(context.Context) (bool, error) {
			calls++
			return false, fmt.Errorf("attempt %d: %w", calls, errNotYet)
		})
		if !errors.Is(err, errNotYet) || !strings.HasPrefix(err.Error(), "not done after 50ms: attempt ") {
			t.Errorf("Poll = %v, want a timeout wrapping the last error", err)
		}
		if calls < 2 {
			t.Errorf("%d attempts in 50ms at an interval of 1ms", calls)
		}
	})
	t.Run("timeout without an error", func(t *testing.T) {
		err := framework.Poll(20*time.Millisecond, every, func(context.Context) (bool, error) { return false, nil })
		if err == nil || err.Error() != "not done after 20ms" {
			t.Errorf("Poll = %v, want %q", err, "not done after 20ms")
		}
	})
	t.Run("stop ends the wait at once", func(t *testing.T) {
		calls := 0
		err := framework.Poll(10*time.Second, every, framework.Succeeds(func(context.Context) error {
			calls++
			return framework.Stop(errNotYet)
		}))
		if !errors.Is(err, errNotYet) || err.Error() != errNotYet.Error() || calls != 1 {
			t.Errorf("Poll = %v after %d calls, want %v after 1", err, calls, errNotYet)
		}
	})
	t.Run("an attempt cut short keeps the previous error", func(t *testing.T) {
		calls := 0
		err := framework.Poll(30*time.Millisecond, every, func(ctx context.Context) (bool, error) {
			if calls++; calls == 1 {
				return false, errNotYet
			}
			<-ctx.Done()
			return false, ctx.Err()
		})
		if !errors.Is(err, errNotYet) {
			t.Errorf("Poll = %v, want the first attempt's error, not the deadline's", err)
		}
	})
	if framework.Stop(nil) != nil {
		t.Errorf("Stop(nil) is not nil")
	}
}

func TestPerAttempt(t *testing.T) {
	var deadlines []time.Duration
	start := time.Now()
	err := framework.Poll(time.Millisecond, time.Hour, framework.PerAttempt(time.Minute, func(ctx context.Context) (bool, error) {
		d, ok := ctx.Deadline()
		if !ok {
			return false, framework.Stop(errors.New("no deadline"))
		}
		deadlines = append(deadlines, d.Sub(start))
		return true, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	// The attempt's own bound, not the wait's 1ms.
	if len(deadlines) != 1 || deadlines[0] < 59*time.Second || deadlines[0] > time.Minute+time.Second {
		t.Errorf("attempt deadlines %v after the start, want one of about a minute", deadlines)
	}
}

func TestHold(t *testing.T) {
	const every = time.Millisecond
	t.Run("holds through the window", func(t *testing.T) {
		calls := 0
		err := framework.Hold(30*time.Millisecond, every, func(context.Context) (bool, error) {
			calls++
			return true, nil
		})
		if err != nil || calls < 2 {
			t.Errorf("Hold = %v after %d calls, want nil after several", err, calls)
		}
	})
	t.Run("returns at the first break with its error", func(t *testing.T) {
		calls := 0
		start := time.Now()
		err := framework.Hold(10*time.Second, every, func(context.Context) (bool, error) {
			if calls++; calls == 3 {
				return false, errNotYet
			}
			return true, nil
		})
		if !errors.Is(err, errNotYet) || err.Error() != errNotYet.Error() || calls != 3 || time.Since(start) > 5*time.Second {
			t.Errorf("Hold = %v after %d calls and %s, want %v at the third", err, calls, time.Since(start), errNotYet)
		}
	})
	t.Run("false without a reason", func(t *testing.T) {
		err := framework.Hold(10*time.Second, every, func(context.Context) (bool, error) { return false, nil })
		if err == nil || !strings.Contains(err.Error(), "no longer holds") {
			t.Errorf("Hold = %v, want it to say the condition no longer holds", err)
		}
	})
	t.Run("stop is unwrapped", func(t *testing.T) {
		err := framework.Hold(10*time.Second, every, framework.Succeeds(func(context.Context) error { return framework.Stop(errNotYet) }))
		if !errors.Is(err, errNotYet) || err.Error() != errNotYet.Error() {
			t.Errorf("Hold = %v, want %v", err, errNotYet)
		}
	})
}

// fatalTB records the first Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	framework.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs fn with a fatalTB in a goroutine of its own and returns what it failed with.
func fails(fn func(framework.TB)) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.msg
}

func TestEventuallyAndConsistently(t *testing.T) {
	notYet := func(context.Context) (bool, error) { return false, errNotYet }
	holds := func(context.Context) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name string
		fn   func(framework.TB)
		want string
	}{
		{"Eventually done", func(tb framework.TB) { framework.Eventually(tb, time.Second, time.Millisecond, "x", holds) }, ""},
		{"Eventually times out", func(tb framework.TB) {
			framework.Eventually(tb, 10*time.Millisecond, time.Millisecond, "the member removed", notYet)
		}, "the member removed: not done after 10ms: not yet"},
		{"Consistently holds", func(tb framework.TB) {
			framework.Consistently(tb, 10*time.Millisecond, time.Millisecond, "x", holds)
		}, ""},
		{"Consistently breaks", func(tb framework.TB) {
			framework.Consistently(tb, time.Second, time.Millisecond, "spec.leave stays set", notYet)
		}, "spec.leave stays set: not yet"},
	} {
		if got := fails(tc.fn); got != tc.want {
			t.Errorf("%s: failed with %q, want %q", tc.name, got, tc.want)
		}
	}
}
