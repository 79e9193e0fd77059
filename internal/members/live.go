package members

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Live is what etcd said: its member list and the answers of the members that answered.
type Live struct {
	Members []etcd.Member
	Status  map[uint64]etcd.EndpointStatus
}

// QueryEtcd reads etcd's member list and asks every member about itself on its own client URLs,
// everything within one timeout: the member list is asked of every endpoint at once and the
// first answer wins, then every member is asked at once. A member that is down or frozen so costs
// the command one timeout, not one per member. A member that does not answer is left out of
// Status, which is what makes it unhealthy.
func QueryEtcd(ctx context.Context, cfg etcd.Config, timeout time.Duration) (*Live, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg.DialTimeout, cfg.CallTimeout = timeout, timeout
	cli, list, err := firstMemberList(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	return &Live{Members: list, Status: statuses(ctx, cli, list)}, nil
}

type listAnswer struct {
	cli     *etcd.Client
	members []etcd.Member
	err     error
}

// firstMemberList asks each endpoint over a client of its own and returns the first answer
// with its client; the other clients are closed as their calls end. An endpoint whose serving
// certificate does not verify fails at once, saying so, rather than at the deadline.
func firstMemberList(ctx context.Context, cfg etcd.Config) (*etcd.Client, []etcd.Member, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, nil, errors.New("no etcd endpoints given")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan listAnswer, len(cfg.Endpoints))
	for _, ep := range cfg.Endpoints {
		one := cfg
		one.Endpoints = []string{ep}
		go func() {
			cli, err := etcd.New(one)
			if err != nil {
				answers <- listAnswer{err: err}
				return
			}
			var members []etcd.Member
			err = cli.Verified(ctx, ep, func(ctx context.Context) (err error) {
				members, err = cli.MemberList(ctx)
				return err
			})
			answers <- listAnswer{cli: cli, members: members, err: err}
		}()
	}
	var errs []error
	for i := range len(cfg.Endpoints) {
		a := <-answers
		if a.err == nil {
			// The others only need closing once their calls end, which cancelling ctx hastens.
			go drain(answers, len(cfg.Endpoints)-1-i)
			return a.cli, a.members, nil
		}
		if a.cli != nil {
			_ = a.cli.Close()
		}
		errs = append(errs, a.err)
	}
	if !slices.ContainsFunc(errs, notTLS) {
		// Every endpoint answered, with a certificate the CA does not verify; each error names
		// its endpoint.
		return nil, nil, errors.Join(errs...)
	}
	return nil, nil, fmt.Errorf("no etcd endpoint answered: %w", errors.Join(errs...))
}

func notTLS(err error) bool {
	var verr *etcd.TLSVerificationError
	return !errors.As(err, &verr)
}

func drain(answers <-chan listAnswer, n int) {
	for range n {
		if a := <-answers; a.cli != nil {
			_ = a.cli.Close()
		}
	}
}

func statuses(ctx context.Context, cli *etcd.Client, members []etcd.Member) map[uint64]etcd.EndpointStatus {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[uint64]etcd.EndpointStatus{}
	for _, m := range members {
		wg.Go(func() {
			st, ok := memberStatus(ctx, cli, m)
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

// memberStatus tries the member's client URLs in turn. An answer from another member (an address
// now used by someone else) does not count.
func memberStatus(ctx context.Context, cli *etcd.Client, m etcd.Member) (etcd.EndpointStatus, bool) {
	for _, url := range m.ClientURLs {
		st, err := cli.Status(ctx, url)
		if err != nil || st.MemberID != m.ID {
			continue
		}
		return st, true
	}
	return etcd.EndpointStatus{}, false
}

// leader is the leader named by the answer with the highest raft term: during an election members
// may still name the previous one.
func (l *Live) leader() (uint64, bool) {
	if l == nil {
		return 0, false
	}
	var best etcd.EndpointStatus
	found := false
	for _, st := range l.Status {
		if st.Leader != 0 && (!found || st.RaftTerm > best.RaftTerm) {
			best, found = st, true
		}
	}
	return best.Leader, found
}
