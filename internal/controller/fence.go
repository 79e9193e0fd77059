package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// ErrFenced marks a membership change the leader gave up right before making it, because its
// term no longer held or the object no longer asked for the change.
var ErrFenced = errors.New("membership change fenced off")

// errNotWanted marks a change fenced off because the object no longer asks for it, while the
// term still holds: the leader may still clean up after it.
var errNotWanted = fmt.Errorf("%w: no longer asked for", ErrFenced)

// fenceFreshness is how old, on this agent's clock, the fence's reads may be when the change
// they clear is made. Reads the head start made alongside the member list are usually a few
// milliseconds old; older ones, from a reconcile that stalled, are made again.
const fenceFreshness = 250 * time.Millisecond

// fenceReads is what the fence read, and when it started reading: the reads show the world at
// some moment after that, so their age is counted from there, never less than it is.
type fenceReads struct {
	started         time.Time
	termErr, objErr error
	fresh           v1alpha1.EtcdMember
}

// readFence makes the fence's reads. The fence proves, right before a membership change
// (makeChange), that it is still this leader's to make: the leader Lease, read past every cache,
// still names this agent and has not expired, and the object, read past the cache too, is still the one the change was decided on (same UID and member ID)
// and still asks for it (wanted). A leader that was frozen between its decision and the change
// (GC, CPU starvation, a VM stall) may have lost its term meanwhile, and controller-runtime does
// not wait for an in-flight reconcile when the Lease is lost: without this, it would resume and
// act on a verdict another leader has since overruled.
//
// Both reads (the Lease through Leadership) run in parallel, so a change costs one API round trip
// more, or none when the head start made them. What is left is the gap between these reads and
// the etcd call: at most fenceFreshness of this agent's running time. started is when the caller
// decided to read, at the latest when the reads go out; each read's end goes into s.
func (r *MembershipReconciler) readFence(ctx context.Context, m *v1alpha1.EtcdMember, started time.Time, s *steps) fenceReads {
	var wg sync.WaitGroup
	reads := fenceReads{started: started}
	wg.Go(func() {
		reads.termErr = r.Leadership.TermHeld(ctx)
		s.done(stepFenceLease)
	})
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		defer cancel()
		reads.objErr = r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), &reads.fresh)
		s.done(stepFenceObject)
	})
	wg.Wait()
	return reads
}

// verdict judges the reads for a change of m's member.
func (f fenceReads) verdict(m *v1alpha1.EtcdMember, change string, wanted func(*v1alpha1.EtcdMember) bool) error {
	switch {
	case f.termErr != nil:
		return fmt.Errorf("%w: not %s member %s: %w", ErrFenced, change, m.Status.MemberID, f.termErr)
	case f.objErr != nil:
		return fmt.Errorf("%w: not %s member %s: re-reading %s: %w", ErrFenced, change, m.Status.MemberID, m.Name, f.objErr)
	case f.fresh.UID != m.UID || f.fresh.Status.MemberID != m.Status.MemberID:
		return fmt.Errorf("%w: not %s member %s: %s now records member %q (UID %s)", ErrFenced, change, m.Status.MemberID, m.Name, f.fresh.Status.MemberID, f.fresh.UID)
	case !wanted(&f.fresh):
		return fmt.Errorf("%w: not %s member %s: %s changed", errNotWanted, change, m.Status.MemberID, m.Name)
	}
	return nil
}

// Each change re-checks on the fresh object what it was decided on.
var (
	stillLeaving = (*v1alpha1.EtcdMember).LeaveAsked
	anyState     = func(*v1alpha1.EtcdMember) bool { return true }
)
