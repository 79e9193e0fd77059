package controller

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

var (
	nodeGVK = schema.GroupVersionKind{Version: "v1", Kind: "Node"}
	nodeGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// sweepPageSize is how many Nodes one page of the term's sweep lists: a cluster may have
// thousands, and only their metadata is asked for, about 1.4 kB a Node (make bench). Pages of
// client-go's usual 500 made the sweep of 5,000 Nodes 11 requests, a sixth of what a new leader
// sends in its first minute; pages of 1000 still made it 6 (the test bed's 5,003), 10.0 % of that
// minute against a goal of 10 %. A larger page grows the heap more while it is decoded (ListNodes
// gives the memory back afterwards). The apiserver serves the pages from its watch cache, so the
// page size costs etcd nothing.
const sweepPageSize = 2000

// NodeWatches follows the Nodes the node controller needs, each through a metadata watch of its
// own, selected by name: a cluster may have thousands of Nodes and only three to seven etcd
// members, so the leader never caches or watches the others (it lists their metadata once a term:
// Sweep), and a Node's status updates (kubelet heartbeats) reach it only for the few it follows.
// The watches end with the term.
type NodeWatches struct {
	ctx    context.Context
	client metadata.Interface
	events chan event.GenericEvent

	mu      sync.Mutex
	watches map[string]*nodeWatch
}

type nodeWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// NewNodeWatches returns watches that live until ctx ends.
func NewNodeWatches(ctx context.Context, client metadata.Interface) *NodeWatches {
	return &NodeWatches{ctx: ctx, client: client, events: make(chan event.GenericEvent, 64), watches: map[string]*nodeWatch{}}
}

// Source delivers the name of every followed Node that changed in a way the controller acts on.
func (w *NodeWatches) Source() source.Source {
	return source.Channel(w.events, &handler.EnqueueRequestForObject{})
}

// Node implements NodeReader.
func (w *NodeWatches) Node(ctx context.Context, name string, follow bool) (*metav1.PartialObjectMetadata, error) {
	if !follow {
		w.forget(name)
		return w.get(ctx, name)
	}
	nw, err := w.follow(ctx, name)
	if err != nil {
		return nil, err
	}
	obj, exists, err := nw.informer.GetStore().GetByKey(name)
	if err != nil || !exists {
		return nil, err
	}
	node, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, fmt.Errorf("watch of Node %s delivered a %T", name, obj)
	}
	node = node.DeepCopy()
	// The metadata API answers as PartialObjectMetadata; a patch of it must name the Node's kind.
	node.SetGroupVersionKind(nodeGVK)
	return node, nil
}

// get reads the Node once.
func (w *NodeWatches) get(ctx context.Context, name string) (*metav1.PartialObjectMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	node, err := w.client.Resource(nodeGVR).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	node.SetGroupVersionKind(nodeGVK)
	return node, nil
}

// follow starts the Node's watch unless it runs, and waits until it has listed the Node.
func (w *NodeWatches) follow(ctx context.Context, name string) (*nodeWatch, error) {
	w.mu.Lock()
	nw := w.watches[name]
	if nw == nil {
		informer := metadatainformer.NewFilteredMetadataInformer(w.client, nodeGVR, metav1.NamespaceAll, 0, cache.Indexers{},
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}).Informer()
		if _, err := informer.AddEventHandler(w.handler(name)); err != nil {
			w.mu.Unlock()
			return nil, fmt.Errorf("watching Node %s: %w", name, err)
		}
		wctx, stop := context.WithCancel(w.ctx)
		nw = &nodeWatch{informer: informer, stop: stop}
		w.watches[name] = nw
		go informer.RunWithContext(wctx)
		logf.FromContext(ctx).V(1).Info("Following a Node", "node", name)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), nw.informer.HasSynced) {
		return nil, fmt.Errorf("watching Node %s: not listed within %s", name, status.APITimeout)
	}
	return nw, nil
}

// forget stops the Node's watch, if it runs.
func (w *NodeWatches) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if nw := w.watches[name]; nw != nil {
		nw.stop()
		delete(w.watches, name)
	}
}

