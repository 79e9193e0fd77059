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
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.markTermStartLocked(now)
	if l.noTakerFor == memberID && l.noTakerCount > 0 && now.Sub(l.termStart) < l.handOverRetryLocked() {
		return false
	}
	l.steppedDown = true
	// The reconcile that asks holds changeLock until its status (HandingOver) is written; ending
	// the term before that would cancel the write, so the term ends once the lock is free.
	stepDown := l.stepDown
	go func() {
		l.changeLock.Lock()
		defer l.changeLock.Unlock()
		stepDown()
	}()
	return true
}

// handOverRetry is how long the current term keeps leadership after a failed hand-over before
// trying again: handOverFirstRetry doubled for every holdOff in a row that found no other agent,
// capped at --hand-over-retry. With no failure yet (or without leader election, where every
// hand-over fails) it is the cap.
func (l *leadership) handOverRetry() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handOverRetryLocked()
}

func (l *leadership) handOverRetryLocked() time.Duration {
	return handOverBackoff(l.noTakerCount, l.opts.HandOverRetry)
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
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.registrar.LocalMemberID()
	// Another agent led meanwhile, so the count of failures in a row starts again.
	if sawOther || l.noTakerFor != id {
		l.noTakerCount = 0
	}
	l.noTakerFor = id
	l.noTakerCount++
	return l.noTakerCount
}

func (l *leadership) resetNoTaker() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noTakerFor, l.noTakerCount = 0, 0
}
