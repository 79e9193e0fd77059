package members

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// leaveNode2 asks node-2 to leave with a generous timeout unless opts set one.
func leaveNode2(t *testing.T, c client.WithWatch, opts LeaveOptions) (summary, progress string, err error) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	var out bytes.Buffer
	summary, err = Leave(context.Background(), c, &out, "node-2", opts)
	return summary, out.String(), err
}

func TestLeaveUnknownNameListsExisting(t *testing.T) {
	a, b := object("node-1", "a", false), object("node-2", "b", false)
	cases := []struct {
		name string
		objs []client.Object
		want string
	}{
		{"others exist", []client.Object{&b, &a}, `EtcdMember "nosuch" not found; existing: node-1, node-2`},
		{"none exist", nil, `EtcdMember "nosuch" not found; there are no EtcdMember objects`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, interceptor.Funcs{Patch: noPatch}, tc.objs...)
			_, err := Leave(context.Background(), c, &bytes.Buffer{}, "nosuch", LeaveOptions{Timeout: 5 * time.Second})
			if errString(err) != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			_, err = CancelLeave(context.Background(), c, "nosuch", DryRunNone, 5*time.Second)
			if errString(err) != tc.want {
				t.Errorf("cancel: error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLeaveWithoutWait(t *testing.T) {
	cases := []struct {
		name  string
		leave bool
		want  string
	}{
		{"new request", false, "node-2: leave requested"},
		{"already requested", true, "node-2: leave was already requested"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := object("node-2", "b", tc.leave, joined)
			var log patchLog
			c := newClient(t, interceptor.Funcs{Patch: log.patch}, &m)
			summary, progress, err := leaveNode2(t, c, LeaveOptions{})
			if err != nil || summary != tc.want || progress != "" {
				t.Fatalf("leave: %v, summary %q, progress %q", err, summary, progress)
			}
			if !read(t, c, "node-2").Spec.Leave {
				t.Error("spec.leave not set")
			}
			if want := []string{`{"spec":{"leave":true,"memberID":"b"}}`}; !slices.Equal(log.bodies, want) || log.dryRuns[0] {
				t.Errorf("patches %q (dry run %v), want %q", log.bodies, log.dryRuns, want)
			}
		})
	}
}

func TestLeaveForbiddenNamesTheVerb(t *testing.T) {
	cases := []struct {
		verb  string
		funcs interceptor.Funcs
	}{
		{"get", interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return forbidden("get", "node-2")
		}}},
		{"patch", interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return forbidden("patch", "node-2")
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.verb, func(t *testing.T) {
			m := object("node-2", "b", false, joined)
			c := newClient(t, tc.funcs, &m)
			_, _, err := leaveNode2(t, c, LeaveOptions{})
			want := `forbidden to ` + tc.verb + ` etcdmembers.etcdmember.io "node-2"; this command needs get, list, patch and, to wait, watch on etcdmembers.etcdmember.io`
			if !strings.HasPrefix(errString(err), want) || !apierrors.IsForbidden(err) {
				t.Errorf("error %v, want it to start with %q and wrap the Forbidden error", err, want)
			}
		})
	}
}

func TestLeaveDryRunClient(t *testing.T) {
	removable := func(s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return withMessage(cond(v1alpha1.ConditionRemovable, s, reason), msg)
	}
	cases := []struct {
		name         string
		conds        []metav1.Condition
		wantProgress string
		wantSummary  string
		wantErr      string
		wantRefusal  string // the RefusedError's reason, if one is expected
	}{
		{
			name:         "removable",
			conds:        []metav1.Condition{joined, removable(metav1.ConditionTrue, v1alpha1.ReasonQuorumKept, "Removing node-2 would leave 2 healthy voters of 2; quorum of 2 needs 2.")},
			wantProgress: "node-2: Joined=True InMemberList, spec.leave=false\n",
			wantSummary:  "node-2: Removable=True QuorumKept: Removing node-2 would leave 2 healthy voters of 2; quorum of 2 needs 2 (client dry run: nothing changed)",
		},
		{
			name:         "quorum at risk",
			conds:        []metav1.Condition{joined, removable(metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "Removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2.")},
			wantProgress: "node-2: Joined=True InMemberList, spec.leave=false\n",
			wantErr:      "node-2 is not removable now (Removable=False QuorumAtRisk): Removing node-2 would leave 1 healthy voter of 2; quorum of 2 needs 2 (client dry run: nothing changed)",
			wantRefusal:  v1alpha1.ReasonQuorumAtRisk,
		},
		{
			name:         "last voter",
			conds:        []metav1.Condition{joined, removable(metav1.ConditionFalse, v1alpha1.ReasonLastVoter, "node-2 is the only voter.")},
			wantProgress: "node-2: Joined=True InMemberList, spec.leave=false\n",
			wantErr:      "node-2 is not removable now (Removable=False LastVoter): node-2 is the only voter (client dry run: nothing changed)",
			wantRefusal:  v1alpha1.ReasonLastVoter,
		},
		{
			name:         "no verdict",
			wantProgress: "node-2: Joined unknown, spec.leave=false\n",
			wantErr:      "node-2 has no pre-flight verdict yet: the leading agent sets Removable on joined members once it has probed the voters",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := object("node-2", "b", false, tc.conds...)
			c := newClient(t, interceptor.Funcs{Patch: noPatch}, &m)
			before := read(t, c, "node-2")
			summary, progress, err := leaveNode2(t, c, LeaveOptions{DryRun: DryRunClient, Wait: true})
			if progress != tc.wantProgress {
				t.Errorf("progress %q, want %q", progress, tc.wantProgress)
			}
			if summary != tc.wantSummary {
				t.Errorf("summary %q, want %q", summary, tc.wantSummary)
			}
			if errString(err) != tc.wantErr {
				t.Errorf("error %q, want %q", errString(err), tc.wantErr)
			}
			var refusal *RefusedError
			switch {
			case tc.wantRefusal == "" && errors.As(err, &refusal):
				t.Errorf("unexpected *RefusedError %+v", *refusal)
			case tc.wantRefusal != "" && !errors.As(err, &refusal):
				t.Errorf("want a *RefusedError, got %T", err)
			case tc.wantRefusal != "" && (refusal.Reason != tc.wantRefusal || !refusal.DryRun || !refusal.QuorumGuard()):
				t.Errorf("refusal %+v", *refusal)
			}
			if after := read(t, c, "node-2"); after.ResourceVersion != before.ResourceVersion || after.Spec.Leave {
				t.Error("a client dry run changed the object")
			}
		})
	}
}

