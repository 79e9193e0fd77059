package members

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// leaveNeeds is every verb a leave may use, named in a Forbidden error.
const leaveNeeds = "get, list, patch and, to wait, watch"

// cancelPatch withdraws a request: spec.leave false, and spec.memberID gone with it.
var cancelPatch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"leave":false,"memberID":null}}`))

// leavePatch asks for the removal of member id, the one the object records when it was read: if
// the node re-joins before the controller acts, the controller removes nothing (MemberMismatch).
// An object with no member ID yet gets spec.leave alone, which the controller answers NoMemberID.
func leavePatch(id string) client.Patch {
	spec := map[string]any{"leave": true}
	if id != "" {
		spec["memberID"] = id
	}
	data, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		// A map of a bool and a string always marshals.
		panic(err)
	}
	return client.RawPatch(types.MergePatchType, data)
}

// DryRun is kubectl's --dry-run: none, client (read and judge only) or server (send the request
// with dryRun=All, which proves RBAC and admission and persists nothing).
type DryRun string

// Dry-run modes.
const (
	DryRunNone   DryRun = "none"
	DryRunClient DryRun = "client"
	DryRunServer DryRun = "server"
)

// LeaveOptions configures Leave.
type LeaveOptions struct {
	// Wait follows the object until the member left or the controller refused.
	Wait   bool
	DryRun DryRun
	// Timeout bounds the whole leave of one member, the wait included.
	Timeout time.Duration
	// MemberID, when set, is the member the caller means: if the object has come to record
	// another one meanwhile (its node re-joined), nothing is asked.
	MemberID string
	// RefusalGrace is how long a refusal that can pass by itself (QuorumAtRisk, NoOtherAgent)
	// must last before the wait ends on it; 0 ends it at once.
	RefusalGrace time.Duration
}

// DefaultRefusalGrace is two of the leader's probe rounds at the agents' default
// --probe-interval (5s): a member that has just restarted is Healthy again within that, and its
// refusal passes.
const DefaultRefusalGrace = 10 * time.Second

// Leave asks for the removal of the member the object name records, and with Wait follows the
// object until the controller reports the outcome, printing each step to progress. It returns a
// one-line summary of what happened. A *RefusedError or *TimeoutError says why it stopped early.
func Leave(ctx context.Context, c client.WithWatch, progress io.Writer, name string, opts LeaveOptions) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	summary, err := leave(ctx, c, progress, name, opts)
	var timeout *TimeoutError
	if err != nil && !errors.As(err, &timeout) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The deadline ran out inside an API call rather than in the wait.
		return "", &TimeoutError{What: fmt.Sprintf("after %s asking %s to leave", opts.Timeout, name), Last: err.Error()}
	}
	return summary, err
}

func leave(ctx context.Context, c client.WithWatch, progress io.Writer, name string, opts LeaveOptions) (string, error) {
	m, err := Get(ctx, c, name)
	if apierrors.IsNotFound(err) {
		return "", NotFound(ctx, c, name)
	}
	if err != nil {
		return "", Explain(err, "get", name, leaveNeeds)
	}
	if err := stillJoined(m, opts.MemberID); err != nil {
		return "", err
	}
	switch opts.DryRun {
	case DryRunClient:
		return preflight(progress, m)
	case DryRunServer:
		if err := patch(ctx, c, m, leavePatch(m.Status.MemberID), client.DryRunAll); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: leave accepted by the API server (server dry run: nothing changed)", m.Name), nil
	}
	wasPending := m.LeaveAsked()
	if err := patch(ctx, c, m, leavePatch(m.Status.MemberID)); err != nil {
		return "", err
	}
	if !opts.Wait {
		if wasPending {
			return fmt.Sprintf("%s: leave was already requested", m.Name), nil
		}
		return fmt.Sprintf("%s: leave requested", m.Name), nil
	}
	w := &waiter{c: c, out: progress, name: m.Name, uid: m.UID, since: m.Generation, timeout: opts.Timeout, grace: opts.RefusalGrace}
	if err := w.wait(ctx, m); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: member %s left etcd", m.Name, m.Status.MemberID), nil
}

// CancelLeave sets spec.leave back to false. A removal that already happened cannot be undone,
// which is an error; cancelling when nothing is pending is not.
func CancelLeave(ctx context.Context, c client.Client, name string, dryRun DryRun, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := Get(ctx, c, name)
	if apierrors.IsNotFound(err) {
		return "", NotFound(ctx, c, name)
	}
	if err != nil {
		return "", Explain(err, "get", name, leaveNeeds)
	}
	if !m.Spec.Leave {
		return fmt.Sprintf("%s: no leave pending", m.Name), nil
	}
	if left := status.Get(m, v1alpha1.ConditionLeft); left != nil && left.Status == metav1.ConditionTrue {
		return "", fmt.Errorf("%s: the member already left etcd (%s); there is nothing to cancel", m.Name, left.Reason)
	}
	var opts []client.PatchOption
	if dryRun == DryRunServer {
		opts = append(opts, client.DryRunAll)
	}
	if dryRun != DryRunClient {
		if err := patch(ctx, c, m, cancelPatch, opts...); err != nil {
			return "", err
		}
	}
	if dryRun != DryRunNone {
		return fmt.Sprintf("%s: leave would be cancelled (dry run: nothing changed)", m.Name), nil
	}
	return fmt.Sprintf("%s: leave cancelled", m.Name), nil
}

// stillJoined refuses a leave of an object whose member is gone already: setting spec.leave on
// it would remove nothing, and would be a trap for the node that re-joins under the name.
func stillJoined(m *v1alpha1.EtcdMember, memberID string) error {
	if memberID != "" && m.Status.MemberID != memberID {
		return fmt.Errorf("%s now records member %q, not %s (its node re-joined); nothing asked", m.Name, m.Status.MemberID, memberID)
	}
	if m.RecordedGone() {
		j := status.Get(m, v1alpha1.ConditionJoined)
		return fmt.Errorf("%s: member %s already left etcd (Joined=False %s since %s)", m.Name,
			m.Status.MemberID, j.Reason, j.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	return nil
}

// patch sends a merge patch rather than an update, so a concurrent writer of other fields never
// makes the request fail. m receives the patched object, whose generation a wait starts from.
func patch(ctx context.Context, c client.Client, m *v1alpha1.EtcdMember, p client.Patch, opts ...client.PatchOption) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := c.Patch(ctx, m, p, opts...); err != nil {
		return Explain(err, "patch", m.Name, leaveNeeds)
	}
	return nil
}

// preflight reports the leader's pre-flight verdict (the Removable condition) and changes nothing.
func preflight(progress io.Writer, m *v1alpha1.EtcdMember) (string, error) {
	joined := conditionSummary(status.Get(m, v1alpha1.ConditionJoined), v1alpha1.ConditionJoined)
	if _, err := fmt.Fprintf(progress, "%s: %s, spec.leave=%t\n", m.Name, joined, m.Spec.Leave); err != nil {
		return "", fmt.Errorf("writing progress: %w", err)
	}
	removable := status.Get(m, v1alpha1.ConditionRemovable)
	switch {
	case removable == nil:
		return "", fmt.Errorf("%s has no pre-flight verdict yet: the leading agent sets Removable on joined members once it has probed the voters", m.Name)
	case removable.Status != metav1.ConditionTrue:
		return "", &RefusedError{Name: m.Name, Reason: removable.Reason, Message: removable.Message, DryRun: true}
	}
	return fmt.Sprintf("%s: Removable=True %s: %s (client dry run: nothing changed)", m.Name, removable.Reason,
		strings.TrimRight(removable.Message, ". ")), nil
}

func conditionSummary(c *metav1.Condition, condType string) string {
	if c == nil {
		return condType + " unknown"
	}
	return fmt.Sprintf("%s=%s %s", condType, c.Status, c.Reason)
}
