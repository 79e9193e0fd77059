package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// APITimeout bounds each Kubernetes API request of the agent, the leader and the plugin, inside
// whatever deadline the caller has for the whole operation.
const APITimeout = 10 * time.Second

// ErrNameTaken marks the case where two live members share one name: the object records a member
// that is still in etcd, so it cannot be taken over for another.
var ErrNameTaken = errors.New("two etcd members share one name")

// TakeOver makes obj, which records an earlier member of the same name, record member instead.
// That is only right when the recorded member is gone from etcd (members): the node was wiped
// and re-added under the same name, so the earlier leave, if any, is complete and is cleared.
//
// The member's agent and the leader both take objects over, because the agent may start late or
// not at all, and a second object for the member would be one too many once the agent took its
// own over. Whichever comes second finds the object already recording member and writes nothing.
// publish, when not nil, adds the caller's own status fields before the write. A conflict reads
// the object again through reader and decides again.
//
// It returns the Joined condition's message when it wrote obj (obj is then the object as
// written), "" when there was nothing to write, and ErrNameTaken, wrapped, when the recorded
// member is still in etcd.
func TakeOver(ctx context.Context, c client.Client, reader client.Reader, obj *v1alpha1.EtcdMember,
	member etcd.Member, members []etcd.Member, publish func(*v1alpha1.EtcdMember)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	var msg string
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		msg = ""
		if !first {
			key := client.ObjectKeyFromObject(obj)
			*obj = v1alpha1.EtcdMember{}
			if err := reader.Get(ctx, key, obj); err != nil {
				return err
			}
		}
		first = false
		if obj.DeletionTimestamp != nil || obj.Status.MemberID == etcd.IDString(member.ID) {
			return nil
		}
		previous := obj.Status.MemberID
		// An ID that does not parse names no member in etcd.
		if id, err := etcd.ParseID(previous); err == nil {
			if _, ok := etcd.FindMember(members, id); ok {
				return fmt.Errorf("EtcdMember %s records member %s, which is still in etcd; the member %s has the same name: %w",
					obj.Name, previous, etcd.IDString(member.ID), ErrNameTaken)
			}
		}
		logf.FromContext(ctx).Info("Taking an object over for a re-joined member", "object", obj.Name,
			"memberID", etcd.IDString(member.ID), "previousMemberID", previous)
		if ClearLeave(obj) {
			if err := c.Update(ctx, obj); err != nil {
				return err
			}
		}
		msg = Rejoin(obj, member)
		if publish != nil {
			publish(obj)
		}
		return c.Status().Update(ctx, obj)
	})
	if err != nil {
		return "", fmt.Errorf("taking %s over for re-joined member %s: %w", obj.Name, etcd.IDString(member.ID), err)
	}
	return msg, nil
}
