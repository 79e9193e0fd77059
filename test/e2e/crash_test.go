package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestLeaderStoppedAfterRemovalReportsRemoved: the only agent removes a member and exits before it
// can write the outcome. The intent it stored in etcd before the removal is all the next leader
// has to go by, and it must report Removed (which runs the node's --on-removed-exec), not
// NotFound.
func TestLeaderStoppedAfterRemovalReportsRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agents: []string{"node-1"}})
	target := e.cluster.Member("node-2")
	e.waitFor(target.Name, "Joined=True", joined)

	a := e.agents["node-1"]
	a.Stop(t)
	a.SetEnv(t, failpoint.EnvVar+"="+failpoint.LeaveAfterRemove)
	a.Start(t)
	e.leave(target.Name)

	err := framework.Poll(time.Minute, 50*time.Millisecond, func(context.Context) (bool, error) {
		code, exited := a.Exited()
		if exited && code != failpoint.ExitCode {
			t.Fatalf("the agent exited with code %d, not at the failpoint (%d)", code, failpoint.ExitCode)
		}
		return exited, nil
	})
	if err != nil {
		t.Fatalf("the agent did not reach %s: %s", failpoint.LeaveAfterRemove, describe(e.get(target.Name)))
	}
	if e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("the agent exited at %s, but member %s is still in etcd", failpoint.LeaveAfterRemove, target.IDHex())
	}
	if obj := e.get(target.Name); !joined(obj) {
		t.Fatalf("the outcome was written before the failpoint: %s", describe(obj))
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := e.cluster.Client(t).Get(ctx, etcd.RemovalIntentKey(target.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || !strings.HasPrefix(string(resp.Kvs[0].Value), target.Name+" uid=") || resp.Kvs[0].Lease == 0 {
		t.Fatalf("removal intent of %s: %v, want one key naming the request of %s, under a lease", target.IDHex(), resp.Kvs, target.Name)
	}

	a.SetEnv(t)
	a.Start(t)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
}
