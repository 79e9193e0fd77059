package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdmember/etcdmember/internal/etcd"
)

// EtcdOptions says how to reach etcd; the TLS fields take etcdctl's file names.
type EtcdOptions struct {
	Endpoints []string
	CACert    string
	Cert      string
	Key       string
}

// QueryEtcd reads etcd's member list and asks every member about itself on its own client URLs,
// all members at once, each call bounded by timeout. A member that does not answer is left out
// of the view's Status, which is what makes it unhealthy.
func QueryEtcd(ctx context.Context, opts EtcdOptions, timeout time.Duration) (*EtcdView, error) {
	ec, err := etcd.New(etcd.Config{
		Endpoints: opts.Endpoints, CACert: opts.CACert, Cert: opts.Cert, Key: opts.Key,
		DialTimeout: timeout, CallTimeout: timeout,
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ec.Close() }()
	members, err := ec.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	// internal/etcd's Status leaves out raft index and database size, so the per-member calls go
	// through a clientv3 client of our own with the same TLS files.
	sc, err := newStatusClient(opts, timeout)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sc.Close() }()
	return &EtcdView{Members: members, Status: memberStatuses(ctx, sc, members, timeout)}, nil
}

func newStatusClient(opts EtcdOptions, timeout time.Duration) (*clientv3.Client, error) {
	tlsCfg, err := tlsConfig(opts)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		DialTimeout: timeout,
		TLS:         tlsCfg,
		// clientv3 logs each failed dial; a member that does not answer is reported in the table.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating etcd client for %v: %w", opts.Endpoints, err)
	}
	return cli, nil
}

func tlsConfig(opts EtcdOptions) (*tls.Config, error) {
	if opts.CACert == "" && opts.Cert == "" && opts.Key == "" {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: opts.Cert, KeyFile: opts.Key, TrustedCAFile: opts.CACert}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading etcd TLS files: %w", err)
	}
	return cfg, nil
}

func memberStatuses(ctx context.Context, cli *clientv3.Client, members []etcd.Member, timeout time.Duration) map[uint64]MemberStatus {
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
func memberStatus(ctx context.Context, cli *clientv3.Client, m etcd.Member, timeout time.Duration) (MemberStatus, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, url := range m.ClientURLs {
		resp, err := cli.Status(ctx, url)
		if err != nil || resp.Header.GetMemberId() != m.ID {
			continue
		}
		return MemberStatus{Leader: resp.Leader, RaftTerm: resp.RaftTerm, RaftIndex: resp.RaftIndex, DBSize: resp.DbSize}, true
	}
	return MemberStatus{}, false
}
