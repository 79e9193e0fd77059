package controller

import (
	"sync"
	"time"
)

// Steps of a removal whose end steps records, named as the removal's log line shows them.
const (
	stepIntent      = "intent"
	stepProbes      = "probes"
	stepMemberList  = "memberList"
	stepFenceLease  = "fenceLease"
	stepFenceObject = "fenceObject"
	stepRemoveSent  = "removeSent"
	stepRemoved     = "removed"
)

// steps records how long after its reconcile began (once it had read the object from the cache)
// each step of a removal ended. The steps run
// side by side, so a slow leave is slow by its longest one: the removal's log line shows which,
// for an operator asking why a leave took long, and the benchmark reports them. A nil steps
// records nothing.
type steps struct {
	now   func() time.Time
	began time.Time

	mu    sync.Mutex
	ended map[string]time.Duration
}

func newSteps(now func() time.Time) *steps {
	return &steps{now: now, began: now(), ended: map[string]time.Duration{}}
}

// done records that step ended now; a step that ends twice (a fence read again) keeps the later.
func (s *steps) done(step string) {
	if s == nil {
		return
	}
	at := s.now().Sub(s.began)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended[step] = at
}

// millis returns the recorded ends in milliseconds, to the microsecond.
func (s *steps) millis() map[string]float64 {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]float64, len(s.ended))
	for step, at := range s.ended {
		out[step] = float64(at.Microseconds()) / 1000
	}
	return out
}
