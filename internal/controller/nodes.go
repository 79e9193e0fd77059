package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// DefaultNodeDeleteHold is how long a deleted Node waits for its member's leave at most.
const DefaultNodeDeleteHold = 5 * time.Minute

// nodeWorkers is how many Nodes the node controller reconciles at once: an etcd cluster has up
// to seven members, so seven Nodes at most are followed.
const nodeWorkers = 7

// NodeReader reads the Nodes the node controller acts on.
type NodeReader interface {
	// Node returns the metadata of the Node, nil when there is none. follow asks to be told of its
	// changes from now on (the controller then reconciles the Node's name at each); without it,
	// the Node is read once and no longer followed.
	Node(ctx context.Context, name string, follow bool) (*metav1.PartialObjectMetadata, error)
}

// NodeReconciler ties members to the lifecycle of the Nodes they are bound to
// (v1alpha1.EtcdMember.BoundNode). Under --leave-on-node-delete it holds FinalizerNode on every
// Node bound to a member that etcd lists, and on no other; when such a Node is being deleted it
// asks the member to leave as an operator's kubectl etcdmember leave would, and lets the Node go
// once the member has left, or once Hold has passed since the deletion. Without the option it
// only removes the finalizer wherever it finds it, so that turning the option off frees every Node.
//
// Requests are Node names. It never changes membership itself: the leave it asks for goes through
// the membership reconciler, its quorum guard and its fence, like any other.
type NodeReconciler struct {
	// Client reads EtcdMembers from the term's cache and writes them and the Nodes' finalizers.
	Client client.Client
	// APIReader re-reads an EtcdMember right before asking it to leave, and a Node whose patch
	// conflicted, past every cache.
	APIReader client.Reader
	Events    *events.Recorder
	Nodes     NodeReader

	LeaveOnDelete bool
	Hold          time.Duration
	// Clock times the hold; nil is the real clock.
	Clock clock.PassiveClock
}

// SetupWithManager registers the controller: nodeEvents delivers the Nodes' own changes and those
// the sweep found holding the finalizer, and, under LeaveOnDelete, a change of an EtcdMember
// reconciles the Node it is bound to, before and after the change. Without the option only the
// sweep's Nodes are reconciled, to release them: the objects' changes cost no Node read then.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager, nodeEvents *NodeWatches) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("node").
		WatchesRawSource(nodeEvents.Source()).
		WithOptions(controller.Options{
			// Nodes are independent of each other (a request is one Node's name, never handled
			// twice at once), and a new term's first reconcile of each starts its watch and waits
			// for its first list: one after the other, a Node whose member just left would wait
			// behind every other bound Node's.
			MaxConcurrentReconciles: nodeWorkers,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](250*time.Millisecond, 30*time.Second),
			ReconciliationTimeout:   reconcileTimeout,
		})
	if r.LeaveOnDelete {
		b = b.Watches(&v1alpha1.EtcdMember{}, handler.EnqueueRequestsFromMapFunc(boundNodeRequest))
	}
	return b.Complete(r)
}

func boundNodeRequest(_ context.Context, obj client.Object) []reconcile.Request {
	m, ok := obj.(*v1alpha1.EtcdMember)
	if !ok || m.BoundNode() == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: m.BoundNode()}}}
}

