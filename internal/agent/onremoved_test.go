package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

const testID = "8e9e05c52164694d"

// member returns an object recording testID with the Joined condition given, if any.
func member(joined metav1.ConditionStatus, reason string) *v1alpha1.EtcdMember {
	m := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}
	m.Status.MemberID = testID
	if joined != "" {
		status.Set(m, v1alpha1.ConditionJoined, joined, reason, "")
	}
	return m
}

func TestHookDue(t *testing.T) {
	ranBefore := member(metav1.ConditionFalse, v1alpha1.ReasonRemoved)
	ranBefore.Annotations = map[string]string{v1alpha1.AnnotationOnRemovedRan: testID}
	ranForEarlier := member(metav1.ConditionFalse, v1alpha1.ReasonRemoved)
	ranForEarlier.Annotations = map[string]string{v1alpha1.AnnotationOnRemovedRan: "1234"}
	refused := member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	status.Set(refused, v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk, "")
	cases := []struct {
		name string
		obj  *v1alpha1.EtcdMember
		id   string
		due  bool
	}{
		{"removed on request", member(metav1.ConditionFalse, v1alpha1.ReasonRemoved), testID, true},
		{"ran for an earlier member of the same name", ranForEarlier, testID, true},
		{"already ran", ranBefore, testID, false},
		{"removed by someone else", member(metav1.ConditionFalse, v1alpha1.ReasonNotFound), testID, false},
		{"joined", member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList), testID, false},
		{"refused leave", refused, testID, false},
		{"no condition yet", member("", ""), testID, false},
		{"another member", member(metav1.ConditionFalse, v1alpha1.ReasonRemoved), "1234", false},
	}
	for _, tc := range cases {
		if got := hookDue(tc.obj, tc.id); got != tc.due {
			t.Errorf("%s: hookDue = %v, want %v", tc.name, got, tc.due)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	_, _ = b.Write([]byte("abc"))
	_, _ = b.Write([]byte("def"))
	if got := b.String(); got != "abcdef" {
		t.Errorf("short output: %q", got)
	}
	_, _ = b.Write([]byte("ghij"))
	if got := b.String(); got != "[...]cdefghij" {
		t.Errorf("after overflow: %q", got)
	}
	n, _ := b.Write([]byte("0123456789xyz"))
	if got := b.String(); n != 13 || got != "[...]56789xyz" {
		t.Errorf("a write longer than the buffer: n=%d %q", n, got)
	}
	b = &tailBuffer{max: 4}
	_, _ = b.Write([]byte("aé€")) // the cut falls inside "é"
	if got := b.String(); got != "[...]€" {
		t.Errorf("split character not dropped: %q", got)
	}
}

func TestHookRun(t *testing.T) {
	ctx := context.Background()
	h := OnRemovedHook{Command: `echo "name=$ETCDMEMBER_NAME id=$ETCDMEMBER_MEMBER_ID"; echo oops >&2`, Timeout: 10 * time.Second}
	res := h.run(ctx, "ETCDMEMBER_NAME=node-2", "ETCDMEMBER_MEMBER_ID="+testID)
	if res.err != nil || res.output != "name=node-2 id="+testID+"\noops\n" {
		t.Errorf("success: err %v, output %q", res.err, res.output)
	}
	if note := res.note(testID); !strings.Contains(note, "exited with code 0") || !strings.Contains(note, "name=node-2") {
		t.Errorf("success note: %q", note)
	}

	res = OnRemovedHook{Command: "echo failing; exit 3", Timeout: 10 * time.Second}.run(ctx)
	if res.exitCode() != 3 || !strings.Contains(res.note(testID), "exit status 3 (exit code 3)") ||
		!strings.Contains(res.note(testID), "failing") {
		t.Errorf("failure: code %d, note %q", res.exitCode(), res.note(testID))
	}

	// A child in the background holding the output must not outlast the timeout either: the whole
	// process group goes.
	start := time.Now()
	res = OnRemovedHook{Command: "sleep 30 & echo started; wait", Timeout: 300 * time.Millisecond}.run(ctx)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("the timeout did not bound the command: %s", elapsed)
	}
	if res.err == nil || !strings.Contains(res.err.Error(), "timed out after 300ms") || res.output != "started\n" {
		t.Errorf("timeout: err %v, output %q", res.err, res.output)
	}

	long := OnRemovedHook{Command: "head -c 5000 /dev/zero | tr '\\0' x; echo END", Timeout: 10 * time.Second}.run(ctx)
	if note := long.note(testID); len(note) > 1024 || !strings.HasSuffix(note, "xEND\n") {
		t.Errorf("long output: note of %d bytes ending %q", len(note), note[max(0, len(note)-20):])
	}
}