func TestLeaveDryRunServer(t *testing.T) {
	m := object("node-2", "b", false, joined)
	var log patchLog
	c := newClient(t, interceptor.Funcs{Patch: log.patch}, &m)
	before := read(t, c, "node-2")
	summary, progress, err := leaveNode2(t, c, LeaveOptions{DryRun: DryRunServer, Wait: true})
	if err != nil || progress != "" {
		t.Fatalf("leave: %v, progress %q", err, progress)
	}
	if want := "node-2: leave accepted by the API server (server dry run: nothing changed)"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
	if !slices.Equal(log.dryRuns, []bool{true}) {
		t.Errorf("patches %q with dry run %v, want one with dryRun=All", log.bodies, log.dryRuns)
	}
	if after := read(t, c, "node-2"); after.ResourceVersion != before.ResourceVersion || after.Spec.Leave {
		t.Error("a server dry run changed the object")
	}
}

func TestLeaveRefusedBeforeAsking(t *testing.T) {
	at := metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.FixedZone("CEST", 2*60*60)))
	cases := []struct {
		name     string
		obj      v1alpha1.EtcdMember
		memberID string
		dryRun   DryRun
		want     string
	}{
		{
			name: "already left",
			obj:  object("node-2", "b", true, since(removed, at), leftDone),
			want: "node-2: member b already left etcd (Joined=False Removed since 2025-06-01T10:00:00Z)",
		},
		{
			name:   "already left, dry run",
			obj:    object("node-2", "b", false, since(removed, at)),
			dryRun: DryRunServer,
			want:   "node-2: member b already left etcd (Joined=False Removed since 2025-06-01T10:00:00Z)",
		},
		{
			name:     "re-joined as another member",
			obj:      object("node-2", "c", false, joined),
			memberID: "b",
			want:     `node-2 now records member "c", not b (its node re-joined); nothing asked`,
		},
		{
			name:     "the member meant",
			obj:      object("node-2", "b", false, joined),
			memberID: "b",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var log patchLog
			c := newClient(t, interceptor.Funcs{Patch: log.patch}, &tc.obj)
			_, _, err := leaveNode2(t, c, LeaveOptions{MemberID: tc.memberID, DryRun: tc.dryRun})
			if errString(err) != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if patched := len(log.calls()) > 0; patched != (tc.want == "") {
				t.Errorf("patched: %t", patched)
			}
		})
	}
}

