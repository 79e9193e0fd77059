package controller

import (
	"time"
)

// timers measure, on the leader's own clock, the two durations the controller acts on: how long a
// voter has been unreachable, and how long a learner has gone without progress. They also remember
// what operators were told about an unreachable voter the policy holds back. They live in the
// reconciler, so a new leader starts them afresh: a member is then removed later than it could
// have been, never sooner. Neither comes from a condition's lastTransitionTime, which moves only
// when the condition's status does: a member False/Alarm for an hour that then stops answering
// is still False, and timing "unreachable" from there would remove it after one probe.
type timers struct {
	// unreachable holds when each member was first seen unreachable in its current streak.
	unreachable map[uint64]time.Time
	// progress holds each learner's last raft index and when it last advanced.
	progress map[uint64]learnerProgress
	// announced holds, for each unreachable member, the outage the dead-member policy's hold-back
	// Events were about and the reasons they gave, so a hold re-checked every few seconds is
	// announced once per reason and outage, even when it alternates between two reasons. Across
	// leader changes the object's UnreachableLeaveHeld condition says it instead.
	announced map[uint64]announcement
	// traffic holds, for each unreachable member and each voter whose metrics were read about
	// it, the bytes that voter had received from it at the sample a silence is measured from.
	traffic map[uint64]map[uint64]trafficSample
	// movesHeld holds, for each member asked to leave whose removal was refused once etcd
	// leadership had moved away from it, until when leadership is not moved away again.
	movesHeld map[uint64]time.Time
}

type trafficSample struct {
	received float64
	at       time.Time
	// leader is the etcd leader when the sample was taken: only a leader hears every voter, so
	// a silence counts only when one leader held all through it.
	leader uint64
}

type announcement struct {
	outage  string
	reasons map[string]bool
}

type learnerProgress struct {
	index uint64
	at    time.Time
}

// unreachableFor records whether member id is unreachable at now and returns for how long it has
// been, without a break; 0 when it is not.
func (t *timers) unreachableFor(id uint64, unreachable bool, now time.Time) time.Duration {
	if !unreachable {
		delete(t.unreachable, id)
		delete(t.announced, id)
		delete(t.traffic, id)
		return 0
	}
	if t.unreachable == nil {
		t.unreachable = map[uint64]time.Time{}
	}
	since, ok := t.unreachable[id]
	if !ok {
		t.unreachable[id] = now
		return 0
	}
	return now.Sub(since)
}

// stalledFor records learner id's raft index at now (known is false when no probe answered) and
// returns how long it has gone without progress. Progress is its raft index advancing, or
// reaching the highest index the voters reported (lead): on a cluster with no writes a learner
// that caught up has nothing left to replicate, and is not stalled. The first sighting counts as
// progress, so that a learner never stalls for longer than the leader has watched it.
func (t *timers) stalledFor(id uint64, index uint64, known bool, lead uint64, now time.Time) time.Duration {
	if t.progress == nil {
		t.progress = map[uint64]learnerProgress{}
	}
	last, seen := t.progress[id]
	switch {
	case !seen:
		t.progress[id] = learnerProgress{index: index, at: now}
		return 0
	case known && (index > last.index || index >= lead):
		t.progress[id] = learnerProgress{index: index, at: now}
		return 0
	}
	return now.Sub(last.at)
}

// announce records that operators were told reason about member id's outage, and tells whether
// that is news: a reason not yet given for this outage.
func (t *timers) announce(id uint64, outage, reason string) bool {
	a, ok := t.announced[id]
	if !ok || a.outage != outage {
		a = announcement{outage: outage, reasons: map[string]bool{}}
	}
	if a.reasons[reason] {
		return false
	}
	a.reasons[reason] = true
	if t.announced == nil {
		t.announced = map[uint64]announcement{}
	}
	t.announced[id] = a
	return true
}

// heard compares what observer has received from member id with the sample a silence is
// measured from, and says whether observer heard id since (heard), or heard nothing for at least
// window (silent); neither while the sample is younger than window, or was just (re)taken: at the
// first read, after observer restarted (its counter went back), or when the etcd leader changed.
func (t *timers) heard(id, observer uint64, received float64, leader uint64, now time.Time, window time.Duration) (heard, silent bool) {
	if t.traffic == nil {
		t.traffic = map[uint64]map[uint64]trafficSample{}
	}
	if t.traffic[id] == nil {
		t.traffic[id] = map[uint64]trafficSample{}
	}
	last, ok := t.traffic[id][observer]
	next := trafficSample{received: received, at: now, leader: leader}
	switch {
	case !ok || received < last.received || leader != last.leader:
		t.traffic[id][observer] = next
		return false, false
	case received > last.received:
		t.traffic[id][observer] = next
		return true, false
	case now.Sub(last.at) < window:
		return false, false
	}
	return false, true
}

// forget drops what the timers hold for a member that left etcd or became a voter.
func (t *timers) forget(id uint64) {
	delete(t.movesHeld, id)
	delete(t.unreachable, id)
	delete(t.progress, id)
	delete(t.announced, id)
	delete(t.traffic, id)
}
