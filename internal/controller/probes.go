package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Probes is the leader's latest view of every member's health.
type Probes struct {
	// Members holds each listed member's latest probe by member ID.
	Members map[uint64]etcd.Health
	// Alarms holds the active alarms by member ID, as last read; a failed read keeps the previous.
	Alarms map[uint64][]string
	// List is the member list the round probed: the latest poll's, since a change of membership
	// starts a round at once.
	List []etcd.Member
	// NotServingSince holds, for each member this round found answering but serving no
	// linearizable read, and only for those, when the first round of its streak of such rounds
	// started: a round that started later is at least the second.
	NotServingSince map[uint64]time.Time
}

// notServing tells whether the round found member id answering but not serving.
func (p *Probes) notServing(id uint64) bool {
	h, ok := p.Members[id]
	return ok && h.Reachable && !h.Serving
}

// notServingAgain tells whether the round found member id not serving, as an earlier round of
// the streak did.
func (p *Probes) notServingAgain(id uint64) bool {
	since, ok := p.NotServingSince[id]
	return ok && p.Members[id].At.After(since)
}

// Healthy tells whether the member's latest probe found it serving: for quorum, a member that
// answers but cannot serve linearizable reads counts as lost.
func (p Probes) Healthy(id uint64) bool { return p.Members[id].Serving }

// servingVoters returns the client URLs, as probed, of every voter round p found serving: where
// the leader's calls to the cluster as a whole go, balanced over those the client can connect to.
// The leader's own member is one of them like any other: when it dies, its connection fails and
// the calls go to the others at once; when it freezes or is cut off, the next round takes it out.
// A leader whose own etcd failed thus still reads the member list and records what its probes
// found, and is no blinder to that failure than to any other. nil when no voter served: no call
// to the cluster can succeed then, wherever it goes, and the last members that served are the
// likeliest to again.
func servingVoters(p Probes) []string {
	var urls []string
	for _, m := range p.List {
		if !m.IsLearner && p.Healthy(m.ID) {
			urls = append(urls, m.ClientURLs...)
		}
	}
	return urls
}

// carryStreaks sets NotServingSince from the round before, prev (nil: none): a member not serving
// in both keeps the start of its streak, one not serving in this round only starts one here.
func (p *Probes) carryStreaks(prev *Probes) {
	p.NotServingSince = map[uint64]time.Time{}
	for id, h := range p.Members {
		if !p.notServing(id) {
			continue
		}
		p.NotServingSince[id] = h.At
		if prev != nil {
			if since, ok := prev.NotServingSince[id]; ok {
				p.NotServingSince[id] = since
			}
		}
	}
}

// summarize renders what counts as a change of health, in a stable order.
//
// A member found not serving again, after an earlier round of its streak, is marked: Healthy
// turns NotServing only from the second round (observeHealth), so that round must reach the
// reconciler although its probe says what the first one did.
func summarize(p Probes) string {
	ids := slices.Sorted(maps.Keys(p.Members))
	var b strings.Builder
	for _, id := range ids {
		h := p.Members[id]
		fmt.Fprintf(&b, "%x:%t,%t,%t,%t,%x,%v,%t;", id, h.Reachable, h.Serving, h.Status.Leader == id,
			h.Status.IsLearner, h.AnsweredBy, p.Alarms[id], p.notServingAgain(id))
	}
	return b.String()
}
