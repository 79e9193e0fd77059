package framework_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestMain reports the slowest etcd request of the self-tests' members once they have run.
func TestMain(m *testing.M) {
	code := m.Run()
	framework.ReportSlowestEtcdRequest("test/framework")
	os.Exit(code)
}

// The waits of these tests retry every retryEvery, each attempt within attemptTimeout.
const (
	retryEvery     = 100 * time.Millisecond
	attemptTimeout = 2 * time.Second
)

// retried is a call these tests retry until it succeeds, each attempt within attemptTimeout.
func retried(call func(ctx context.Context) error) framework.Condition {
	return framework.PerAttempt(attemptTimeout, framework.Succeeds(call))
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
