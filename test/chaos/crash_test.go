package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// runCrash arms one agent with a failpoint and makes it the only agent able to carry out a leave:
// the others are paused, except the target's own agent, which never removes its own member and
// hands leadership over if it leads. The armed agent exits at the failpoint; the next leader must
// then finish the leave and report Removed, which it can only know from the intent left behind.
func (r *run) runCrash(c *crashPlan) {
	r.t.Helper()
	x, a := c.armed, r.w.agents[c.armed]
	r.mu.Lock()
	r.c.crashArmed[c.point]++
	r.mu.Unlock()

	r.setAgent(x, restarting)
	a.Stop(r.t)
	a.SetEnv(r.t, failpoint.EnvVar+"="+c.point)
	r.mu.Lock()
	r.armed[x] = c.point
	r.mu.Unlock()
	a.StartUnready(r.t)
	r.setAgent(x, up)
	if err := framework.Poll(agentReadyBound, pollEvery, retried(func(context.Context) error {
		if !r.w.agentReady(x) {
			return errors.New("not ready")
		}
		return nil
	})); err != nil {
		r.violate("armed ready", "the agent of %s, restarted with failpoint %s, did not register: %v", a.Name, c.point, err)
	}
	r.logf("  armed agent %s with %s", a.Name, c.point)
	if c.alsoDown >= 0 {
		r.runStep(step{kind: killMember, member: c.alsoDown})
	}
	var frozen []int
	for i := range r.n {
		r.mu.Lock()
		state := r.agent[i]
		r.mu.Unlock()
		if i != x && i != c.target && state == up && r.w.agents[i].Running() {
			r.setAgent(i, paused)
			r.w.agents[i].Pause(r.t)
			frozen = append(frozen, i)
		}
	}
	r.logf("  paused the agents other than %s and %s", a.Name, nodeName(c.target))
	what, err := r.leave(c.target, c.point)
	if err != nil {
		r.logf("  leave %s: %v", nodeName(c.target), err)
	} else {
		r.logf("  %s", what)
	}

	start := time.Now()
	hit := r.await(crashBound, func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.agent[x] != crashed {
			return errors.New("the armed agent still runs")
		}
		return nil
	}) == nil
	if hit {
		r.mu.Lock()
		r.c.crashHit[c.point]++
		r.mu.Unlock()
		r.logf("  agent %s exited at %s after %s", a.Name, c.point, time.Since(start).Round(100*time.Millisecond))
	} else {
		obj, _ := r.w.object(context.Background(), nodeName(c.target))
		r.logf("  agent %s did not reach %s within %s: %s", a.Name, c.point, crashBound, describe(obj))
	}
	// Disarm before anything can start the agent again.
	r.mu.Lock()
	state := r.agent[x]
	r.mu.Unlock()
	a.SetEnv(r.t)
	r.mu.Lock()
	r.armed[x] = ""
	r.mu.Unlock()
	switch {
	case state == crashed:
		r.startAgent(x, crashed)
	case a.Running():
		// Missed: restart it unarmed, so no later leave can trip it.
		r.setAgent(x, restarting)
		a.Stop(r.t)
		a.StartUnready(r.t)
		r.setAgent(x, up)
	default:
		// It reached the failpoint just now; the monitor has not seen it yet.
		r.setAgent(x, crashed)
		r.startAgent(x, crashed)
	}
	for _, i := range frozen {
		r.startAgent(i, paused)
	}
	r.logf("  disarmed %s and resumed the other agents", a.Name)
}