// hookEnv is a registrar whose on-removed command appends a line to a file, against a fake API.
type hookEnv struct {
	r      *Registrar
	client client.Client
	runs   string
}

func newHookEnv(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *hookEnv {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
	runs := filepath.Join(t.TempDir(), "runs")
	r := &Registrar{
		Reader: c, Client: c, Events: &events.Recorder{Client: c, Namespace: "kube-system"},
		OnRemoved: OnRemovedHook{Command: "echo run >> '" + runs + "'; echo hello", Timeout: 10 * time.Second},
		last:      testRegistration,
		ask:       answers(map[uint64]answer{1: {list: []etcd.Member{{ID: 1}}, header: etcd.Header{ClusterID: testCluster, MemberID: 1}}}),
	}
	return &hookEnv{r: r, client: c, runs: runs}
}

const testCluster = 0xc1

// testRegistration is the last sync of node-2's agent: member testID in a cluster with member 1.
var testRegistration = registration{object: "node-2", id: 0x8e9e05c52164694d, clusterID: testCluster,
	others: []etcd.Member{{ID: 1, ClientURLs: []string{"http://10.0.0.1:2379"}}}}

// answer is what one member says when asked for the member list.
type answer struct {
	list   []etcd.Member
	header etcd.Header
	err    error
}

// answers returns a memberAsker that answers for each member ID as given, and fails for others.
func answers(by map[uint64]answer) memberAsker {
	return func(_ context.Context, m etcd.Member) ([]etcd.Member, etcd.Header, error) {
		a, ok := by[m.ID]
		if !ok {
			return nil, etcd.Header{}, errors.New("connection refused")
		}
		return a.list, a.header, a.err
	}
}

func (e *hookEnv) runCount(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(e.runs)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "run\n")
}

func (e *hookEnv) eventReasons(t *testing.T) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := e.client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Reason+": "+ev.Note)
	}
	return out
}

var errEtcdDown = errors.New("etcd status: connection refused")

func TestAfterRemovalRunsOnce(t *testing.T) {
	e := newHookEnv(t, interceptor.Funcs{}, member(metav1.ConditionFalse, v1alpha1.ReasonRemoved))
	ctx := context.Background()
	for range 3 {
		if err := e.r.afterRemoval(ctx, errEtcdDown); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.runCount(t); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
	obj := &v1alpha1.EtcdMember{}
	if err := e.client.Get(ctx, types.NamespacedName{Name: "node-2"}, obj); err != nil {
		t.Fatal(err)
	}
	if got := obj.Annotations[v1alpha1.AnnotationOnRemovedRan]; got != testID {
		t.Errorf("annotation %q, want %q", got, testID)
	}
	evs := e.eventReasons(t)
	if len(evs) != 1 || !strings.HasPrefix(evs[0], v1alpha1.ReasonOnRemovedExecSucceeded+": ") || !strings.Contains(evs[0], "hello") {
		t.Errorf("events %q, want one %s with the output", evs, v1alpha1.ReasonOnRemovedExecSucceeded)
	}

	// A restarted agent knows the member again (its etcd still answered) but the annotation stops it.
	restarted := newHookEnv(t, interceptor.Funcs{}, obj)
	restarted.runs = e.runs
	restarted.r.OnRemoved = e.r.OnRemoved
	if err := restarted.r.afterRemoval(ctx, notMemberError{id: 0x8e9e05c52164694d}); err != nil {
		t.Fatal(err)
	}
	if n := e.runCount(t); n != 1 {
		t.Fatalf("ran %d times after a restart, want once", n)
	}
}

func TestAfterRemovalDoesNotRun(t *testing.T) {
	deleting := member(metav1.ConditionFalse, v1alpha1.ReasonRemoved)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"example.com/hold"}
	cases := []struct {
		name    string
		objs    []client.Object
		etcdErr error
	}{
		{"object gone", nil, errEtcdDown},
		{"object being deleted", []client.Object{deleting}, errEtcdDown},
		{"removed by someone else", []client.Object{member(metav1.ConditionFalse, v1alpha1.ReasonNotFound)}, errEtcdDown},
		{"still joined", []client.Object{member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)}, errEtcdDown},
		{"local etcd is another member now", []client.Object{member(metav1.ConditionFalse, v1alpha1.ReasonRemoved)}, notMemberError{id: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newHookEnv(t, interceptor.Funcs{}, tc.objs...)
			if err := e.r.afterRemoval(context.Background(), tc.etcdErr); err != nil {
				t.Fatal(err)
			}
			if n := e.runCount(t); n != 0 {
				t.Errorf("ran %d times, want never", n)
			}
		})
	}
	t.Run("never registered", func(t *testing.T) {
		e := newHookEnv(t, interceptor.Funcs{}, member(metav1.ConditionFalse, v1alpha1.ReasonRemoved))
		e.r.last = registration{}
		if err := e.r.afterRemoval(context.Background(), errEtcdDown); err != nil || e.runCount(t) != 0 {
			t.Errorf("err %v, runs %d; want neither", err, e.runCount(t))
		}
	})
}

