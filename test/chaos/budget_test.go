package chaos

import (
	"math/bits"
	"testing"
)

// quorum is the number of votes a cluster of n voters needs to commit anything.
func quorum(n int) int { return n/2 + 1 }

// quorumHolds is the injector's own quorum rule, on bit sets of member indices: for every set of
// pending leave targets the controller could still remove (never every voter: it keeps the last
// one), the voters that remain and are not down must be a quorum of the voters that remain.
//
// The injector only takes a member down (or adds one, which counts as down until it serves) when
// this holds afterwards, whatever the controller does with the leaves in flight. A leave issued
// while members are down is the controller's to refuse. So once the cluster has fewer running
// voters than its quorum needs, a removal by the controller got it there, never the injector.
func quorumHolds(voters, down, pending uint) bool {
	pending &= voters
	// Every subset of pending, the empty set included, by the usual sub-mask walk.
	for s := pending; ; s = (s - 1) & pending {
		rest := voters &^ s
		if n := bits.OnesCount(rest); n > 0 && bits.OnesCount(rest&^down) < quorum(n) {
			return false
		}
		if s == 0 {
			return true
		}
	}
}

// TestQuorumHolds pins the rule down on the cases docs/safety.md and the clarifications name.
func TestQuorumHolds(t *testing.T) {
	const (
		a = 1 << iota
		b
		c
		d
		e
	)
	cases := []struct {
		name                  string
		voters, down, pending uint
		want                  bool
	}{
		{"three healthy", a | b | c, 0, 0, true},
		{"three, one down", a | b | c, c, 0, true},
		{"three, two down", a | b | c, b | c, 0, false},
		{"four, one down", a | b | c | d, d, 0, true},
		{"four, two down", a | b | c | d, c | d, 0, false},
		{"five, two down", a | b | c | d | e, d | e, 0, true},
		// With a leave pending for b, the injector plans for b being removed as well.
		{"three, one down, a leave for another", a | b | c, c, b, false},
		{"three, one down, a leave for the dead one", a | b | c, c, c, true},
		{"four, one down, a leave for another", a | b | c | d, d, b, true},
		// Clarification: four voters with one dead, two leaves for healthy members. The rule
		// refuses to take d down once both are pending, since both removals would leave a and
		// d, one dead; leaves issued after the fault are the controller's to refuse.
		{"four, one down, two leaves", a | b | c | d, d, b | c, false},
		{"three healthy, two leaves", a | b | c, 0, a | b, true},
		{"three, all asked to leave", a | b | c, 0, a | b | c, true},
		{"two, one down", a | b, b, 0, false},
		{"one", a, 0, a, true},
		{"a joining member counts as down", a | b | c | d, d, 0, true},
		{"joining into two of three", a | b | c | d, c | d, 0, false},
	}
	for _, tc := range cases {
		if got := quorumHolds(tc.voters, tc.down, tc.pending); got != tc.want {
			t.Errorf("%s: quorumHolds(%05b, %05b, %05b) = %v, want %v", tc.name, tc.voters, tc.down, tc.pending, got, tc.want)
		}
	}
}
