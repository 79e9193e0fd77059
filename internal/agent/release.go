// Campaigning again the moment the leader Lease is released: client-go's candidates look at the
// Lease only every --leader-elect-retry-period, jittered up to 2.2 times that, so a released Lease
// (a hand-over, a leader shutting down) used to stay free for up to 2.2 retry periods with a leave
// waiting on it. Every agent watches the one Lease instead, and a term still campaigning when it
// is released starts over, which tries for it at once.

package agent

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// leaseReleases gets a token whenever the leader Lease goes from held to released (no holder).
type leaseReleases struct {
	released chan struct{}
}

// startLeaseReleases watches the leader Lease alone (a field selector on its name, which RBAC
// grants by resourceName) for as long as ctx lasts.
func startLeaseReleases(ctx context.Context, cfg *rest.Config, namespace string) (*leaseReleases, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client of the leader Lease's watch: %w", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", v1alpha1.LeaseName).String()
		}))
	r := &leaseReleases{released: make(chan struct{}, 1)}
	if _, err := factory.Coordination().V1().Leases().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*coordinationv1.Lease)
			n, ok2 := newObj.(*coordinationv1.Lease)
			if ok1 && ok2 && ptr.Deref(o.Spec.HolderIdentity, "") != "" && ptr.Deref(n.Spec.HolderIdentity, "") == "" {
				select {
				case r.released <- struct{}{}:
				default:
				}
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching the leader Lease: %w", err)
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return r, nil
}

// drain drops a release seen before now: a term that starts campaigning afterwards finds the
// Lease free by itself.
func (r *leaseReleases) drain() {
	select {
	case <-r.released:
	default:
	}
}

// campaignAgainOnRelease ends the term of ctx, while it is still campaigning, as soon as the
// Lease is released, so that the next term tries for it at once instead of at its next retry.
// It never ends a term that leads, nor one in the middle of a change.
func (l *leadership) campaignAgainOnRelease(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.releases.released:
		}
		if l.endTerm(ctx, onlyWhileCampaigning) {
			logf.FromContext(ctx).Info("The leader Lease was released; campaigning again at once")
			return
		}
	}
}