// blockUntilDone is an API call that hangs until its context ends, as one to an API server that
// does not answer.
func blockUntilDone(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestLeaveDeadlineInsideAPICall(t *testing.T) {
	cases := []struct {
		name  string
		funcs interceptor.Funcs
	}{
		{"get", interceptor.Funcs{Get: func(ctx context.Context, _ client.WithWatch, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
			return blockUntilDone(ctx)
		}}},
		{"patch", interceptor.Funcs{Patch: func(ctx context.Context, _ client.WithWatch, _ client.Object, _ client.Patch, _ ...client.PatchOption) error {
			return blockUntilDone(ctx)
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := object("node-2", "b", false, joined)
			c := newClient(t, tc.funcs, &m)
			summary, _, err := leaveNode2(t, c, LeaveOptions{Timeout: 100 * time.Millisecond, Wait: true})
			var timeout *TimeoutError
			if !errors.As(err, &timeout) {
				t.Fatalf("want a *TimeoutError, got %v", err)
			}
			if summary != "" {
				t.Errorf("summary %q on a timeout", summary)
			}
			if timeout.What != "after 100ms asking node-2 to leave" {
				t.Errorf("What %q", timeout.What)
			}
			if want := tc.name + ` etcdmembers.etcdmember.io "node-2": context deadline exceeded`; timeout.Last != want {
				t.Errorf("Last %q, want %q", timeout.Last, want)
			}
		})
	}
}

func TestCancelLeave(t *testing.T) {
	cases := []struct {
		name        string
		obj         v1alpha1.EtcdMember
		dryRun      DryRun
		want        string
		wantErr     string
		wantPatches []bool // dry run of each patch sent
		wantLeave   bool   // spec.leave afterwards
	}{
		{
			name:        "pending",
			obj:         object("node-2", "b", true, joined, atRisk),
			want:        "node-2: leave cancelled",
			wantPatches: []bool{false},
		},
		{
			name: "nothing pending",
			obj:  object("node-2", "b", false, joined),
			want: "node-2: no leave pending",
		},
		{
			name:      "already left",
			obj:       object("node-2", "b", true, removed, leftDone),
			wantErr:   "node-2: the member already left etcd (Removed); there is nothing to cancel",
			wantLeave: true,
		},
		{
			name:      "client dry run",
			obj:       object("node-2", "b", true, joined, atRisk),
			dryRun:    DryRunClient,
			want:      "node-2: leave would be cancelled (dry run: nothing changed)",
			wantLeave: true,
		},
		{
			name:        "server dry run",
			obj:         object("node-2", "b", true, joined, atRisk),
			dryRun:      DryRunServer,
			want:        "node-2: leave would be cancelled (dry run: nothing changed)",
			wantPatches: []bool{true},
			wantLeave:   true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var log patchLog
			c := newClient(t, interceptor.Funcs{Patch: log.patch}, &tc.obj)
			dryRun := tc.dryRun
			if dryRun == "" {
				dryRun = DryRunNone
			}
			got, err := CancelLeave(context.Background(), c, "node-2", dryRun, 5*time.Second)
			if got != tc.want || errString(err) != tc.wantErr {
				t.Errorf("CancelLeave = %q, %v; want %q, %q", got, err, tc.want, tc.wantErr)
			}
			if !slices.Equal(log.dryRuns, tc.wantPatches) {
				t.Errorf("patches %q with dry run %v, want dry runs %v", log.bodies, log.dryRuns, tc.wantPatches)
			}
			for _, body := range log.bodies {
				if body != `{"spec":{"leave":false,"memberID":null}}` {
					t.Errorf("patch %s", body)
				}
			}
			if leave := read(t, c, "node-2").Spec.Leave; leave != tc.wantLeave {
				t.Errorf("spec.leave %t, want %t", leave, tc.wantLeave)
			}
		})
	}
}

func TestRefusedErrorMessages(t *testing.T) {
	cases := []struct {
		err  RefusedError
		want string
	}{
		{
			RefusedError{Name: "node-2", Reason: v1alpha1.ReasonQuorumAtRisk, Message: "Removing node-2 would cost quorum. "},
			"leave of node-2 refused by the quorum guard (QuorumAtRisk): Removing node-2 would cost quorum. The request stays pending and completes by itself once the cluster is healthy enough; cancel it with: kubectl etcdmember leave node-2 --cancel",
		},
		{
			RefusedError{Name: "node-2", Reason: v1alpha1.ReasonNoOtherAgent, Message: "No other agent took over."},
			"leave of node-2 cannot proceed (NoOtherAgent): No other agent took over. The request stays pending; cancel it with: kubectl etcdmember leave node-2 --cancel",
		},
		{
			RefusedError{Name: "node-2", Reason: v1alpha1.ReasonLastVoter, Message: "Only voter.", DryRun: true},
			"node-2 is not removable now (Removable=False LastVoter): Only voter (client dry run: nothing changed)",
		},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() =\n%s\nwant\n%s", got, tc.want)
		}
	}
}

func TestTimeoutErrorMessage(t *testing.T) {
	err := &TimeoutError{What: "after 1s waiting for node-2 to leave", Last: "node-2: x"}
	if want := "timed out after 1s waiting for node-2 to leave; last state: node-2: x"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	err.APIError = errors.New("boom")
	if want := "timed out after 1s waiting for node-2 to leave; last state: node-2: x (last API error: boom)"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
}

// TestLeavePatchNamesTheMember: a request names the member the object recorded when it was read,
// so that the controller removes nothing once the node has re-joined; an object with no member ID
// yet gets spec.leave alone.
func TestLeavePatchNamesTheMember(t *testing.T) {
	for id, want := range map[string]string{
		"2c9ac577d3e7c665": `{"spec":{"leave":true,"memberID":"2c9ac577d3e7c665"}}`,
		"":                 `{"spec":{"leave":true}}`,
	} {
		data, err := leavePatch(id).Data(nil)
		if err != nil || string(data) != want {
			t.Errorf("leavePatch(%q) = %s, %v; want %s", id, data, err, want)
		}
	}
}
