// Package events writes events.k8s.io/v1 Events about EtcdMember objects into one namespace.
//
// client-go's recorders put the Events of a cluster-scoped object into "default"; operators look
// for control-plane Events in kube-system, so the namespace is ours to choose here. Events are only
// written on state changes, which keeps them few enough to need no aggregation.
package events

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// ReportingController names etcdmember in the Events it writes.
const ReportingController = "etcdmember.io/agent"

// writeTimeout is the status writes' own (status.APITimeout): the Event of a change must ride out
// the same slow control plane as the status that records it.
const writeTimeout = status.APITimeout

// attemptTimeout bounds one try of a write. On kubeadm's control plane the "kubernetes" Service
// may hand the connection to an apiserver whose etcd member was just removed or is restarting:
// it accepts the request and answers nothing. A try that got no answer in half the write's time
// leaves the other half to another try, on a new connection (the agent closes its API connections
// after a request times out). The Event's name is fixed before the first try, so a try that was
// applied but not answered makes the next one AlreadyExists, which counts as written: one Event,
// never two. The kubeadm tier lost the Removed Event of a leave that way (issue #49).
const attemptTimeout = writeTimeout / 2

// Recorder writes Events.
type Recorder struct {
	Client    client.Client
	Namespace string
	// Instance names the agent that reports, so an operator can tell which node acted.
	Instance string

	// attemptTimeout replaces the package's in tests; zero means the package's.
	attemptTimeout time.Duration
}

// Normal records something that went as asked.
func (r *Recorder) Normal(ctx context.Context, m *v1alpha1.EtcdMember, reason, action, note string) {
	r.write(ctx, m, corev1.EventTypeNormal, reason, action, note)
}

// Warning records a refusal or failure the operator should look at.
func (r *Recorder) Warning(ctx context.Context, m *v1alpha1.EtcdMember, reason, action, note string) {
	r.write(ctx, m, corev1.EventTypeWarning, reason, action, note)
}

// write is best effort: a lost Event must never fail or delay a membership change, so errors are
// logged, not returned. An Event tells of something already done, so it is written even when
// the caller's context ends right after, as a leadership term's does when the leader steps down.
func (r *Recorder) write(ctx context.Context, m *v1alpha1.EtcdMember, eventType, reason, action, note string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	now := time.Now()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", m.Name, now.UnixNano()),
			Namespace: r.Namespace,
		},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: ReportingController,
		ReportingInstance:   r.Instance,
		Action:              action,
		Reason:              reason,
		Note:                truncate(note, 1024),
		Type:                eventType,
		Regarding: corev1.ObjectReference{
			APIVersion:      v1alpha1.GroupVersion.String(),
			Kind:            "EtcdMember",
			Name:            m.Name,
			UID:             m.UID,
			ResourceVersion: m.ResourceVersion,
		},
	}
	// Retried: right after a removal the apiserver may still be talking to the removed member
	// and answer "raft: stopped" once, or not answer at all (attemptTimeout).
	perTry := r.attemptTimeout
	if perTry == 0 {
		perTry = attemptTimeout
	}
	tries := 0
	transient := func(err error) bool { return ctx.Err() == nil && !permanent(err) }
	err := retry.OnError(retry.DefaultBackoff, transient, func() error {
		tries++
		try, cancel := context.WithTimeout(ctx, perTry)
		defer cancel()
		err := r.Client.Create(try, ev)
		if tries > 1 && apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		logf.FromContext(ctx).Error(err, "Writing event failed", "reason", reason, "note", note, "tries", tries)
	}
}

// permanent tells the errors that another try would meet again.
func permanent(err error) bool {
	return apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
