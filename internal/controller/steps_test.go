package controller

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestStepsRecordEachEndFromTheStart(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	s := newSteps(clock.Now)
	clock.SetTime(clock.Now().Add(1500 * time.Microsecond))
	s.done(stepIntent)
	clock.SetTime(clock.Now().Add(2 * time.Millisecond))
	s.done(stepFenceObject)
	// A fence read again right before the removal ended later: the log line must show that end.
	clock.SetTime(clock.Now().Add(time.Millisecond))
	s.done(stepFenceObject)

	got := s.millis()
	want := map[string]float64{stepIntent: 1.5, stepFenceObject: 4.5}
	if len(got) != len(want) {
		t.Fatalf("steps = %v, want %v", got, want)
	}
	for step, ms := range want {
		if got[step] != ms {
			t.Errorf("step %s ended at %v ms, want %v ms (all: %v)", step, got[step], ms, got)
		}
	}
}

func TestNilStepsRecordNothing(t *testing.T) {
	var s *steps
	s.done(stepRemoved)
	if got := s.millis(); got != nil {
		t.Fatalf("nil steps returned %v", got)
	}
	var h *headStart
	if h.timings() != nil {
		t.Fatal("a nil head start has timings")
	}
}
