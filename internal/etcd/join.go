package etcd

import (
	"context"
	"fmt"

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
	return fromProto(resp.Member), membersFromProto(resp.Members), nil
}
