// A term's cache of EtcdMembers, lent from the agent's own (ownLeave): a term that starts right
// after a released Lease (a hand-over) campaigns for milliseconds, too short for a cache of its
// own to list the objects, so its controllers waited about 200 ms (two of client-go's 100 ms sync
// polls) after winning. The agent's cache has been synced all along; a term only adds its event
// handlers to it, and takes them away again when it ends.

package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// termCache is one term's view of a cache that outlives it. Its Start does not start the shared
// cache (the agent did); it waits for the term to end and then removes every handler the term's
// controllers added, so that terms do not pile up listeners on the shared informers.
type termCache struct {
	cache.Cache

	mu      sync.Mutex
	ended   bool
	handles []termHandle
}

type termHandle struct {
	informer cache.Informer
	reg      toolscache.ResourceEventHandlerRegistration
}

var errSharedInformer = errors.New("a term cannot remove an informer of the agent's shared cache")

func newTermCache(shared cache.Cache) *termCache { return &termCache{Cache: shared} }

func (c *termCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return &termInformer{Informer: inf, term: c}, nil
}

func (c *termCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return &termInformer{Informer: inf, term: c}, nil
}

// handlerSyncPoll is how often WaitForCacheSync looks at the term's new handlers: each has the
// objects already cached delivered within microseconds, far below client-go's 100 ms poll.
const handlerSyncPoll = 2 * time.Millisecond

// WaitForCacheSync waits for the shared cache and then for every handler the term has added to
// have received the objects already cached. A controller's source adds its handler, calls this,
// and then polls the handler itself every 100 ms; this wait makes that poll's first, immediate
// look succeed, and so spares a new leader 100 ms before its first reconcile.
func (c *termCache) WaitForCacheSync(ctx context.Context) bool {
	if !c.Cache.WaitForCacheSync(ctx) {
		return false
	}
	return wait.PollUntilContextCancel(ctx, handlerSyncPoll, true, func(context.Context) (bool, error) {
		return c.handlersSynced(), nil
	}) == nil
}

func (c *termCache) handlersSynced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.handles {
		if !h.reg.HasSynced() {
			return false
		}
	}
	return true
}

// RemoveInformer would stop the informer for the agent and every later term.
func (c *termCache) RemoveInformer(context.Context, client.Object) error { return errSharedInformer }

// Start waits for the end of the term, then takes the term's handlers off the shared informers.
func (c *termCache) Start(ctx context.Context) error {
	<-ctx.Done()
	c.mu.Lock()
	handles := c.handles
	c.handles, c.ended = nil, true
	c.mu.Unlock()
	for _, h := range handles {
		if err := h.informer.RemoveEventHandler(h.reg); err != nil {
			logf.FromContext(ctx).Error(err, "Removing an ended term's event handler from the shared cache failed")
		}
	}
	return nil
}

// track keeps reg for removal at the term's end; a handler added after the end (a controller
// still starting as the term is cancelled) is removed at once.
func (c *termCache) track(inf cache.Informer, reg toolscache.ResourceEventHandlerRegistration) {
	c.mu.Lock()
	ended := c.ended
	if !ended {
		c.handles = append(c.handles, termHandle{informer: inf, reg: reg})
	}
	c.mu.Unlock()
	if ended {
		_ = inf.RemoveEventHandler(reg)
	}
}

// termInformer records the handlers a term adds.
type termInformer struct {
	cache.Informer
	term *termCache
}

func (i *termInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandler(h))
}

func (i *termInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (i *termInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithOptions(h, opts))
}

func (i *termInformer) tracked(reg toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		i.term.track(i.Informer, reg)
	}
	return reg, err
}