// handler tells the controller of the Node's arrival, its departure, and the changes it acts on:
// a deletion starting, a finalizer added or removed, the Node re-created under its name. The rest
// (kubelet heartbeats, labels) changes nothing the controller decides on.
func (w *NodeWatches) handler(name string) cache.ResourceEventHandler {
	notify := func() {
		select {
		case w.events <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		case <-w.ctx.Done():
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		// The first list answers the reconcile that started the watch, which reads it next.
		AddFunc: func(_ any, initial bool) {
			if !initial {
				notify()
			}
		},
		DeleteFunc: func(any) { notify() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*metav1.PartialObjectMetadata)
			n, ok2 := newObj.(*metav1.PartialObjectMetadata)
			if !ok1 || !ok2 || o.UID != n.UID || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
				!slices.Equal(o.Finalizers, n.Finalizers) {
				notify()
			}
		},
	}
}

// NeedLeaderElection runs the sweep on the leader only.
func (w *NodeWatches) NeedLeaderElection() bool { return true }

// Start sweeps once at the start of the term, retrying until it succeeds: see Sweep. Agents whose
// RBAC predates the node controller may not list Nodes; they have no finalizer to release, so
// that is logged once and the sweep given up.
func (w *NodeWatches) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("node")
	ctx = logf.IntoContext(ctx, log)
	err := sweepBackoff.DelayFunc().Until(ctx, true, false, func(ctx context.Context) (bool, error) {
		err := w.Sweep(ctx)
		switch {
		case apierrors.IsForbidden(err):
			return false, err
		case err != nil:
			log.Error(err, "Sweeping the Nodes for the finalizer failed; retrying", "finalizer", v1alpha1.FinalizerNode)
			return false, nil
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		log.Error(err, "Not sweeping the Nodes for the finalizer: the agents may not list Nodes; apply config/rbac again", "finalizer", v1alpha1.FinalizerNode)
	}
	return nil
}

// sweepBackoff retries a failed sweep from 1 s up to every 30 s, for as long as the term lasts
// (DelayFunc keeps the cap once reached, where ExponentialBackoffWithContext would give up).
var sweepBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// Sweep lists every Node's metadata once, page by page, and hands the controller each Node that
// carries FinalizerNode: a Node bound to nothing any more, or held by an earlier leader that ran
// with --leave-on-node-delete, is found and released even though no watch follows it.
func (w *NodeWatches) Sweep(ctx context.Context) error {
	log := logf.FromContext(ctx)
	found := 0
	err := ListNodes(ctx, w.client, func(node *metav1.PartialObjectMetadata) {
		if controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerNode) {
			found++
			select {
			case w.events <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}}:
			case <-ctx.Done():
			}
		}
	})
	if err != nil {
		return err
	}
	log.V(1).Info("Swept the Nodes for the finalizer", "finalizer", v1alpha1.FinalizerNode, "held", found)
	return nil
}

// ListNodes calls each with the metadata of every Node, a page at a time.
func ListNodes(ctx context.Context, client metadata.Interface, each func(*metav1.PartialObjectMetadata)) error {
	opts := metav1.ListOptions{Limit: sweepPageSize}
	pages := 0
	defer func() {
		// Each decoded page is garbage once seen, but the heap it grew stays with the process:
		// Go hands freed memory back to the system only gradually, and 5,000 Nodes left the
		// leader 11 MiB larger for minutes (make bench). A list of more than one page gives it
		// back at once, for one forced collection per term.
		if pages > 1 {
			debug.FreeOSMemory()
		}
	}()
	for {
		pages++
		lctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		page, err := client.Resource(nodeGVR).List(lctx, opts)
		cancel()
		if err != nil {
			return fmt.Errorf("listing Nodes: %w", err)
		}
		for i := range page.Items {
			each(&page.Items[i])
		}
		if opts.Continue = page.Continue; opts.Continue == "" {
			return nil
		}
	}
}
