package members

import (
	"context"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// pruneNeeds is every verb prune-stale may use, named in a Forbidden error.
const pruneNeeds = "get, list, watch, patch and delete"

// Prune carries out a plan one member at a time: each stale member is asked to leave through the
// controller (the quorum guard applies) and waited for, and the objects of discovered members
// are deleted once their member is gone. It stops at the first failure, a refusal included, and
// returns a line for each thing it did. timeout bounds each member's leave.
func Prune(ctx context.Context, c client.WithWatch, progress io.Writer, plan []Candidate, timeout time.Duration) ([]string, error) {
	var done []string
	for _, p := range plan {
		switch p.Action {
		case ActionPrune:
			line, err := Leave(ctx, c, progress, p.Name, LeaveOptions{Wait: true, Timeout: timeout, MemberID: p.MemberID})
			if err != nil {
				return done, err
			}
			done = append(done, line)
			if !p.Discovered {
				continue
			}
		case ActionDelete:
		default:
			continue
		}
		if err := deleteObject(ctx, c, p.Name, p.MemberID); err != nil {
			return done, err
		}
		done = append(done, fmt.Sprintf("%s: discovered object deleted", p.Name))
	}
	return done, nil
}

// deleteObject deletes the object only while it still records memberID, so that an object a
// re-joined node has taken over meanwhile survives.
func deleteObject(ctx context.Context, c client.Client, name, memberID string) error {
	m, err := Get(ctx, c, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return Explain(err, "get", name, pruneNeeds)
	case m.Status.MemberID != memberID:
		return fmt.Errorf("%s now records member %q, not %s; not deleted", name, m.Status.MemberID, memberID)
	}
	callCtx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := c.Delete(callCtx, m, client.Preconditions{UID: &m.UID}); err != nil && !apierrors.IsNotFound(err) {
		return Explain(err, "delete", name, pruneNeeds)
	}
	// The leader drops its finalizer right after it records the member gone, which the leave just
	// saw; until then the object only has a deletion timestamp. Wait for it, as kubectl delete does.
	err = wait.PollUntilContextTimeout(ctx, deletePoll, deleteWait, true, func(ctx context.Context) (bool, error) {
		cur, err := Get(ctx, c, name)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err == nil && cur.UID != m.UID:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s: deleted, but still there after %s (finalizers %v): %w", name, deleteWait, m.Finalizers, err)
	}
	return nil
}

// deletePoll and deleteWait pace and bound the wait for a deleted object to go.
const (
	deletePoll = 100 * time.Millisecond
	deleteWait = 30 * time.Second
)
