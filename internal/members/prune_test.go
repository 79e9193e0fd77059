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
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// controller stands in for the membership reconciler: a watch of an object whose leave is requested
// delivers the controller's answer. Members in refuse are refused for quorum; the others are
// removed, and the stored object records the removal. takeOver names objects a re-joined node
// takes over (a new member ID) right after their removal.
type controller struct {
	refuse   map[string]bool
	takeOver map[string]string
}

func (s *controller) watch(ctx context.Context, c client.WithWatch, _ client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	name, ok := lo.FieldSelector.RequiresExactMatch("metadata.name")
	if !ok {
		return nil, errors.New("the wait must watch one object by name")
	}
	m, err := Get(ctx, c, name)
	if err != nil {
		return nil, err
	}
	w := watch.NewFakeWithChanSize(1, false)
	if !m.Spec.Leave {
		return w, nil
	}
	if s.refuse[m.Status.MemberID] {
		status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "Removing "+name+" would cost quorum.")
		w.Modify(m)
		return w, nil
	}
	status.Set(m, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, "Removed on request.")
	status.Set(m, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, "Member "+m.Status.MemberID+" was removed.")
	stored := m.DeepCopy()
	if id, ok := s.takeOver[name]; ok {
		stored.Status.MemberID = id
	}
	if err := c.Update(ctx, stored); err != nil {
		return nil, err
	}
	w.Modify(m)
	return w, nil
}

type pruneEnv struct {
	c       client.WithWatch
	patches *patchLog
	deletes *[]string
}

func newPruneEnv(t *testing.T, ctrl *controller, objs ...v1alpha1.EtcdMember) pruneEnv {
	t.Helper()
	env := pruneEnv{patches: &patchLog{}, deletes: &[]string{}}
	cobjs := make([]client.Object, len(objs))
	for i := range objs {
		cobjs[i] = &objs[i]
	}
	env.c = newClient(t, interceptor.Funcs{
		Watch: ctrl.watch,
		Patch: env.patches.patch,
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			*env.deletes = append(*env.deletes, obj.GetName())
			return c.Delete(ctx, obj, opts...)
		},
	}, cobjs...)
	return env
}

func (e pruneEnv) exists(t *testing.T, name string) bool {
	t.Helper()
	_, err := Get(context.Background(), e.c, name)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func prune(t *testing.T, c client.WithWatch, plan []Candidate) ([]string, string, error) {
	t.Helper()
	var progress bytes.Buffer
	done, err := Prune(context.Background(), c, &progress, plan, 5*time.Second)
	return done, progress.String(), err
}

func TestPruneCarriesOutThePlanInOrder(t *testing.T) {
	env := newPruneEnv(t, &controller{},
		object("a-down", "a", false, joined, unhealthy),
		object("b-reg", "b", false, joined),
		discovered(object("c-gone", "c", false, removed)),
		discovered(object("d-disc", "d", false, joined)),
		object("e-untouched", "e", false, joined),
	)
	plan := []Candidate{
		{Name: "d-disc", MemberID: "d", Action: ActionPrune, Discovered: true},
		{Name: "a-down", MemberID: "a", Action: ActionNone},
		{Name: "b-reg", MemberID: "b", Action: ActionPrune},
		{MemberID: "f", Action: ActionNone},
		{Name: "c-gone", MemberID: "c", Action: ActionDelete, Discovered: true},
	}
	done, progress, err := prune(t, env.c, plan)
	if err != nil {
		t.Fatalf("prune: %v\n%s", err, progress)
	}
	want := []string{
		"d-disc: member d left etcd",
		"d-disc: discovered object deleted",
		"b-reg: member b left etcd",
		"c-gone: discovered object deleted",
	}
	if !slices.Equal(done, want) {
		t.Errorf("done\n%s\nwant\n%s", strings.Join(done, "\n"), strings.Join(want, "\n"))
	}
	if got := env.patches.calls(); !slices.Equal(got, []string{"d-disc", "b-reg"}) {
		t.Errorf("patched %q, want d-disc then b-reg", got)
	}
	if got := *env.deletes; !slices.Equal(got, []string{"d-disc", "c-gone"}) {
		t.Errorf("deleted %q, want d-disc then c-gone", got)
	}
	for _, line := range []string{"d-disc: Left=True Removed: Member d was removed.\n", "b-reg: Left=True Removed: Member b was removed.\n"} {
		if !strings.Contains(progress, line) {
			t.Errorf("progress lacks %q:\n%s", line, progress)
		}
	}
	// A registered member's object stays as history; the untouched ones stay as they were.
	for name, exists := range map[string]bool{"a-down": true, "b-reg": true, "c-gone": false, "d-disc": false, "e-untouched": true} {
		if got := env.exists(t, name); got != exists {
			t.Errorf("%s exists: %t, want %t", name, got, exists)
		}
	}
	if m := read(t, env.c, "b-reg"); !m.Spec.Leave || !status.IsTrue(m, v1alpha1.ConditionLeft) {
		t.Errorf("b-reg: spec.leave %t, conditions %v", m.Spec.Leave, m.Status.Conditions)
	}
	if read(t, env.c, "a-down").Spec.Leave {
		t.Error("a-down was asked to leave")
	}
}

func TestPruneKeepsAnObjectTakenOver(t *testing.T) {
	cases := []struct {
		name        string
		ctrl        controller
		obj         v1alpha1.EtcdMember
		plan        Candidate
		wantDone    []string
		wantErr     string
		wantPatched bool
	}{
		{
			name:    "object to delete records another member",
			obj:     discovered(object("disc", "e", false, joined)),
			plan:    Candidate{Name: "disc", MemberID: "c", Action: ActionDelete, Discovered: true},
			wantErr: `disc now records member "e", not c; not deleted`,
		},
		{
			name:    "member to prune is not the one recorded any more",
			obj:     discovered(object("disc", "e", false, joined)),
			plan:    Candidate{Name: "disc", MemberID: "c", Action: ActionPrune, Discovered: true},
			wantErr: `disc now records member "e", not c (its node re-joined); nothing asked`,
		},
		{
			name:        "taken over right after the leave",
			ctrl:        controller{takeOver: map[string]string{"disc": "e"}},
			obj:         discovered(object("disc", "c", false, joined)),
			plan:        Candidate{Name: "disc", MemberID: "c", Action: ActionPrune, Discovered: true},
			wantDone:    []string{"disc: member c left etcd"},
			wantErr:     `disc now records member "e", not c; not deleted`,
			wantPatched: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newPruneEnv(t, &tc.ctrl, tc.obj)
			done, _, err := prune(t, env.c, []Candidate{tc.plan})
			if errString(err) != tc.wantErr || !slices.Equal(done, tc.wantDone) {
				t.Errorf("Prune = %q, %v; want %q, %q", done, err, tc.wantDone, tc.wantErr)
			}
			if patched := len(env.patches.calls()) > 0; patched != tc.wantPatched {
				t.Errorf("patched: %t, want %t", patched, tc.wantPatched)
			}
			if len(*env.deletes) > 0 || !env.exists(t, "disc") {
				t.Errorf("the object was deleted")
			}
		})
	}
}

