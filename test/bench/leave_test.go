//go:build bench

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// benchLeave times leaves against raw MemberRemoves and least-cost leaves (leastSample) of the
// same kind of member on one cluster, interleaved so that all three see the same machine load,
// then times failovers with the tests' agent timings.
func benchLeave(t *testing.T, r *results) {
	e := newEnv(t, 3)
	e.createLeastConfigMap()
	errorsBefore := e.memberRemoveErrors()
	for i := range leaveCycles {
		l := e.leaveOnce()
		f := e.floorOnce()
		least := e.leastOnce(i)
		r.least = append(r.least, least)
		r.leaveIntent = append(r.leaveIntent, l.intent)
		r.leaveGone = append(r.leaveGone, l.gone)
		r.leaveJoinedFalse = append(r.leaveJoinedFalse, l.joinedFalse)
		r.leaveSteps = append(r.leaveSteps, l.steps)
		r.floorGone = append(r.floorGone, f.gone)
		r.floorRPC = append(r.floorRPC, f.rpc)
		t.Logf("cycle %d/%d: leave intent %s, gone %s, Joined=False %s, leader's steps (ms) %v; MemberRemove gone %s (call %s); least-cost leave gone %s (seen %s, ready %s, call %s)",
			i+1, leaveCycles, l.intent, l.gone, l.joinedFalse, l.steps, f.gone, f.rpc, least.gone, least.seen, least.ready, least.rpc)
	}
	r.leaveRemoveErrors = e.memberRemoveErrors() - errorsBefore
	r.failover[testTimings] = e.failovers(runsFromEnv(t, failoverRunsEnv, failoverRuns))
}

// leaveSample is one leave, timed from the accepted spec.leave patch: until the leader's
// removal intent (stored in etcd before its MemberRemove) is seen by an etcd watch, until etcd no
// longer lists the member, and until Joined=False is seen. steps is what the leader's log says
// of its removing reconcile: when each step ended, in ms after the reconcile began.
type leaveSample struct {
	intent, gone, joinedFalse time.Duration
	steps                     map[string]float64
}

func (e *env) leaveOnce() leaveSample {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	rm := e.startRemoval(ctx)
	target, idHex := rm.target, rm.target.IDHex()
	intent := intentStoredAt(ctx, e.t, rm.cli, target.ID())
	joinedFalse := e.watchMember(ctx, target.Name, func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == idHex && m.RecordedGone()
	})
	e.patchLeave(ctx, target.Name)
	accepted := time.Now()
	s := leaveSample{
		intent:      await(ctx, e.t, intent, target.Name+" removal intent").Sub(accepted),
		gone:        await(ctx, e.t, rm.gone, target.Name+" gone from etcd").Sub(accepted),
		joinedFalse: await(ctx, e.t, joinedFalse, target.Name+" Joined=False").at.Sub(accepted),
	}
	s.steps = e.removalSteps(idHex)
	e.rejoin(target)
	return s
}

// floorSample is one raw MemberRemove: until the member list no longer has the member, and the
// call itself.
type floorSample struct{ gone, rpc time.Duration }

func (e *env) floorOnce() floorSample {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	rm := e.startRemoval(ctx)
	callCtx, callCancel := context.WithTimeout(ctx, callTimeout)
	defer callCancel()
	start := time.Now()
	if _, err := rm.cli.MemberRemove(callCtx, rm.target.ID()); err != nil {
		e.t.Fatalf("MemberRemove %s: %v", rm.target.Name, err)
	}
	rpc := time.Since(start)
	s := floorSample{gone: await(ctx, e.t, rm.gone, rm.target.Name+" gone from etcd").Sub(start), rpc: rpc}
	e.rejoin(rm.target)
	return s
}

// failoverSample is one leave carried out by a new leader after the old one was SIGKILLed.
type failoverSample struct {
	// gone is from the kill to the member's absence from the member list.
	gone time.Duration
	// handedOver: the agent that took over first was the leaving member's own, which never
	// removes its own member, so a second hand-over came before the removal.
	handedOver bool
}

func (e *env) failovers(runs int) []failoverSample {
	e.t.Helper()
	var out []failoverSample
	for i := range runs {
		s := e.failoverOnce()
		e.t.Logf("failover %d/%d: gone %s after the kill (hand-over: %v)", i+1, runs, s.gone, s.handedOver)
		out = append(out, s)
	}
	return out
}

// failoverOnce kills the leading agent, asks at once for another member's leave and times its
// removal; then restarts the agent and brings the member back.
func (e *env) failoverOnce() failoverSample {
	e.t.Helper()
	target, stay := e.pickTarget()
	leader := e.agents[stay.Name]
	e.waitRemovable()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	gone := goneAt(ctx, e.etcd[stay.Name], target.ID())
	handingOver := e.watchMember(ctx, target.Name, func(m *v1alpha1.EtcdMember) bool {
		return status.HasReason(m, v1alpha1.ConditionLeft, v1alpha1.ReasonHandingOver)
	})
	killed := time.Now()
	leader.Kill(e.t)
	e.patchLeave(ctx, target.Name)
	s := failoverSample{gone: await(ctx, e.t, gone, target.Name+" gone from etcd").Sub(killed)}
	select {
	case <-handingOver:
		s.handedOver = true
	default:
	}
	leader.Start(e.t)
	e.rejoin(target)
	return s
}

// removalSteps finds the leader's log line of member idHex's removal and returns its steps
// (ms after the reconcile began); the line is written before the status write that the cycle
// waited for.
func (e *env) removalSteps(idHex string) map[string]float64 {
	e.t.Helper()
	for _, a := range e.agents {
		f, err := os.Open(a.LogFile())
		if err != nil {
			e.t.Fatalf("agent %s log: %v", a.Name, err)
		}
		steps, found := findRemovalSteps(f, idHex)
		_ = f.Close()
		if found {
			return steps
		}
	}
	e.t.Fatalf("no agent logged the removal of member %s with its steps", idHex)
	return nil
}

// findRemovalSteps scans an agent's JSON log for the removal line of member idHex.
func findRemovalSteps(log io.Reader, idHex string) (map[string]float64, bool) {
	lines := bufio.NewScanner(log)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		var entry struct {
			Msg      string             `json:"msg"`
			MemberID string             `json:"memberID"`
			Steps    map[string]float64 `json:"stepsMs"`
		}
		if json.Unmarshal(lines.Bytes(), &entry) != nil {
			continue
		}
		if entry.Msg == "Removed member from etcd" && entry.MemberID == idHex && entry.Steps != nil {
			return entry.Steps, true
		}
	}
	return nil, false
}
