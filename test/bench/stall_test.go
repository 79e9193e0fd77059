//go:build bench

package bench

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// stallSample is one leave of the leading agent's own member while every other agent was frozen,
// until the leading agent had given up handing over and taken the Lease back.
type stallSample struct {
	// refused is from the patch to Left=False/NoOtherAgent: the leader stepped down, nobody took
	// the Lease, and it led again.
	refused time.Duration
	// gone is from the other agents' resumption to the member's absence from the member list.
	gone time.Duration
}

// stallGoal is the report's goal for a stall; a run over it keeps the agents' logs, since one such
// run in `make bench` could not be reproduced in 18 runs alone.
const stallGoal = 10 * time.Second

func (e *env) stalls(runs int) []stallSample {
	e.t.Helper()
	var out []stallSample
	for i := range runs {
		s := e.stallOnce()
		e.t.Logf("stall %d/%d: NoOtherAgent %s after the patch, gone %s after the others resumed", i+1, runs, s.refused, s.gone)
		out = append(out, s)
	}
	return out
}

// stallOnce reproduces the stall `make bench` once met by chance: the agent that steps down for
// its own member's leave finds the Lease free and wins it back. SIGSTOP on every other agent makes
// that certain. Once the object says NoOtherAgent the others are continued, and the clock runs
// until the member is gone; a fixed hand-over retry (30 s before the back-off) showed here as the
// whole retry. The member is re-added afterwards.
func (e *env) stallOnce() stallSample {
	e.t.Helper()
	leader := e.leaderAgent()
	target := e.cluster.Member(leader)
	var stay string
	for _, m := range e.cluster.Members() {
		if m != target {
			stay = m.Name
			break
		}
	}
	e.waitRemovable()
	pids := e.agentPIDs()
	delete(pids, leader)
	others := slices.Sorted(maps.Values(pids))
	signal := func(sig syscall.Signal) {
		for _, pid := range others {
			if err := syscall.Kill(pid, sig); err != nil {
				e.t.Errorf("signal %v to agent pid %d: %v", sig, pid, err)
			}
		}
	}
	// Continued even when the measurement fails, or the framework's SIGTERM would wait on them.
	defer signal(syscall.SIGCONT)

	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	gone := goneAt(ctx, e.etcd[stay], target.ID())
	refused := e.watchMember(ctx, target.Name, func(m *v1alpha1.EtcdMember) bool {
		return status.HasReason(m, v1alpha1.ConditionLeft, v1alpha1.ReasonNoOtherAgent)
	})
	signal(syscall.SIGSTOP)
	e.patchLeave(ctx, target.Name)
	patched := time.Now()
	s := stallSample{refused: await(ctx, e.t, refused, target.Name+" Left=NoOtherAgent").at.Sub(patched)}
	signal(syscall.SIGCONT)
	resumed := time.Now()
	s.gone = await(ctx, e.t, gone, target.Name+" gone from etcd").Sub(resumed)
	if s.gone > stallGoal {
		e.keepAgentLogs("stall")
	}
	e.rejoin(target)
	return s
}

// keepAgentLogs copies every agent's and every member's log so far, and the apiserver's audit log if it keeps one,
// out of the test's temporary directory, which is removed at the end, and says where.
func (e *env) keepAgentLogs(what string) {
	e.t.Helper()
	dir, err := os.MkdirTemp("", "etcdmember-bench-"+what+"-")
	if err != nil {
		e.t.Errorf("keeping the agents' logs: %v", err)
		return
	}
	logs := map[string]string{}
	for name, a := range e.agents {
		logs[name+".log"] = a.LogFile()
	}
	// etcd's own side of what the agents did: elections, leadership transfers, removals.
	for _, m := range e.cluster.Members() {
		logs["etcd-"+m.Name+".log"] = m.LogFile()
	}
	if e.auditLog != "" {
		logs["audit.log"] = e.auditLog
	}
	for name, path := range logs {
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if err != nil {
			e.t.Errorf("keeping %s: %v", name, err)
		}
	}
	e.t.Logf("%s: the agents' and members' logs are kept in %s", what, dir)
}
