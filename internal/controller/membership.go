package controller

import (
	"context"
	"reflect"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/etcd"
)

// DefaultMembershipPollInterval is how often the leader reads etcd's member list to notice
// changes nobody announced through the API (etcdctl, a member that died of its own removal).
const DefaultMembershipPollInterval = 2 * time.Second

// MembershipWatcher turns changes of etcd's member list into reconcile requests for every object.
// It runs on the leader only.
type MembershipWatcher struct {
	client   client.Reader
	etcd     *etcd.Client
	interval time.Duration
	events   chan event.GenericEvent
}

// NewMembershipWatcher polls etcd every interval and lists objects through c.
func NewMembershipWatcher(c client.Reader, e *etcd.Client, interval time.Duration) *MembershipWatcher {
	return &MembershipWatcher{client: c, etcd: e, interval: interval, events: make(chan event.GenericEvent, 64)}
}

// Source is the controller's view of the watcher.
func (w *MembershipWatcher) Source() source.Source {
	return source.Channel(w.events, &handler.EnqueueRequestForObject{})
}

// NeedLeaderElection makes the watcher run on the leader only.
func (w *MembershipWatcher) NeedLeaderElection() bool { return true }

// Start polls until ctx ends.
func (w *MembershipWatcher) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("membership")
	var last []etcd.Member
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		members, err := w.etcd.MemberList(ctx)
		if err != nil {
			log.V(1).Info("Reading the member list failed", "error", err.Error())
			continue
		}
		if last != nil && reflect.DeepEqual(last, members) {
			continue
		}
		last = members
		if err := w.enqueueAll(ctx); err != nil {
			log.Error(err, "Listing EtcdMembers failed")
			last = nil
		}
	}
}

func (w *MembershipWatcher) enqueueAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := w.client.List(ctx, &list); err != nil {
		return err
	}
	for i := range list.Items {
		select {
		case w.events <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
