package quorum

import (
	"fmt"
	"testing"
)

// voters builds n voters with IDs 1..n; the first `dead` of them are unhealthy.
func voters(n, dead int) []Voter {
	vs := make([]Voter, n)
	for i := range vs {
		vs[i] = Voter{ID: uint64(i + 1), Name: fmt.Sprintf("node-%d", i+1), Healthy: i >= dead}
	}
	return vs
}

func TestOf(t *testing.T) {
	want := map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4}
	for n, q := range want {
		if got := Of(n); got != q {
			t.Errorf("Of(%d) = %d, want %d", n, got, q)
		}
	}
}

// TestCheckRemovalTable walks sizes 1..7 with 0..n unhealthy voters, removing a healthy and an
// unhealthy voter, and compares with the rule written out independently: after removal, the
// healthy voters left must reach the quorum of the voters left.
func TestCheckRemovalTable(t *testing.T) {
	for n := 1; n <= 7; n++ {
		for dead := 0; dead <= n; dead++ {
			vs := voters(n, dead)
			for _, target := range vs {
				healthyLeft := n - dead
				if target.Healthy {
					healthyLeft--
				}
				left := n - 1
				wantAllowed := left > 0 && 2*healthyLeft > left
				got := CheckRemoval(vs, target.ID, target.Name)
				if got.Allowed != wantAllowed {
					t.Errorf("n=%d dead=%d target=%s healthy=%v: allowed=%v, want %v (%s)",
						n, dead, target.Name, target.Healthy, got.Allowed, wantAllowed, got.Message)
				}
				if got.LastVoter != (n == 1) {
					t.Errorf("n=%d: LastVoter=%v", n, got.LastVoter)
				}
				if n > 1 && (got.VotersAfter != left || got.HealthyAfter != healthyLeft || got.Quorum != Of(left)) {
					t.Errorf("n=%d dead=%d target=%s: numbers %+v", n, dead, target.Name, got)
				}
			}
		}
	}
}

func TestCheckRemovalCases(t *testing.T) {
	cases := []struct {
		name    string
		voters  []Voter
		target  uint64
		allowed bool
		message string
	}{
		{"3 healthy, remove one", voters(3, 0), 3, true,
			"removing x would leave 2 healthy voters of 2; quorum of 2 needs 2"},
		{"3 with one dead, remove a healthy one", voters(3, 1), 2, false,
			"removing x would leave 1 healthy voter of 2; quorum of 2 needs 2"},
		{"3 with one dead, remove the dead one", voters(3, 1), 1, true,
			"removing x would leave 2 healthy voters of 2; quorum of 2 needs 2"},
		{"2 healthy, remove one", voters(2, 0), 2, true,
			"removing x would leave 1 healthy voter of 1; quorum of 1 needs 1"},
		{"4 with one dead, remove a healthy one", voters(4, 1), 4, true,
			"removing x would leave 2 healthy voters of 3; quorum of 3 needs 2"},
		{"learner or unknown ID", voters(3, 2), 99, true,
			"x is not a voter; removing it does not change the quorum"},
		{"the only voter", voters(1, 0), 1, false,
			"x is the only voting member; etcd cannot run without it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckRemoval(tc.voters, tc.target, "x")
			if got.Allowed != tc.allowed || got.Message != tc.message {
				t.Errorf("got allowed=%v %q, want allowed=%v %q", got.Allowed, got.Message, tc.allowed, tc.message)
			}
		})
	}
}

// TestSerializedRemovals follows the clarified rule: each request is judged against the cluster
// as it stands after the previous change.
func TestSerializedRemovals(t *testing.T) {
	// Three healthy voters, two leave requests: both pass, one after the other.
	vs := voters(3, 0)
	if v := CheckRemoval(vs, 1, "node-1"); !v.Allowed {
		t.Fatalf("first removal of 3 refused: %s", v.Message)
	}
	if v := CheckRemoval(vs[1:], 2, "node-2"); !v.Allowed {
		t.Fatalf("second removal (2 -> 1) refused: %s", v.Message)
	}
	// Four voters, one dead, two healthy members asked to leave: the second is refused once the
	// first is gone, although the old snapshot would have allowed it.
	vs = voters(4, 1)
	if v := CheckRemoval(vs, 3, "node-3"); !v.Allowed {
		t.Fatalf("first removal refused: %s", v.Message)
	}
	if v := CheckRemoval(vs, 4, "node-4"); !v.Allowed {
		t.Fatalf("against the old snapshot the second removal looks allowed: %s", v.Message)
	}
	after := []Voter{vs[0], vs[1], vs[3]}
	if v := CheckRemoval(after, 4, "node-4"); v.Allowed {
		t.Fatalf("second removal after the first must be refused, got %s", v.Message)
	}
}

func TestCheckPromotion(t *testing.T) {
	healthy := func(flags ...bool) []Voter {
		var vs []Voter
		for i, h := range flags {
			vs = append(vs, Voter{ID: uint64(i + 1), Name: fmt.Sprintf("m%d", i+1), Healthy: h})
		}
		return vs
	}
	cases := []struct {
		name           string
		voters         []Voter
		learnerHealthy bool
		allowed        bool
		healthyAfter   int
		quorum         int
	}{
		{"one voter and a healthy learner", healthy(true), true, true, 2, 2},
		{"three healthy voters", healthy(true, true, true), true, true, 4, 3},
		{"three voters, one down: four with three healthy keeps quorum", healthy(true, true, false), true, true, 3, 3},
		{"four voters, two down: five with three healthy keeps quorum", healthy(true, true, false, false), true, true, 3, 3},
		{"three voters, two down: the cluster has no quorum to promote into", healthy(true, false, false), true, false, 2, 3},
		{"unhealthy learner is never promoted", healthy(true, true, true), false, false, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckPromotion(tc.voters, tc.learnerHealthy, "new")
			if v.Allowed != tc.allowed || v.HealthyAfter != tc.healthyAfter || v.Quorum != tc.quorum {
				t.Fatalf("got allowed=%v healthyAfter=%d quorum=%d (%s), want %v %d %d",
					v.Allowed, v.HealthyAfter, v.Quorum, v.Message, tc.allowed, tc.healthyAfter, tc.quorum)
			}
			if v.Message == "" {
				t.Fatal("verdict carries no message")
			}
		})
	}
}
