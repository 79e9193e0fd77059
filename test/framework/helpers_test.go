package framework_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// eventually retries fn every 100 ms, each attempt under a 2 s context, until
// it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, fn func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func memberList(t *testing.T, cli *clientv3.Client) []*etcdserverpb.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list via %v: %v", cli.Endpoints(), err)
	}
	return resp.Members
}

// describe renders a member list as "id name peerURLs learner" lines sorted by
// ID, so that two lists compare with == and print readably.
func describe(members []*etcdserverpb.Member) []string {
	var out []string
	for _, m := range members {
		out = append(out, fmt.Sprintf("%x %s %v learner=%v", m.ID, m.Name, m.PeerURLs, m.IsLearner))
	}
	slices.Sort(out)
	return out
}

// expected renders the framework's members the way describe renders etcd's.
func expected(members []*framework.Member) []string {
	var out []string
	for _, m := range members {
		out = append(out, fmt.Sprintf("%s %s [%s] learner=false", m.IDHex(), m.Name, m.PeerURL()))
	}
	slices.Sort(out)
	return out
}

func find(members []*etcdserverpb.Member, id uint64) *etcdserverpb.Member {
	for _, m := range members {
		if m.ID == id {
			return m
		}
	}
	return nil
}
