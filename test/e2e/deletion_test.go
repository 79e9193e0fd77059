package e2e

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestDeleteGuard: deleting the object of a joined member is refused until it is asked to leave;
// then the finalizer holds the object until the member is gone. Deleting a left object just
// deletes it.
func TestDeleteGuard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	others := nonLeaders(e)
	target, left := others[0], others[1]
	e.waitFor(target.Name, "the member finalizer", func(m *v1alpha1.EtcdMember) bool {
		return joined(m) && hasFinalizer(m)
	})

	// The policy takes effect a moment after it is created; a server-side dry run goes through
	// admission without deleting anything.
	refusal := ""
	// A timeout leaves refusal empty, which the check below reports.
	_ = framework.Poll(settle, pollEvery, func(context.Context) (bool, error) {
		out, err := e.api.Kubectl(t, "delete", "etcdmembers.etcdmember.io", target.Name, "--dry-run=server")
		if err != nil {
			refusal = out
		}
		return err != nil, nil
	})
	if !strings.Contains(refusal, "ask it to leave first") {
		t.Fatalf("deleting a joined member was not refused with instructions: %q", refusal)
	}
	out, err := e.api.Kubectl(t, "delete", "etcdmembers.etcdmember.io", target.Name, "--wait=false")
	if err == nil || !strings.Contains(out, "etcdmember-delete-guard") {
		t.Fatalf("delete of a joined member: err=%v, output %q", err, out)
	}
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("the refused delete removed the member")
	}

	// Asked to leave, the delete is accepted and completes once the member is gone.
	e.leave(target.Name)
	e.kubectl("delete", "etcdmembers.etcdmember.io", target.Name, "--timeout=45s")
	if e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("object deleted while its member is still in etcd")
	}
	assertGone(t, e, target.Name)

	// A member that has left: its object deletes at once.
	e.leave(left.Name)
	e.waitFor(left.Name, "Left=True/Removed without finalizer", func(m *v1alpha1.EtcdMember) bool {
		return removedByUs(m) && !hasFinalizer(m)
	})
	e.kubectl("delete", "etcdmembers.etcdmember.io", left.Name, "--timeout=10s")
	assertGone(t, e, left.Name)
}

func hasFinalizer(m *v1alpha1.EtcdMember) bool {
	for _, f := range m.Finalizers {
		if f == v1alpha1.FinalizerMember {
			return true
		}
	}
	return false
}

func assertGone(t *testing.T, e *env, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	err := e.client.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.EtcdMember{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("EtcdMember %s still there (err=%v)", name, err)
	}
}
