package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// MemberAddAsLearner adds a non-voting member with these peer URLs. It returns the new member and
// the member list etcd answered with, which includes it: a second read could already show a
// later change, and whoever starts the new member needs the list the member was added to.
func (c *Client) MemberAddAsLearner(ctx context.Context, peerURLs []string) (Member, []Member, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.cli.MemberAddAsLearner(ctx, peerURLs)
	if err != nil {
		metrics.EtcdErrors.WithLabelValues("MemberAddAsLearner").Inc()
		return Member{}, nil, fmt.Errorf("etcd member add %v as learner: %w", peerURLs, err)
	}
	members := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		members = append(members, fromProto(m))
	}
	return fromProto(resp.Member), members, nil
}

func fromProto(m *etcdserverpb.Member) Member {
	return Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}