// Reconcile fetches the Node and the objects bound to it, decides, and acts on the Node once.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bound, err := r.boundTo(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Only a Node bound to a member etcd lists is followed and held: the objects of members that
	// left stay as history, bound to Nodes long gone, and need no watch.
	follow := r.LeaveOnDelete && joinedAny(bound)
	node, err := r.Nodes.Node(ctx, req.Name, follow)
	if err != nil || node == nil {
		return ctrl.Result{}, err
	}
	held := controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerNode)
	switch {
	case node.DeletionTimestamp == nil:
		// A Node being deleted takes no new finalizer (the apiserver refuses it), so holding one
		// only ever starts here.
		if follow == held {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.setFinalizer(ctx, node, follow)
	case !held:
		// Being deleted, and not ours to hold: never held, or released already.
		return ctrl.Result{}, nil
	case !follow:
		return ctrl.Result{}, r.setFinalizer(ctx, node, false)
	}
	pending, cancelled, err := r.askToLeave(ctx, node, bound)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(pending) > 0 {
		if wait := r.Hold - r.now().Sub(node.DeletionTimestamp.Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if pending, err = r.stillPending(ctx, pending); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.setFinalizer(ctx, node, false); err != nil {
		return ctrl.Result{}, err
	}
	// Said once the Node is let go, which happens once.
	for _, m := range pending {
		r.Events.Warning(ctx, m, v1alpha1.ReasonNodeReleasedLeavePending, "ReleaseNode", releasedNote(node, m, r.Hold))
	}
	for _, m := range cancelled {
		r.Events.Normal(ctx, m, v1alpha1.ReasonNodeReleasedLeaveCancelled, "ReleaseNode",
			fmt.Sprintf("The leave that the deletion of Node %s asked for was cancelled (spec.leave is false), so member %s stays in etcd and the Node was let go.", node.Name, m.Status.MemberID))
	}
	return ctrl.Result{}, nil
}

// boundTo returns the objects bound to the Node. An object that goes with the CRD binds nothing:
// an uninstall holds no Node, and asks no member to leave for one.
func (r *NodeReconciler) boundTo(ctx context.Context, node string) ([]*v1alpha1.EtcdMember, error) {
	var list v1alpha1.EtcdMemberList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing EtcdMembers: %w", err)
	}
	var bound []*v1alpha1.EtcdMember
	for i := range list.Items {
		if list.Items[i].BoundNode() != node {
			continue
		}
		goes, err := goesWithCRD(ctx, r.APIReader, &list.Items[i])
		if err != nil {
			return nil, err
		}
		if !goes {
			bound = append(bound, &list.Items[i])
		}
	}
	return bound, nil
}

// joinedAny tells whether etcd lists the member of any of the objects, as the leader recorded.
func joinedAny(objects []*v1alpha1.EtcdMember) bool {
	for _, m := range objects {
		if status.IsTrue(m, v1alpha1.ConditionJoined) {
			return true
		}
	}
	return false
}

// askToLeave asks every member bound to a Node being deleted to leave, once per deletion, and
// returns the objects whose leave the Node still waits for, and those whose leave asked for this
// deletion was cancelled since. A member etcd no longer lists is waited for no longer.
func (r *NodeReconciler) askToLeave(ctx context.Context, node *metav1.PartialObjectMetadata, bound []*v1alpha1.EtcdMember) (pending, cancelled []*v1alpha1.EtcdMember, err error) {
	why := nodeLeaveReason(node)
	for _, m := range bound {
		switch {
		case !status.IsTrue(m, v1alpha1.ConditionJoined):
		case m.LeavePending():
			pending = append(pending, m)
		case m.Annotations[v1alpha1.AnnotationLeaveReason] == why:
			logf.FromContext(ctx).Info("Not waiting for a member on a deleted Node: the leave its deletion asked for was cancelled",
				"object", m.Name, "memberID", m.Status.MemberID, "node", node.Name)
			cancelled = append(cancelled, m)
		default:
			asked, err := r.requestLeave(ctx, m.Name, node, why)
			if err != nil {
				return nil, nil, err
			}
			if asked != nil {
				pending = append(pending, asked)
			}
		}
	}
	return pending, cancelled, nil
}

// stillPending reads the objects again and returns those whose leave is still pending, as they are
// now. The hold can run out inside the reconcile that asked for the leave: asking, and its Event,
// ride out a slow control plane for seconds (7 s once in a make test run), and meanwhile the
// leader may have answered, or the member left. The release must tell what is, not what was.
func (r *NodeReconciler) stillPending(ctx context.Context, objects []*v1alpha1.EtcdMember) ([]*v1alpha1.EtcdMember, error) {
	var pending []*v1alpha1.EtcdMember
	for _, m := range objects {
		rctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		cur := &v1alpha1.EtcdMember{}
		err := r.APIReader.Get(rctx, types.NamespacedName{Name: m.Name}, cur)
		cancel()
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading %s before releasing its Node: %w", m.Name, err)
		case cur.LeavePending():
			pending = append(pending, cur)
		}
	}
	return pending, nil
}

