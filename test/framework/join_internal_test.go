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

// TestAddedEarlier: when a retried add meets etcd's duplicate refusal, the add whose answer was
// lost is found again by its peer URL; a started member's peer URL never passes for it.
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
	got, err := addedEarlier(ctx, cli, peerURL)
	if err != nil {
		t.Fatal(err)
	}
	if got.Member.ID != added.Member.ID || len(got.Members) != 2 {
		t.Errorf("addedEarlier found member %x among %d, want %x among 2", got.Member.ID, len(got.Members), added.Member.ID)
	}
	started := c.Members()[0]
	_, err = addedEarlier(ctx, cli, started.PeerURL())
	var stop stopError
	if !errors.As(err, &stop) || !strings.Contains(err.Error(), "started member") {
		t.Errorf("addedEarlier(%s, the started member's peer URL) = %v, want an error that stops the retries", started.PeerURL(), err)
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
