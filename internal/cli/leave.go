package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/status"
)

// leaveNeeds is every verb the leave command may use, named in a Forbidden error.
const leaveNeeds = "get, list, patch and, for --wait, watch"

var leavePatch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"leave":true}}`))

// LeaveOptions configures Leave.
type LeaveOptions struct {
	Name   string
	Wait   bool
	DryRun bool
	// Timeout bounds the whole command, the wait included.
	Timeout time.Duration
}

// Leave asks for a member's removal by setting spec.leave, and with Wait follows the object until
// the controller reports the outcome. An error means the leave was refused, did not finish in
// time, or could not be asked for.
func Leave(ctx context.Context, c client.WithWatch, out io.Writer, opts LeaveOptions) error {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	m, err := getMember(ctx, c, opts.Name)
	if apierrors.IsNotFound(err) {
		return notFound(ctx, c, opts.Name)
	}
	if err != nil {
		return explain(err, "get", opts.Name, leaveNeeds)
	}
	if opts.DryRun {
		return dryRun(out, m)
	}
	if err := requestLeave(ctx, c, m); err != nil {
		return err
	}
	if !opts.Wait {
		_, err := fmt.Fprintf(out, "%s: leave requested\n", m.Name)
		return err
	}
	w := &waiter{c: c, out: out, name: m.Name, since: m.Generation, timeout: opts.Timeout, pause: 200 * time.Millisecond}
	return w.wait(ctx, m)
}

// requestLeave patches rather than updates, so a concurrent writer of other fields never makes
// the request fail. m receives the patched object, whose generation the wait starts from.
func requestLeave(ctx context.Context, c client.Client, m *v1alpha1.EtcdMember) error {
	ctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	if err := c.Patch(ctx, m, leavePatch); err != nil {
		return explain(err, "patch", m.Name, leaveNeeds)
	}
	return nil
}

// dryRun reports the leader's pre-flight verdict and changes nothing.
func dryRun(out io.Writer, m *v1alpha1.EtcdMember) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s, spec.leave=%t\n", m.Name, conditionSummary(status.Get(m, v1alpha1.ConditionJoined), v1alpha1.ConditionJoined), m.Spec.Leave)
	removable := status.Get(m, v1alpha1.ConditionRemovable)
	if removable == nil {
		fmt.Fprintf(&b, "%s: Removable unknown: the leading agent sets it on joined members once it has probed the voters\n", m.Name)
	} else {
		fmt.Fprintf(&b, "%s: Removable=%s %s: %s\n", m.Name, removable.Status, removable.Reason, removable.Message)
	}
	b.WriteString("dry run: nothing changed\n")
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	switch {
	case removable == nil:
		return fmt.Errorf("%s has no pre-flight verdict", m.Name)
	case removable.Status != metav1.ConditionTrue:
		return fmt.Errorf("%s is not removable now (%s)", m.Name, removable.Reason)
	}
	return nil
}

func conditionSummary(c *metav1.Condition, condType string) string {
	if c == nil {
		return condType + " unknown"
	}
	return fmt.Sprintf("%s=%s %s", condType, c.Status, c.Reason)
}
