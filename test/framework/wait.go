package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// The waits of every test package: Eventually and Poll wait until something holds, Consistently
// and Hold check that it keeps holding for a while. They are built on wait.PollUntilContextTimeout:
// the first attempt runs at once, the next ones every interval.

// Condition is one attempt of a wait. done tells whether what is awaited holds. A non-nil err says
// why it does not hold yet: the wait goes on, and reports the last such error if it runs out of
// time. Wrap an error in Stop to end the wait at once, for a state that retrying cannot change.
//
// ctx ends with the wait; PerAttempt gives each attempt a bound of its own.
type Condition func(ctx context.Context) (done bool, err error)

// Succeeds turns a call that is retried until it returns nil into a Condition.
func Succeeds(call func(ctx context.Context) error) Condition {
	return func(ctx context.Context) (bool, error) {
		err := call(ctx)
		return err == nil, err
	}
}

// PerAttempt runs each attempt of cond under a context of its own that ends after d, so that one
// hung call costs one attempt rather than the whole wait. The attempt context is not cut short
// at the wait's timeout: an attempt started just before it still gets d, and its own answer.
func PerAttempt(d time.Duration, cond Condition) Condition {
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		defer cancel()
		return cond(ctx)
	}
}

// stopError ends a wait at once.
type stopError struct{ err error }

func (s stopError) Error() string { return s.err.Error() }
func (s stopError) Unwrap() error { return s.err }

// Stop marks an error from a Condition that retrying cannot fix: the wait ends with it at once.
func Stop(err error) error {
	if err == nil {
		return nil
	}
	return stopError{err}
}

// Poll runs cond at once and then every interval until it is done, and returns nil. It returns
// the error cond stopped with, or, once timeout has passed, an error saying so that wraps the last
// error cond gave (errors.Is and errors.As see through it).
func Poll(timeout, interval time.Duration, cond Condition) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, err := cond(ctx)
		var stop stopError
		switch {
		case errors.As(err, &stop):
			return false, stop
		case done:
			return true, nil
		case err != nil && (last == nil || ctx.Err() == nil):
			// An attempt the timeout cut short does not hide why the previous one failed.
			last = err
		}
		return false, nil
	})
	var stop stopError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &stop):
		return stop.err
	case last != nil:
		return fmt.Errorf("not done after %s: %w", timeout, last)
	}
	return fmt.Errorf("not done after %s", timeout)
}

// Eventually is Poll that fails the test, naming what was awaited, when cond is not done in time
// or stops.
func Eventually(t TB, timeout, interval time.Duration, what string, cond Condition) {
	t.Helper()
	if err := Poll(timeout, interval, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// errNotHeld is Hold's error for a Condition that returned false without saying why.
var errNotHeld = errors.New("the condition no longer holds")

// Hold runs cond at once and then every interval until window has passed, and returns nil if it
// was done every time. Otherwise it returns at the first attempt that was not done, with the error
// cond gave (a Stop error unwrapped). For what must not happen, such as a leave being revoked, a
// window of observation is the only evidence there is.
func Hold(window, interval time.Duration, cond Condition) error {
	var broken error
	// The poll's own condition never fails, so the only error it can end with is the window's end.
	_ = wait.PollUntilContextTimeout(context.Background(), interval, window, true, func(ctx context.Context) (bool, error) {
		done, err := cond(ctx)
		switch {
		case err != nil:
			broken = err
		case !done:
			broken = errNotHeld
		}
		return broken != nil, nil
	})
	var stop stopError
	if errors.As(broken, &stop) {
		return stop.err
	}
	return broken
}

// Consistently is Hold that fails the test, naming what had to hold, at the first attempt that
// was not done.
func Consistently(t TB, window, interval time.Duration, what string, cond Condition) {
	t.Helper()
	if err := Hold(window, interval, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