// TestAfterRemovalConflict: a change to the object between the read and the annotation's write
// makes the write fail; nothing runs until the next attempt, which runs once.
func TestAfterRemovalConflict(t *testing.T) {
	raced := false
	funcs := interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if !raced {
			raced = true
			other := &v1alpha1.EtcdMember{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Labels = map[string]string{"touched": "yes"}
			if err := c.Update(ctx, other); err != nil {
				return err
			}
		}
		return c.Update(ctx, obj, opts...)
	}}
	e := newHookEnv(t, funcs, member(metav1.ConditionFalse, v1alpha1.ReasonRemoved))
	if err := e.r.afterRemoval(context.Background(), errEtcdDown); err == nil || e.runCount(t) != 0 {
		t.Fatalf("err %v, runs %d; want a conflict and no run", err, e.runCount(t))
	}
	if err := e.r.afterRemoval(context.Background(), errEtcdDown); err != nil || e.runCount(t) != 1 {
		t.Fatalf("err %v, runs %d; want one run on the retry", err, e.runCount(t))
	}
}

// TestAfterRemovalNeedsEtcdEvidence: an object that says Removed is not enough; another member
// must answer a member list without the local member.
func TestAfterRemovalNeedsEtcdEvidence(t *testing.T) {
	const local = 0x8e9e05c52164694d
	stillListed := []etcd.Member{{ID: 1}, {ID: local}}
	cases := []struct {
		name string
		ask  map[uint64]answer
	}{
		{"the other member still lists it", map[uint64]answer{1: {list: stillListed, header: etcd.Header{ClusterID: testCluster, MemberID: 1}}}},
		{"no other member answers", map[uint64]answer{}},
		{"the answer comes from the local member itself", map[uint64]answer{1: {list: []etcd.Member{{ID: 1}}, header: etcd.Header{ClusterID: testCluster, MemberID: local}}}},
		{"the answer comes from another cluster", map[uint64]answer{1: {list: []etcd.Member{{ID: 1}}, header: etcd.Header{ClusterID: 0xc2, MemberID: 1}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newHookEnv(t, interceptor.Funcs{}, member(metav1.ConditionFalse, v1alpha1.ReasonRemoved))
			e.r.ask = answers(tc.ask)
			if err := e.r.afterRemoval(context.Background(), errEtcdDown); err != nil {
				t.Fatal(err)
			}
			if n := e.runCount(t); n != 0 {
				t.Errorf("ran %d times without evidence from etcd, want never", n)
			}
			obj := &v1alpha1.EtcdMember{}
			if err := e.client.Get(context.Background(), types.NamespacedName{Name: "node-2"}, obj); err != nil {
				t.Fatal(err)
			}
			if _, marked := obj.Annotations[v1alpha1.AnnotationOnRemovedRan]; marked {
				t.Errorf("annotation written without evidence")
			}
		})
	}
}

// TestConfirmRemovedAsksTheNextMember: a member that does not answer is skipped; the first
// answer that counts decides.
func TestConfirmRemovedAsksTheNextMember(t *testing.T) {
	last := testRegistration
	last.others = []etcd.Member{{ID: 1}, {ID: 3}, {ID: 4}}
	gone := []etcd.Member{{ID: 3}, {ID: 4}}
	listed := append([]etcd.Member{{ID: last.id}}, gone...)
	ask := answers(map[uint64]answer{
		3: {list: gone, header: etcd.Header{ClusterID: testCluster, MemberID: 3}},
		4: {list: listed, header: etcd.Header{ClusterID: testCluster, MemberID: 4}},
	})
	if err := confirmRemoved(context.Background(), last, ask); err != nil {
		t.Errorf("member 3 confirmed the removal, got %v", err)
	}
	last.others = []etcd.Member{{ID: 1}, {ID: 4}, {ID: 3}}
	if err := confirmRemoved(context.Background(), last, ask); err == nil || !strings.Contains(err.Error(), "still lists") {
		t.Errorf("member 4 answered first that the member is still listed, got %v", err)
	}
	last.others = nil
	if err := confirmRemoved(context.Background(), last, ask); err == nil {
		t.Error("no member to ask, yet confirmed")
	}
}
