package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// ErrFenced marks a membership change the leader gave up right before making it, because its
// term no longer held or the object no longer asked for the change.
var ErrFenced = errors.New("membership change fenced off")

// fence proves, right before a membership change, that it is still this leader's to make: the
// leader Lease, read past every cache, still names this agent and has not expired, and the object,
// read past the cache too, is still the one the change was decided on (same UID and member ID)
// and still asks for it (wanted). A leader that was frozen between its decision and the change
// (GC, CPU starvation, a VM stall) may have lost its term meanwhile, and controller-runtime does
// not wait for an in-flight reconcile when the Lease is lost: without this, it would resume and
// act on a verdict another leader has since overruled.
//
// Both reads run in parallel, so a change costs one API round trip more. What is left is the gap
// between these reads and the etcd call, microseconds instead of the whole reconcile.
func (r *LeaveReconciler) fence(ctx context.Context, m *v1alpha1.EtcdMember, change string, wanted func(*v1alpha1.EtcdMember) bool) error {
	var (
		wg              sync.WaitGroup
		termErr, objErr error
		fresh           v1alpha1.EtcdMember
	)
	if r.TermHeld != nil {
		wg.Go(func() { termErr = r.TermHeld(ctx) })
	}
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		objErr = r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), &fresh)
	})
	wg.Wait()
	switch {
	case termErr != nil:
		return fmt.Errorf("%w: not %s member %s: %w", ErrFenced, change, m.Status.MemberID, termErr)
	case objErr != nil:
		return fmt.Errorf("%w: not %s member %s: re-reading %s: %w", ErrFenced, change, m.Status.MemberID, m.Name, objErr)
	case fresh.UID != m.UID || fresh.Status.MemberID != m.Status.MemberID:
		return fmt.Errorf("%w: not %s member %s: %s now records member %q (UID %s)", ErrFenced, change, m.Status.MemberID, m.Name, fresh.Status.MemberID, fresh.UID)
	case !wanted(&fresh):
		return fmt.Errorf("%w: not %s member %s: %s no longer asks for it", ErrFenced, change, m.Status.MemberID, m.Name)
	}
	return nil
}

// Each change re-checks on the fresh object what it was decided on.
var (
	stillLeaving = (*v1alpha1.EtcdMember).LeaveAsked
	anyState     = func(*v1alpha1.EtcdMember) bool { return true }
)
