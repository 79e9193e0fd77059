// Hand-over back-off: the leader never removes its own member, so it steps down for another agent
// to do it. When no other agent takes the Lease, stepping down again at once would only cost a
// lease duration per attempt; the term keeps leading for every other object instead and retries
// the hand-over after a back-off that grows for each attempt in a row that nobody took.

package agent

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// handOverFirstRetry is how long the first term after a failed hand-over keeps leadership before
// it tries again; each further failure for the same member doubles it, up to --hand-over-retry.
// A failed hand-over already proved that no other agent took the Lease for a whole lease
// duration, so another agent appearing soon is unlikely; but it does happen (an agent restarting,
// or a frozen one resuming), and a fixed long retry made such a leave wait 30 s for nothing.
const handOverFirstRetry = 3 * time.Second

// handOver steps down so another agent can remove memberID, unless that cannot help: without
// leader election there is nobody else, and after a holdOff in which nobody took the Lease, no
// other agent is campaigning. Such a term keeps leadership for the back-off (handOverRetry) and
// then tries again, in case an agent has come back since.
func (l *leadership) handOver(memberID uint64) bool {
	if !l.opts.LeaderElect {
		return false
	}
	s := &l.state
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	l.markTermStartLocked(now)
	if s.noTakerFor == memberID && s.noTakerCount > 0 && now.Sub(s.start) < l.handOverRetryLocked() {
		return false
	}
	s.steppedDown = true
	// The reconcile that asks holds changeLock until its status (HandingOver) is written, and
	// endTerm waits for it: hence in the background.
	go l.endTerm(s.ctx, whetherLeadingOrNot)
	return true
}

// handOverRetry is how long the current term keeps leadership after a failed hand-over before
// trying again: handOverFirstRetry doubled for every holdOff in a row that found no other agent,
// capped at --hand-over-retry. With no failure yet (or without leader election, where every
// hand-over fails) it is the cap.
func (l *leadership) handOverRetry() time.Duration {
	l.state.mu.Lock()
	defer l.state.mu.Unlock()
	return l.handOverRetryLocked()
}

func (l *leadership) handOverRetryLocked() time.Duration {
	return handOverBackoff(l.state.noTakerCount, l.opts.HandOverRetry)
}

// handOverBackoff is handOverFirstRetry doubled failures-1 times, capped; the cap for 0 failures.
func handOverBackoff(failures int, limit time.Duration) time.Duration {
	if failures <= 0 {
		return limit
	}
	b := wait.Backoff{Duration: handOverFirstRetry, Factor: 2, Cap: limit, Steps: failures}
	for range failures - 1 {
		b.Step()
	}
	return min(b.Duration, limit)
}

func (l *leadership) recordNoTaker(sawOther bool) int {
	s := &l.state
	s.mu.Lock()
	defer s.mu.Unlock()
	id := l.registrar.LocalMemberID()
	// Another agent led meanwhile, so the count of failures in a row starts again.
	if sawOther || s.noTakerFor != id {
		s.noTakerCount = 0
	}
	s.noTakerFor = id
	s.noTakerCount++
	return s.noTakerCount
}

func (l *leadership) resetNoTaker() {
	l.state.mu.Lock()
	defer l.state.mu.Unlock()
	l.state.noTakerFor, l.state.noTakerCount = 0, 0
}
