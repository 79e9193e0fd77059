package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// countingInformer holds the handlers added to it, as a shared informer would.
type countingInformer struct {
	cache.Informer
	handlers map[toolscache.ResourceEventHandlerRegistration]bool
}

type fakeRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	synced atomic.Bool
}

func (r *fakeRegistration) HasSynced() bool { return r.synced.Load() }

func (i *countingInformer) AddEventHandlerWithOptions(toolscache.ResourceEventHandler, toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	r := &fakeRegistration{}
	i.handlers[r] = true
	return r, nil
}

func (i *countingInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	delete(i.handlers, r)
	return nil
}

type sharedCache struct {
	cache.Cache
	informer *countingInformer
}

func (c *sharedCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return c.informer, nil
}

func (c *sharedCache) WaitForCacheSync(context.Context) bool { return true }

// TestTermCacheRemovesItsHandlers: a term's handlers stay on the shared informer while it runs
// and are gone when it ends, one added after the end included; the shared informer itself cannot
// be removed by a term.
func TestTermCacheRemovesItsHandlers(t *testing.T) {
	shared := &sharedCache{informer: &countingInformer{handlers: map[toolscache.ResourceEventHandlerRegistration]bool{}}}
	ctx := context.Background()
	// The agent's own handler, which every term must leave alone.
	if _, err := shared.informer.AddEventHandlerWithOptions(nil, toolscache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}

	term := newTermCache(shared)
	termCtx, end := context.WithCancel(ctx)
	started := make(chan error)
	go func() { started <- term.Start(termCtx) }()
	for range 2 {
		inf, err := term.GetInformer(ctx, &v1alpha1.EtcdMember{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandlerWithOptions(nil, toolscache.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(shared.informer.handlers); n != 3 {
		t.Fatalf("while the term runs: %d handlers on the shared informer, want 3 (the agent's and the term's two)", n)
	}
	end()
	if err := <-started; err != nil {
		t.Fatalf("the term cache's Start: %v", err)
	}
	if n := len(shared.informer.handlers); n != 1 {
		t.Fatalf("after the term: %d handlers on the shared informer, want only the agent's", n)
	}

	late, err := term.GetInformer(ctx, &v1alpha1.EtcdMember{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.AddEventHandlerWithOptions(nil, toolscache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(shared.informer.handlers); n != 1 {
		t.Errorf("a handler added after the term ended stayed: %d handlers, want 1", n)
	}
	if err := term.RemoveInformer(ctx, &v1alpha1.EtcdMember{}); !errors.Is(err, errSharedInformer) {
		t.Errorf("RemoveInformer: %v, want errSharedInformer", err)
	}
}

// TestTermCacheWaitsForItsHandlers: the term's WaitForCacheSync returns only once every handler
// the term added has had the cached objects delivered, so that the source's own 100 ms poll of the
// handler succeeds at its first look.
func TestTermCacheWaitsForItsHandlers(t *testing.T) {
	shared := &sharedCache{informer: &countingInformer{handlers: map[toolscache.ResourceEventHandlerRegistration]bool{}}}
	term := newTermCache(shared)
	inf, err := term.GetInformer(context.Background(), &v1alpha1.EtcdMember{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := inf.AddEventHandlerWithOptions(nil, toolscache.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if term.WaitForCacheSync(ctx) {
		t.Fatal("WaitForCacheSync returned true before the term's handler had synced")
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		reg.(*fakeRegistration).synced.Store(true)
	}()
	start := time.Now()
	if !term.WaitForCacheSync(context.Background()) {
		t.Fatal("WaitForCacheSync returned false once the handler synced")
	}
	if !reg.HasSynced() {
		t.Fatal("WaitForCacheSync returned before the handler synced")
	}
	if waited := time.Since(start); waited > 50*time.Millisecond {
		t.Errorf("WaitForCacheSync took %s after the handler synced at about 10 ms; its poll is %s", waited, handlerSyncPoll)
	}
}
