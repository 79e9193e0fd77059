// Package quorum decides whether removing a member keeps an etcd cluster able to commit.
package quorum

import "fmt"

// Voter is a voting member and whether a direct probe found it healthy.
type Voter struct {
	ID      uint64
	Name    string
	Healthy bool
}

// Of returns the quorum of a cluster with n voters.
func Of(n int) int { return n/2 + 1 }

// Verdict is the answer for one removal, with the numbers behind it.
type Verdict struct {
	Allowed bool
	// LastVoter is set when the target is the only voter: no guard setting can allow that.
	LastVoter bool
	// VotersAfter and HealthyAfter count the voters that would remain, and the healthy ones
	// among them; Quorum is the quorum of VotersAfter.
	VotersAfter  int
	HealthyAfter int
	Quorum       int
	Message      string
}

// CheckRemoval judges removing the voter targetID (named name) from voters. The rule: the voters
// that remain must include at least a quorum of healthy ones, so the smaller cluster can still
// commit, whatever the target's own health. A target that is not among the voters (a learner, or
// already gone) costs no vote and is always allowed.
func CheckRemoval(voters []Voter, targetID uint64, name string) Verdict {
	found := false
	v := Verdict{}
	for _, voter := range voters {
		if voter.ID == targetID {
			found = true
			continue
		}
		v.VotersAfter++
		if voter.Healthy {
			v.HealthyAfter++
		}
	}
	if !found {
		v.Allowed = true
		v.Message = fmt.Sprintf("%s is not a voter; removing it does not change the quorum", name)
		return v
	}
	if v.VotersAfter == 0 {
		v.LastVoter = true
		v.Message = fmt.Sprintf("%s is the only voting member; etcd cannot run without it", name)
		return v
	}
	v.Quorum = Of(v.VotersAfter)
	v.Allowed = v.HealthyAfter >= v.Quorum
	v.Message = fmt.Sprintf("removing %s would leave %d healthy %s of %d; quorum of %d needs %d",
		name, v.HealthyAfter, plural(v.HealthyAfter, "voter", "voters"), v.VotersAfter, v.VotersAfter, v.Quorum)
	return v
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// CheckPromotion judges making a learner (named name) a voter. A promotion raises the quorum
// with the voter count, so the learner must itself be healthy and the healthy voters including
// it must make the larger quorum: promoting a learner that then fails to keep up in a cluster
// already missing a voter would stop the cluster from committing.
func CheckPromotion(voters []Voter, learnerHealthy bool, name string) Verdict {
	v := Verdict{VotersAfter: len(voters) + 1}
	for _, voter := range voters {
		if voter.Healthy {
			v.HealthyAfter++
		}
	}
	if learnerHealthy {
		v.HealthyAfter++
	}
	v.Quorum = Of(v.VotersAfter)
	v.Allowed = learnerHealthy && v.HealthyAfter >= v.Quorum
	switch {
	case !learnerHealthy:
		v.Message = fmt.Sprintf("%s did not answer the latest probe; a voter that cannot keep up raises the quorum for nothing", name)
	default:
		v.Message = fmt.Sprintf("promoting %s would make %d healthy %s of %d; quorum of %d needs %d",
			name, v.HealthyAfter, plural(v.HealthyAfter, "voter", "voters"), v.VotersAfter, v.VotersAfter, v.Quorum)
	}
	return v
}
