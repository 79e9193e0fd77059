package cli

import (
	"context"
	"sync"
	"time"

	"github.com/etcdmember/etcdmember/internal/etcd"
)

// QueryEtcd reads etcd's member list and asks every member about itself on its own client URLs,
// all members at once, each call bounded by timeout. A member that does not answer is left out
// of the view's Status, which is what makes it unhealthy.
func QueryEtcd(ctx context.Context, cfg etcd.Config, timeout time.Duration) (*EtcdView, error) {
	cfg.DialTimeout, cfg.CallTimeout = timeout, timeout
	ec, err := etcd.New(cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ec.Close() }()
	members, err := ec.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	return &EtcdView{Members: members, Status: memberStatuses(ctx, ec, members, timeout)}, nil
}

func memberStatuses(ctx context.Context, cli *etcd.Client, members []etcd.Member, timeout time.Duration) map[uint64]MemberStatus {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[uint64]MemberStatus{}
	for _, m := range members {
		wg.Go(func() {
			st, ok := memberStatus(ctx, cli, m, timeout)
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out[m.ID] = st
		})
	}
	wg.Wait()
	return out
}

// memberStatus tries the member's client URLs in turn within one timeout. An answer from another
// member (an address now used by someone else) does not count.
func memberStatus(ctx context.Context, cli *etcd.Client, m etcd.Member, timeout time.Duration) (MemberStatus, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, url := range m.ClientURLs {
		st, err := cli.Status(ctx, url)
		if err != nil || st.MemberID != m.ID {
			continue
		}
		return MemberStatus{Leader: st.Leader, RaftTerm: st.RaftTerm, RaftIndex: st.RaftIndex, DBSize: st.DBSize}, true
	}
	return MemberStatus{}, false
}
