package framework

import (
	"context"
	"slices"
)

// removedLog is what etcd (3.5 to 3.7) logs when it stops because the cluster removed it.
const removedLog = "the member has been permanently removed from the cluster"

// removedMeanwhile tells, once the member exited, whether it was removed from the cluster: its
// log since this start says so, or a running member answers a member list without it.
func (m *Member) removedMeanwhile() bool {
	if m.proc.loggedSinceStart(removedLog) {
		return true
	}
	id := m.ID()
	if id == 0 {
		return false
	}
	for _, o := range m.c.Members() {
		if o == m || !o.proc.responsive() {
			continue
		}
		if ids, err := o.memberIDs(); err == nil {
			return !slices.Contains(ids, id)
		}
	}
	return false
}

// memberIDs asks this member alone for the cluster's member list.
func (m *Member) memberIDs() ([]uint64, error) {
	cli, err := newClient([]string{m.ListenClientURL()}, m.c.tlsCfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, 0, len(resp.Members))
	for _, mem := range resp.Members {
		ids = append(ids, mem.ID)
	}
	return ids, nil
}
