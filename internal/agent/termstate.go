package agent

import (
	"context"
	"errors"
	"sync"
	"time"
)

// termState is what the agent keeps of its leadership terms, all under one mutex. Only endTerm
// ends a term, and it owns the lock order: changeLock first (a reconcile holds it from its
// decision to its status write, so a term never ends in the middle of a change), then mu.
type termState struct {
	mu sync.Mutex
	// ctx is the current term's context and end cancels it. A term's context ends before the
	// next term begins, so an ended context names an ended term.
	ctx context.Context
	end context.CancelFunc
	// start is when the current term began leading; zero while it campaigns.
	start time.Time
	// steppedDown: the last term ended in a hand-over. The next holdOff stays out even before
	// its cache shows the leave that the term's controller acted on.
	steppedDown bool
	// noTakerCount counts the holdOffs in a row that ended with nobody taking the Lease while
	// noTakerFor, the local member, had a pending leave; it sets the hand-over back-off.
	noTakerFor   uint64
	noTakerCount int
}

// endCondition says which terms endTerm may end.
type endCondition int

const (
	// whetherLeadingOrNot: a hand-over, or a local member unusable for too long.
	whetherLeadingOrNot endCondition = iota
	// onlyWhileCampaigning: a withdrawal, which must never cut off a term that won the Lease an
	// instant ago; a leading term hands over instead, and says so on the object.
	onlyWhileCampaigning
)

// errLeaseLost: the term's leader election stopped leading without being asked to, the Lease not
// renewed in time. Expected in an apiserver outage, and no fault of this agent.
var errLeaseLost = errors.New("the leader Lease was not renewed in time")

// leaseLostMessage is the error text controller-runtime's manager (v0.25) returns when its
// leader election stops leading unasked. It exports neither a value to compare with nor a hook
// (its onStoppedLeading is unexported), so runTerm turns the text into errLeaseLost, here alone.
const leaseLostMessage = "leader election lost"

// beginTerm records a new term, campaigning until markTermStart.
func (l *leadership) beginTerm(ctx context.Context, end context.CancelFunc) {
	l.state.mu.Lock()
	defer l.state.mu.Unlock()
	l.state.ctx, l.state.end, l.state.start = ctx, end, time.Time{}
}

// currentTerm returns the current term's context, for a runnable of that term to end it later.
func (l *leadership) currentTerm() context.Context {
	l.state.mu.Lock()
	defer l.state.mu.Unlock()
	return l.state.ctx
}

// endTerm ends the term of termCtx, when it is still the current one and when allows it, and
// reports whether it did. It waits for any membership change in flight to record its outcome.
func (l *leadership) endTerm(termCtx context.Context, when endCondition) bool {
	l.changeLock.Lock()
	defer l.changeLock.Unlock()
	l.state.mu.Lock()
	defer l.state.mu.Unlock()
	if termCtx.Err() != nil || (when == onlyWhileCampaigning && !l.state.start.IsZero()) {
		return false
	}
	l.state.end()
	return true
}

// markTermStart records when leadership began, once per term. A reconcile may run before the
// termStarted runnable does, so whichever comes first sets it.
func (l *leadership) markTermStart(t time.Time) {
	l.state.mu.Lock()
	defer l.state.mu.Unlock()
	l.markTermStartLocked(t)
}

func (l *leadership) markTermStartLocked(t time.Time) {
	if l.state.start.IsZero() {
		l.state.start = t
	}
}