func TestPruneStopsAtFirstRefusal(t *testing.T) {
	env := newPruneEnv(t, &controller{refuse: map[string]bool{"b": true}},
		discovered(object("node-a", "a", false, joined)),
		discovered(object("node-b", "b", false, joined)),
		discovered(object("node-c", "c", false, joined)),
		discovered(object("node-d", "d", false, removed)),
	)
	plan := []Candidate{
		{Name: "node-a", MemberID: "a", Action: ActionPrune, Discovered: true},
		{Name: "node-b", MemberID: "b", Action: ActionPrune, Discovered: true},
		{Name: "node-c", MemberID: "c", Action: ActionPrune, Discovered: true},
		{Name: "node-d", MemberID: "d", Action: ActionDelete, Discovered: true},
	}
	done, progress, err := prune(t, env.c, plan)
	var refusal *RefusedError
	if !errors.As(err, &refusal) || refusal.Name != "node-b" || !refusal.QuorumGuard() {
		t.Fatalf("want node-b's refusal, got %v\n%s", err, progress)
	}
	if want := []string{"node-a: member a left etcd", "node-a: discovered object deleted"}; !slices.Equal(done, want) {
		t.Errorf("done %q, want %q", done, want)
	}
	if got := env.patches.calls(); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("patched %q, want node-a then node-b", got)
	}
	for name, exists := range map[string]bool{"node-a": false, "node-b": true, "node-c": true, "node-d": true} {
		if got := env.exists(t, name); got != exists {
			t.Errorf("%s exists: %t, want %t", name, got, exists)
		}
	}
	if read(t, env.c, "node-c").Spec.Leave {
		t.Error("node-c was asked to leave after the refusal")
	}
}

func TestPruneEmptyPlan(t *testing.T) {
	env := newPruneEnv(t, &controller{}, object("node-1", "a", false, joined))
	done, progress, err := prune(t, env.c, []Candidate{{Name: "node-1", MemberID: "a", Action: ActionNone}})
	if err != nil || len(done) != 0 || progress != "" || len(env.patches.calls()) != 0 {
		t.Errorf("Prune = %q, %v; progress %q", done, err, progress)
	}
}
