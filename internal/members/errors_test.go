package members

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

func TestNotInstalled(t *testing.T) {
	ours, k0s := v1alpha1.GroupVersion, schema.GroupVersion{Group: "etcd.k0sproject.io", Version: "v1beta1"}
	// What the REST mapper returns when discovery does not know the group (controller-runtime's
	// ErrResourceDiscoveryFailed), once wrapped by a caller.
	discovery := func(gv schema.GroupVersion, err error) error {
		return fmt.Errorf("reading EtcdMember node-1: %w", &apiutil.ErrResourceDiscoveryFailed{gv: err})
	}
	cases := []struct {
		name    string
		err     error
		missing bool
	}{
		{"discovery without the group", discovery(ours, &meta.NoResourceMatchError{PartialResource: ours.WithResource("")}), true},
		{"discovery: the group version not found", discovery(ours, apierrors.NewNotFound(schema.GroupResource{}, "")), true},
		{"no kind match", &meta.NoKindMatchError{GroupKind: ours.WithKind("EtcdMember").GroupKind()}, true},
		{"another group missing", discovery(k0s, &meta.NoResourceMatchError{PartialResource: k0s.WithResource("")}), false},
		{"discovery failing otherwise", discovery(ours, apierrors.NewServiceUnavailable("try later")), false},
		{"an object not found", apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("etcdmembers").GroupResource(), "node-1"), false},
		{"no error", nil, false},
	}
	for _, tc := range cases {
		got := NotInstalled(tc.err)
		if (got != nil) != tc.missing {
			t.Errorf("%s: NotInstalled(%v) = %v, want missing %v", tc.name, tc.err, got, tc.missing)
			continue
		}
		if got != nil && !errors.Is(got, tc.err) {
			t.Errorf("%s: %v does not wrap the cause", tc.name, got)
		}
	}
}

// TestLeaveWithoutCRD: every command reports the missing CRD through Explain, with the fix.
func TestLeaveWithoutCRD(t *testing.T) {
	noMatch := &meta.NoKindMatchError{GroupKind: v1alpha1.GroupVersion.WithKind("EtcdMember").GroupKind()}
	c := newClient(t, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return noMatch
	}})
	_, err := Leave(context.Background(), c, &bytes.Buffer{}, "node-2", LeaveOptions{Timeout: 5 * time.Second})
	want := "the EtcdMember CRD (etcdmembers.etcdmember.io) is not installed in this cluster; install it with: kubectl apply -k config/default"
	var missing *NotInstalledError
	if errString(err) != want || !errors.As(err, &missing) {
		t.Errorf("error %v, want %q", err, want)
	}
}
