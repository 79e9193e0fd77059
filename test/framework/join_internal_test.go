package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAddedEarlier: an add whose answer was lost is found again by its peer URL, and only an
// unstarted member of the kind asked for passes for it.
func TestAddedEarlier(t *testing.T) {
	t.Parallel()
	c := NewCluster(t, ClusterConfig{Size: 1})
	cli := testClient(t, c.listenEndpoints(), c.tlsCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A learner: a voter that never starts would cost the one-member cluster its quorum.
	const peerURL = "http://127.0.0.1:1"
	added, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
	if err != nil {
		t.Fatal(err)
	}
	// Within the same second etcd derives the same member ID, and refuses that first.
	if _, err := cli.MemberAddAsLearner(ctx, []string{peerURL}); !errors.Is(err, rpctypes.ErrPeerURLExist) && !errors.Is(err, rpctypes.ErrMemberExist) {
		t.Fatalf("adding %s again: %v, want %v or %v", peerURL, err, rpctypes.ErrPeerURLExist, rpctypes.ErrMemberExist)
	}
	got, err := addedEarlier(ctx, cli, peerURL, true)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Member.ID != added.Member.ID || len(got.Members) != 2 {
		t.Fatalf("addedEarlier(%s) = %+v, want member %x among 2", peerURL, got, added.Member.ID)
	}
	var stop stopError
	if _, err := addedEarlier(ctx, cli, peerURL, false); !errors.As(err, &stop) {
		t.Errorf("addedEarlier(%s) for a voter add = %v, want an error that stops the retries: the member is a learner", peerURL, err)
	}
	started := c.Members()[0]
	if _, err := addedEarlier(ctx, cli, started.PeerURL(), false); !errors.As(err, &stop) || !strings.Contains(err.Error(), started.EtcdName()) {
		t.Errorf("addedEarlier(%s, the started member's peer URL) = %v, want an error that stops the retries", started.PeerURL(), err)
	}
	if got, err := addedEarlier(ctx, cli, "http://127.0.0.1:2", true); got != nil || err != nil {
		t.Errorf("addedEarlier for a peer URL nobody has = %+v, %v; want nil, nil", got, err)
	}
}

func TestAnswerLost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("adding: %w", context.DeadlineExceeded), true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.DeadlineExceeded, "deadline"), true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTimeoutDueToLeaderFail, true},
		{rpctypes.ErrPeerURLExist, false},
		{rpctypes.ErrUnhealthy, false},
		{rpctypes.ErrMemberNotEnoughStarted, false},
	} {
		if got := answerLost(tc.err); got != tc.want {
			t.Errorf("answerLost(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
