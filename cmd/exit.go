package cmd

import (
	"errors"

	"github.com/etcdmember/kubectl-etcdmember/internal/members"
)

// Exit codes, documented in the root command's help and docs/plugin.md.
const (
	// ExitError is every failure that is not one of the below: bad flags, unknown names, missing
	// permissions, the CRD not installed, API or etcd errors, a leave that cannot proceed for want
	// of an agent.
	ExitError = 1
	// ExitRefused is a leave the quorum guard refused (or, with --dry-run=client, would refuse).
	// The request stays pending and completes by itself once the cluster is healthy enough.
	ExitRefused = 3
	// ExitTimeout is a --timeout that ran out while waiting, as timeout(1) reports it.
	ExitTimeout = 124
)

// ExitCode maps an error returned by a command to the process's exit status.
func ExitCode(err error) int {
	var refused *members.RefusedError
	var timedOut *members.TimeoutError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &refused) && refused.QuorumGuard():
		return ExitRefused
	case errors.As(err, &timedOut):
		return ExitTimeout
	}
	return ExitError
}