// requestLeave asks the member of the object name to leave for the Node's deletion, deciding again
// on a fresh read: the request names the member the object records at that moment, and is
// written once, whichever leader sees the deletion first. It returns the object when its leave is
// pending afterwards, nil when there is nothing to wait for.
func (r *NodeReconciler) requestLeave(ctx context.Context, name string, node *metav1.PartialObjectMetadata, why string) (*v1alpha1.EtcdMember, error) {
	var asked *v1alpha1.EtcdMember
	written := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		asked, written = nil, false
		rctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		defer cancel()
		cur := &v1alpha1.EtcdMember{}
		if err := r.APIReader.Get(rctx, types.NamespacedName{Name: name}, cur); err != nil {
			return err
		}
		switch {
		case cur.BoundNode() != node.Name || !status.IsTrue(cur, v1alpha1.ConditionJoined):
			return nil
		case cur.LeavePending():
			asked = cur
			return nil
		case cur.Annotations[v1alpha1.AnnotationLeaveReason] == why:
			// Asked and cancelled since the cached read: the next reconcile says so.
			return nil
		}
		failpoint.Hit(failpoint.NodeBeforeLeaveRequest)
		if err := askToLeave(rctx, r.Client, cur, why); err != nil {
			return err
		}
		asked, written = cur, true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("asking %s to leave for the deletion of Node %s: %w", name, node.Name, err)
	}
	if written {
		logf.FromContext(ctx).Info("Asked a member to leave: its Node is being deleted", "object", name,
			"memberID", asked.Spec.MemberID, "node", node.Name, "deletionTimestamp", node.DeletionTimestamp.UTC())
		r.Events.Normal(ctx, asked, v1alpha1.ReasonNodeDeleted, "Leave",
			fmt.Sprintf("Node %s is being deleted (since %s), so member %s was asked to leave, as kubectl etcdmember leave would; the quorum guard still applies. The Node's deletion waits until the member has left, for --node-delete-hold %s at most. Set spec.leave to false to keep the member.",
				node.Name, node.DeletionTimestamp.UTC().Format(time.RFC3339), asked.Spec.MemberID, r.Hold))
	}
	return asked, nil
}

// nodeLeaveReason is the leave-reason annotation of a leave asked for the Node's deletion. It names
// the Node by UID and deletion time, which every leader reads alike: a request already written is
// recognised, and a Node deleted again under the same name (a new UID) is a new request.
func nodeLeaveReason(node *metav1.PartialObjectMetadata) string {
	return fmt.Sprintf("Node %s (uid %s) deleted at %s, --leave-on-node-delete",
		node.Name, node.UID, node.DeletionTimestamp.UTC().Format(time.RFC3339))
}

// releasedNote is the NodeReleasedLeavePending Warning: why the member has not left, with the
// guard's numbers from the Left condition when it has answered.
func releasedNote(node *metav1.PartialObjectMetadata, m *v1alpha1.EtcdMember, hold time.Duration) string {
	why := "the leading agent has not answered the request yet"
	if c := status.Get(m, v1alpha1.ConditionLeft); c != nil {
		why = fmt.Sprintf("Left=%s/%s: %s", c.Status, c.Reason, c.Message)
	}
	return fmt.Sprintf("Node %s was deleted at %s and its member %s has not left etcd within --node-delete-hold %s (%s). The Node is let go so that its deletion does not hang; the leave stays pending and completes by itself once the quorum guard allows it (kubectl etcdmember leave %s --cancel withdraws it).",
		node.Name, node.DeletionTimestamp.UTC().Format(time.RFC3339), m.Status.MemberID, hold, why, m.Name)
}

// setFinalizer adds or removes FinalizerNode, and nothing else (the admission policy allows the
// agents no other change of a Node): a merge patch of the finalizers that carries the
// resourceVersion it read, so that it fails rather than drop a finalizer someone added meanwhile.
func (r *NodeReconciler) setFinalizer(ctx context.Context, node *metav1.PartialObjectMetadata, hold bool) error {
	log := logf.FromContext(ctx).WithValues("node", node.Name)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		defer cancel()
		patched := node.DeepCopy()
		if hold {
			controllerutil.AddFinalizer(patched, v1alpha1.FinalizerNode)
		} else {
			controllerutil.RemoveFinalizer(patched, v1alpha1.FinalizerNode)
		}
		err := r.Client.Patch(pctx, patched, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			// Changed since it was read: read it past the watch, and patch that.
			fresh := &metav1.PartialObjectMetadata{}
			fresh.SetGroupVersionKind(nodeGVK)
			if gerr := r.APIReader.Get(pctx, types.NamespacedName{Name: node.Name}, fresh); gerr != nil {
				return errors.Join(err, gerr)
			}
			node = fresh
			return err
		case err != nil:
			return fmt.Errorf("updating the finalizer of Node %s: %w", node.Name, err)
		}
		if hold {
			log.Info("Holding the Node of a member with the finalizer", "finalizer", v1alpha1.FinalizerNode)
		} else {
			log.Info("Released the Node", "finalizer", v1alpha1.FinalizerNode, "deleting", node.DeletionTimestamp != nil)
		}
		return nil
	})
}

func (r *NodeReconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}
