package join

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// fakeCluster plays etcd's member list; addErrs are the answers of the next adds, then adds
// succeed.
type fakeCluster struct {
	members []etcd.Member
	addErrs []error
	adds    int
	// afterRefusal, if set, is what the list shows after the first refused add, e.g. the same
	// member added by a concurrent run.
	afterRefusal *etcd.Member
}

func (f *fakeCluster) MemberList(context.Context) ([]etcd.Member, error) {
	return slices.Clone(f.members), nil
}

func (f *fakeCluster) MemberAddAsLearner(_ context.Context, peerURLs []string) (etcd.Member, []etcd.Member, error) {
	f.adds++
	if len(f.addErrs) > 0 {
		err := f.addErrs[0]
		f.addErrs = f.addErrs[1:]
		if f.afterRefusal != nil {
			f.members, f.afterRefusal = append(f.members, *f.afterRefusal), nil
		}
		return etcd.Member{}, nil, fmt.Errorf("etcd member add %v as learner: %w", peerURLs, err)
	}
	m := member(0x40, "", true, peerURLs...)
	f.members = append(f.members, m)
	return m, slices.Clone(f.members), nil
}

func running() []etcd.Member {
	return []etcd.Member{
		member(0x10, "node-1", false, "http://10.0.0.1:2380"),
		member(0x20, "node-2", false, "http://10.0.0.2:2380"),
	}
}

var req = Request{Name: "node-4", PeerURLs: []string{"http://10.0.0.4:2380"}}

const wantFile = `ETCD_NAME=node-4
ETCD_INITIAL_CLUSTER=node-1=http://10.0.0.1:2380,node-2=http://10.0.0.2:2380,node-4=http://10.0.0.4:2380
ETCD_INITIAL_CLUSTER_STATE=existing
ETCD_INITIAL_ADVERTISE_PEER_URLS=http://10.0.0.4:2380
`

func runJoin(t *testing.T, f *fakeCluster, timeout time.Duration) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var log bytes.Buffer
	vars, err := join(ctx, f, req, &log, time.Millisecond)
	return Format(vars), log.String(), err
}

func TestJoinAddsThenFinds(t *testing.T) {
	f := &fakeCluster{members: running()}
	first, log, err := runJoin(t, f, time.Second)
	if err != nil || first != wantFile || !strings.Contains(log, "added member 40 as a learner") {
		t.Fatalf("first run: %v\n%s\nlog: %s", err, first, log)
	}
	second, log, err := runJoin(t, f, time.Second)
	if err != nil || second != first || !strings.Contains(log, "member 40 (not started, learner) already has peer URLs") {
		t.Fatalf("second run: %v\n%s\nlog: %s", err, second, log)
	}
	if f.adds != 1 {
		t.Errorf("%d adds, want 1", f.adds)
	}
}

func TestJoinRetriesWhileRefusedForNow(t *testing.T) {
	f := &fakeCluster{members: running(), addErrs: []error{rpctypes.ErrUnhealthy, rpctypes.ErrMemberNotEnoughStarted}}
	got, log, err := runJoin(t, f, 5*time.Second)
	if err != nil || got != wantFile {
		t.Fatalf("%v\n%s", err, got)
	}
	if f.adds != 3 || strings.Count(log, "etcd refused for now") != 2 {
		t.Errorf("%d adds, log:\n%s\nwant 3 adds and 2 retries logged", f.adds, log)
	}
}

func TestJoinGivesUpAtTheDeadline(t *testing.T) {
	refusals := make([]error, 1000)
	for i := range refusals {
		refusals[i] = rpctypes.ErrUnhealthy
	}
	f := &fakeCluster{members: running(), addErrs: refusals}
	_, _, err := runJoin(t, f, 50*time.Millisecond)
	if !errors.Is(err, rpctypes.ErrUnhealthy) || !strings.Contains(err.Error(), "still refused when the time was up") {
		t.Errorf("got %v, want the last refusal", err)
	}
}

// A concurrent run added the same URLs between the list and the add: the next list shows it.
func TestJoinFindsAConcurrentAdd(t *testing.T) {
	other := member(0x40, "", true, "http://10.0.0.4:2380")
	f := &fakeCluster{members: running(), addErrs: []error{rpctypes.ErrPeerURLExist}, afterRefusal: &other}
	got, _, err := runJoin(t, f, time.Second)
	if err != nil || got != wantFile {
		t.Fatalf("%v\n%s", err, got)
	}
}

func TestJoinLearnerPending(t *testing.T) {
	f := &fakeCluster{
		members: append(running(), member(0x33, "node-3", true, "http://10.0.0.3:2380")),
		addErrs: []error{rpctypes.ErrTooManyLearners},
	}
	_, _, err := runJoin(t, f, time.Second)
	want := `a learner is already pending: member 33 ("node-3", learner); wait until it is promoted, or if its node will not come, remove it (etcdctl member remove 33)`
	if !errors.Is(err, rpctypes.ErrTooManyLearners) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	if f.adds != 1 {
		t.Errorf("%d adds, want 1: the limit does not pass by itself", f.adds)
	}
}

func TestJoinStopsAtOtherErrors(t *testing.T) {
	f := &fakeCluster{members: running(), addErrs: []error{rpctypes.ErrPermissionDenied}}
	if _, _, err := runJoin(t, f, time.Second); !errors.Is(err, rpctypes.ErrPermissionDenied) || f.adds != 1 {
		t.Errorf("got %v after %d adds, want the error after 1", err, f.adds)
	}
}

func TestJoinWarnsOfANamesake(t *testing.T) {
	f := &fakeCluster{members: append(running(), member(0x33, "node-4", false, "http://10.0.0.3:2380"))}
	got, log, err := runJoin(t, f, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, `warning: member 33 ("node-4", voter) is also named "node-4"`) {
		t.Errorf("log:\n%s\nwant a warning about member 33", log)
	}
	if !strings.Contains(got, ",33=http://10.0.0.3:2380,") {
		t.Errorf("got\n%s\nwant member 33 listed under its ID", got)
	}
}
