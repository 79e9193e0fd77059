//go:build bench

package bench

import (
	"context"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// benchLeave times leaves against raw MemberRemoves of the same kind of member on one cluster,
// interleaved so that both see the same machine load, then times failovers with the tests'
// agent timings.
func benchLeave(t *testing.T, r *results) {
	e := newEnv(t, 3)
	errorsBefore := e.memberRemoveErrors()
	for i := range leaveCycles {
		l := e.leaveOnce()
		f := e.floorOnce()
		r.leaveIntent = append(r.leaveIntent, l.intent)
		r.leaveGone = append(r.leaveGone, l.gone)
		r.leaveJoinedFalse = append(r.leaveJoinedFalse, l.joinedFalse)
		r.floorGone = append(r.floorGone, f.gone)
		r.floorRPC = append(r.floorRPC, f.rpc)
		t.Logf("cycle %d/%d: leave intent %s, gone %s, Joined=False %s; MemberRemove gone %s (call %s)",
			i+1, leaveCycles, l.intent, l.gone, l.joinedFalse, f.gone, f.rpc)
	}
	r.leaveRemoveErrors = e.memberRemoveErrors() - errorsBefore
	r.failover[testTimings] = e.failovers(runsFromEnv(t, failoverRunsEnv, failoverRuns))
}

// leaveSample is one leave, timed from the accepted spec.leave patch: until the leader's
// removal intent (stored in etcd before its MemberRemove) is seen by an etcd watch, until etcd no
// longer lists the member, and until Joined=False is seen.
type leaveSample struct{ intent, gone, joinedFalse time.Duration }

func (e *env) leaveOnce() leaveSample {
	e.t.Helper()
	target, stay := e.pickTarget()
	id, idHex := target.ID(), target.IDHex()
	e.waitRemovable()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	gone := goneAt(ctx, e.etcd[stay.Name], id)
	intent := intentStoredAt(ctx, e.t, e.etcd[stay.Name], id)
	joinedFalse := e.watchMember(ctx, target.Name, func(m *v1alpha1.EtcdMember) bool {
		return m.Status.MemberID == idHex && m.RecordedGone()
	})
	e.patchLeave(ctx, target.Name)
	accepted := time.Now()
	s := leaveSample{
		intent:      await(ctx, e.t, intent, target.Name+" removal intent").Sub(accepted),
		gone:        await(ctx, e.t, gone, target.Name+" gone from etcd").Sub(accepted),
		joinedFalse: await(ctx, e.t, joinedFalse, target.Name+" Joined=False").at.Sub(accepted),
	}
	e.rejoin(target)
	return s
}

// floorSample is one raw MemberRemove: until the member list no longer has the member, and the
// call itself.
type floorSample struct{ gone, rpc time.Duration }

func (e *env) floorOnce() floorSample {
	e.t.Helper()
	target, stay := e.pickTarget()
	id := target.ID()
	e.waitRemovable()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	cli := e.etcd[stay.Name]
	gone := goneAt(ctx, cli, id)
	callCtx, callCancel := context.WithTimeout(ctx, callTimeout)
	defer callCancel()
	start := time.Now()
	if _, err := cli.MemberRemove(callCtx, id); err != nil {
		e.t.Fatalf("MemberRemove %s: %v", target.Name, err)
	}
	rpc := time.Since(start)
	s := floorSample{gone: await(ctx, e.t, gone, target.Name+" gone from etcd").Sub(start), rpc: rpc}
	e.rejoin(target)
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
