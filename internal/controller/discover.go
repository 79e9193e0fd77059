package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/naming"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// discoveryRequest is the reconcile request that runs discovery. No object can have this name (it
// is not a DNS subdomain), so it never meets an object's requests, and the workqueue keeps at most
// one of it waiting.
const discoveryRequest = "~discovery"

// DiscoveryGrace is how long a member may go without an object before the leader creates one,
// for a leader that polls the member list every pollInterval.
func DiscoveryGrace(pollInterval time.Duration) time.Duration { return discoveryPolls * pollInterval }

// discoverMembers runs discovery on a fresh member list, under the same serialization as every
// other change of objects and membership, and looks again while members wait out the grace.
func (r *MembershipReconciler) discoverMembers(ctx context.Context) (ctrl.Result, error) {
	members, err := r.memberList(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	waiting, err := r.discover(ctx, members)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating objects for unregistered members: %w", err)
	}
	if waiting {
		return ctrl.Result{RequeueAfter: r.DiscoveryGrace / discoveryPolls}, nil
	}
	return ctrl.Result{}, nil
}

// discover gives every etcd member without an object one, labelled as discovered, so that a
// member added by hand, left over after an IP change or a wipe, never started, or sharing its
// name with another is visible and can be asked to leave like any other. A member is only
// discovered once it has gone without an object for DiscoveryGrace: at boot the agents register
// their own members moments after etcd lists them, and a member publishes its name only after it
// has started. It returns whether members are still waiting out the grace.
func (r *MembershipReconciler) discover(ctx context.Context, members []etcd.Member) (bool, error) {
	listCtx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := r.APIReader.List(listCtx, &list); err != nil {
		return false, fmt.Errorf("listing EtcdMembers: %w", err)
	}
	known := map[string]bool{}
	taken := map[string]bool{}
	for _, o := range list.Items {
		taken[o.Name] = true
		if o.Status.MemberID != "" {
			known[o.Status.MemberID] = true
		}
	}
	now := r.now()
	unregistered := map[uint64]time.Time{}
	waiting := false
	for _, m := range members {
		if known[etcd.IDString(m.ID)] || registering(list.Items, m) {
			continue
		}
		since, seen := r.unregistered[m.ID]
		if !seen {
			since = now
		}
		unregistered[m.ID] = since
		if now.Sub(since) < r.DiscoveryGrace {
			waiting = true
			continue
		}
		if old := rejoining(list.Items, m, members); old != "" {
			if err := r.takeOver(ctx, old, m, members); err != nil {
				r.unregistered = unregistered
				return true, err
			}
			continue
		}
		name := discoveredName(m, taken)
		taken[name] = true
		if err := r.createDiscovered(ctx, name, m); err != nil {
			r.unregistered = unregistered
			return true, err
		}
	}
	r.unregistered = unregistered
	return waiting, nil
}

// registering tells whether an agent has created the member's object and not yet written its
// status: the object has the member's name and no member ID.
func registering(objects []v1alpha1.EtcdMember, m etcd.Member) bool {
	name := naming.ObjectName(m.Name)
	for _, o := range objects {
		if o.Name == name && o.Status.MemberID == "" && o.Labels[v1alpha1.LabelDiscovered] != "true" {
			return true
		}
	}
	return false
}

// rejoining returns the name of the object a re-joined member's agent would take over: the one
// its name maps to, recording a member that is gone from etcd. "" when there is none.
func rejoining(objects []v1alpha1.EtcdMember, m etcd.Member, members []etcd.Member) string {
	name := naming.ObjectName(m.Name)
	if name == "" {
		return ""
	}
	for _, o := range objects {
		if o.Name == name && o.DeletionTimestamp == nil && o.Status.MemberID != "" && !listed(o.Status.MemberID, members) {
			return name
		}
	}
	return ""
}

func listed(id string, members []etcd.Member) bool {
	parsed, err := etcd.ParseID(id)
	if err != nil {
		return false
	}
	_, ok := etcd.FindMember(members, parsed)
	return ok
}

// takeOver records a re-joined member in the object its name maps to, as the member's agent
// does (status.TakeOver says why both do). A member that has come back to the name meanwhile
// keeps it: the next discovery gives the re-joined one an object of its own.
func (r *MembershipReconciler) takeOver(ctx context.Context, name string, m etcd.Member, members []etcd.Member) error {
	obj := &v1alpha1.EtcdMember{}
	gctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := r.APIReader.Get(gctx, types.NamespacedName{Name: name}, obj); err != nil {
		return fmt.Errorf("reading %s to take it over for re-joined member %s: %w", name, etcd.IDString(m.ID), err)
	}
	msg, err := status.TakeOver(ctx, r.Client, r.APIReader, obj, m, members, nil)
	if errors.Is(err, status.ErrNameTaken) {
		return nil
	}
	if err != nil || msg == "" {
		return err
	}
	r.Events.Normal(ctx, obj, v1alpha1.ReasonRejoined, "Observe", msg)
	return nil
}

// discoveredName is the member's usual object name when free; the name with the member ID
// appended when another member's object holds it; "member-<id>" for a member that never started
// and so has no name.
func discoveredName(m etcd.Member, taken map[string]bool) string {
	id := etcd.IDString(m.ID)
	base := naming.ObjectName(m.Name)
	if base == "" {
		return "member-" + id
	}
	if !taken[base] {
		return base
	}
	if limit := validation.DNS1123SubdomainMaxLength - len(id) - 1; len(base) > limit {
		base = base[:limit]
	}
	return base + "-" + id
}

// createDiscovered creates the object, then records the member in its status. The two steps
// are separate API calls, so a retry after an interrupted first attempt finds the object and
// finishes the second.
func (r *MembershipReconciler) createDiscovered(ctx context.Context, name string, m etcd.Member) error {
	logf.FromContext(ctx).Info("Creating an object for an unregistered member",
		"object", name, "memberID", etcd.IDString(m.ID), "etcdName", m.Name)
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	obj := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{v1alpha1.LabelDiscovered: "true"},
	}}
	if err := r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating EtcdMember %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &v1alpha1.EtcdMember{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, cur); err != nil {
			return err
		}
		if cur.Status.MemberID != "" || cur.Labels[v1alpha1.LabelDiscovered] != "true" {
			// An agent registered it meanwhile.
			return nil
		}
		status.Observe(cur, m)
		return r.Client.Status().Update(ctx, cur)
	})
	if err != nil {
		return fmt.Errorf("recording member %s in %s: %w", etcd.IDString(m.ID), name, err)
	}
	return nil
}
