package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func leave(t *testing.T, c client.WithWatch, opts LeaveOptions) (string, error) {
	t.Helper()
	opts.Timeout = 5 * time.Second
	var out bytes.Buffer
	err := Leave(context.Background(), c, &out, opts)
	return out.String(), err
}

func TestLeaveUnknownNameListsExisting(t *testing.T) {
	a, b := object("node-1", "a", false), object("node-2", "b", false)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(&a, &b).Build()
	_, err := leave(t, c, LeaveOptions{Name: "nosuch"})
	if want := `EtcdMember "nosuch" not found; existing: node-1, node-2`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestLeaveWithoutWait(t *testing.T) {
	m := object("node-2", "b", false, joined)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(&m).Build()
	out, err := leave(t, c, LeaveOptions{Name: "node-2"})
	if err != nil || out != "node-2: leave requested\n" {
		t.Fatalf("leave: %v, %q", err, out)
	}
	if got, err := getMember(context.Background(), c, "node-2"); err != nil || !got.Spec.Leave {
		t.Errorf("spec.leave not set: %v", err)
	}
}

func TestLeaveForbiddenNamesTheVerb(t *testing.T) {
	m := object("node-2", "b", false, joined)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(&m).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "etcdmember.io", Resource: "etcdmembers"}, "node-2",
				errors.New(`User "viewer" cannot patch resource "etcdmembers"`))
		},
	}).Build()
	_, err := leave(t, c, LeaveOptions{Name: "node-2"})
	want := `forbidden to patch etcdmembers.etcdmember.io "node-2"; this command needs get, list, patch and, for --wait, watch on etcdmembers.etcdmember.io`
	if err == nil || !strings.HasPrefix(err.Error(), want) || !apierrors.IsForbidden(err) {
		t.Errorf("error %v, want it to start with %q and wrap the Forbidden error", err, want)
	}
}

func TestDryRun(t *testing.T) {
	removable := func(s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return withMessage(cond("Removable", s, reason), msg)
	}
	cases := []struct {
		name    string
		conds   []metav1.Condition
		want    string
		wantErr string
	}{
		{"removable", []metav1.Condition{joined, removable(metav1.ConditionTrue, "QuorumKept", "removing node-2 would leave 2 healthy voters of 2; quorum of 2 needs 2")},
			`node-2: Joined=True InMemberList, spec.leave=false
node-2: Removable=True QuorumKept: removing node-2 would leave 2 healthy voters of 2; quorum of 2 needs 2
dry run: nothing changed
`, ""},
		{"quorum at risk", []metav1.Condition{joined, removable(metav1.ConditionFalse, "QuorumAtRisk", "removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2")},
			`node-2: Joined=True InMemberList, spec.leave=false
node-2: Removable=False QuorumAtRisk: removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2
dry run: nothing changed
`, "node-2 is not removable now (QuorumAtRisk)"},
		{"no verdict", nil,
			`node-2: Joined unknown, spec.leave=false
node-2: Removable unknown: the leading agent sets it on joined members once it has probed the voters
dry run: nothing changed
`, "node-2 has no pre-flight verdict"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := object("node-2", "b", false, tc.conds...)
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(&m).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return errors.New("a dry run must not patch")
				},
			}).Build()
			out, err := leave(t, c, LeaveOptions{Name: "node-2", DryRun: true})
			if out != tc.want {
				t.Errorf("output\n%s\nwant\n%s", out, tc.want)
			}
			if gotErr := errString(err); gotErr != tc.wantErr {
				t.Errorf("error %q, want %q", gotErr, tc.wantErr)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
