//go:build bench

package bench

import (
	"testing"
	"time"
)

// The WAN case of issue #17: every raft message between the members takes peerDelay ± peerJitter
// (etcd's fault proxy on each directed link).
const (
	peerDelay     = 200 * time.Millisecond
	peerJitter    = 50 * time.Millisecond
	delayedCycles = 8
)

// delayedArgs size the probes for that network: a linearizable read on a follower costs up to
// two round trips to etcd's leader (docs/api.md, status.health).
var delayedArgs = []string{"--probe-interval=5s", "--probe-timeout=3s"}

// benchDelayed times leaves and raw MemberRemoves, interleaved, with every raft link delayed. The
// apiserver stores on an etcd of its own, so that the figures are etcd's links and the agents,
// not the apiserver's own storage on the slow cluster.
func benchDelayed(t *testing.T, r *results) {
	e := newEnvWith(t, envOptions{size: 3, faultProxies: true, separateStorage: true}, delayedArgs...)
	members := e.cluster.Members()
	for _, a := range members {
		for _, b := range members {
			if a != b {
				e.cluster.PeerLink(t, a, b).Delay(peerDelay, peerJitter)
			}
		}
	}
	for i := range delayedCycles {
		l := e.leaveOnce()
		f := e.floorOnce()
		r.delayedGone = append(r.delayedGone, l.gone)
		r.delayedJoinedFalse = append(r.delayedJoinedFalse, l.joinedFalse)
		r.delayedFloor = append(r.delayedFloor, f.gone)
		t.Logf("delayed cycle %d/%d: leave gone %s, Joined=False %s, leader's steps (ms) %v; MemberRemove gone %s (call %s)",
			i+1, delayedCycles, l.gone, l.joinedFalse, l.steps, f.gone, f.rpc)
	}
}
