// The agent's own cache of EtcdMembers, apart from any term's manager: hold-off and withdrawal
// must know whether the local member has a pending leave while this agent does not lead, when no
// term's cache exists.

package agent

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// ownLeave tells whether the local member has a pending leave, from a cache of the EtcdMember
// objects. Every agent keeps one (a single watch), so that it can stop campaigning the moment its
// member is asked to leave, before any Lease changes hands.
type ownLeave struct {
	cache   cache.Cache
	synced  func() bool
	localID func() uint64
	// changed gets a token after any change to any object.
	changed chan struct{}
}

func startOwnLeave(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, localID func() uint64) (*ownLeave, error) {
	// A fixed mapping spares a discovery call, so that an apiserver that is down when the agent
	// starts delays the watch (the informer retries) instead of failing the agent.
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(v1alpha1.GroupVersion.WithKind("EtcdMember"), meta.RESTScopeRoot)
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, Mapper: mapper, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of EtcdMembers: %w", err)
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.EtcdMember{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("watching EtcdMembers: %w", err)
	}
	o := &ownLeave{cache: c, synced: inf.HasSynced, localID: localID, changed: make(chan struct{}, 1)}
	notify := func() {
		select {
		case o.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return nil, fmt.Errorf("watching EtcdMembers: %w", err)
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			logf.FromContext(ctx).Error(err, "The cache of EtcdMembers stopped; campaigning as if no own leave were pending")
		}
	}()
	return o, nil
}

// pending reports whether the local member's object keeps this agent out of the election
// (staysOut); known is false until the cache has synced and the local member ID is known.
func (o *ownLeave) pending(ctx context.Context) (pending, known bool) {
	id := o.localID()
	if id == 0 || !o.synced() {
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := o.cache.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "Listing cached EtcdMembers failed")
		return false, false
	}
	return staysOut(list.FindByMemberID(etcd.IDString(id))), true
}

// staysOut tells whether the object of the local member keeps its agent out of the election: a
// leave pending (spec.leave without Left=True, the test the leader's controller applies before
// it hands over), or its member recorded out of etcd (its leave done, or evicted). An agent
// cannot lead from a member that is gone; its registrar notices only when a sync fails, seconds
// later, and until then it would win a free Lease and hold it idle: in a make test run of issue
// #48 the agent of a member removed a moment earlier took the Lease the leader released, and kept
// it for 10 s.
func staysOut(own *v1alpha1.EtcdMember) bool {
	return own != nil && (own.LeavePending() || own.RecordedGone())
}
