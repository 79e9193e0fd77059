package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/etcd"
)

func object(name, id string, leave bool, conds ...metav1.Condition) v1alpha1.EtcdMember {
	return v1alpha1.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.EtcdMemberSpec{Leave: leave},
		Status: v1alpha1.EtcdMemberStatus{
			MemberID:   id,
			PeerURLs:   []string{"http://" + name + ":2380"},
			Conditions: conds,
		},
	}
}

func cond(condType string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: s, Reason: reason}
}

var (
	joined    = cond(v1alpha1.ConditionJoined, metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	removed   = cond(v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved)
	leftDone  = cond(v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved)
	atRisk    = cond(v1alpha1.ConditionLeft, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	threeObjs = []v1alpha1.EtcdMember{
		object("node-3", "c", true, joined, atRisk),
		object("node-1", "a", false, joined),
		object("node-2", "b", false, joined),
	}
)

func member(id uint64, name string) etcd.Member {
	return etcd.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, ClientURLs: []string{"http://" + name + ":2379"}}
}

func TestWriteTable(t *testing.T) {
	cases := []struct {
		name    string
		objects []v1alpha1.EtcdMember
		view    *EtcdView
		want    string
	}{
		{
			name:    "etcd not asked",
			objects: threeObjs,
			want: `
NAME     MEMBER ID   PEER URLS            LEARNER   LEADER   HEALTHY   RAFT INDEX   DB SIZE   JOINED   LEAVE
node-1   a           http://node-1:2380   no        ?        ?         ?            ?         True     -
node-2   b           http://node-2:2380   no        ?        ?         ?            ?         True     -
node-3   c           http://node-3:2380   no        ?        ?         ?            ?         True     QuorumAtRisk
`,
		},
		{
			name:    "all healthy, one leader",
			objects: threeObjs,
			view: &EtcdView{
				Members: []etcd.Member{member(0xa, "node-1"), member(0xb, "node-2"), member(0xc, "node-3")},
				Status: map[uint64]MemberStatus{
					0xa: {Leader: 0xb, RaftTerm: 2, RaftIndex: 42, DBSize: 20480},
					0xb: {Leader: 0xb, RaftTerm: 2, RaftIndex: 42, DBSize: 20480},
					0xc: {Leader: 0xb, RaftTerm: 2, RaftIndex: 41, DBSize: 3 << 20},
				},
			},
			want: `
NAME     MEMBER ID   PEER URLS            LEARNER   LEADER   HEALTHY   RAFT INDEX   DB SIZE   JOINED   LEAVE
node-1   a           http://node-1:2380   no        no       yes       42           20.0KiB   True     -
node-2   b           http://node-2:2380   no        yes      yes       42           20.0KiB   True     -
node-3   c           http://node-3:2380   no        no       yes       41           3.0MiB    True     QuorumAtRisk
`,
		},
		{
			name: "one-sided rows and a member that does not answer",
			objects: []v1alpha1.EtcdMember{
				object("node-1", "a", false, joined),
				object("gone", "d", true, removed, leftDone),
				object("fresh", "", false),
				object("asked", "b", true, joined),
			},
			view: &EtcdView{
				Members: []etcd.Member{
					member(0xa, "node-1"), member(0xb, "node-2"),
					{ID: 0xe, PeerURLs: []string{"http://10.0.0.9:2380"}, IsLearner: true},
					member(0xf, "stray"),
				},
				// A stale answer from a member still naming the old leader loses to the newer term.
				Status: map[uint64]MemberStatus{
					0xa: {Leader: 0xf, RaftTerm: 3, RaftIndex: 7, DBSize: 512},
					0xf: {Leader: 0xa, RaftTerm: 2, RaftIndex: 6, DBSize: 512},
				},
			},
			want: `
NAME     MEMBER ID   PEER URLS              LEARNER   LEADER   HEALTHY   RAFT INDEX   DB SIZE   JOINED   LEAVE       NOTE
asked    b           http://node-2:2380     no        no       no        ?            ?         True     Requested
fresh    -           http://fresh:2380      no        -        -         -            -         -        -           no member ID recorded
gone     d           http://gone:2380       no        -        -         -            -         False    Removed     not in etcd
node-1   a           http://node-1:2380     no        no       yes       7            512B      True     -
<none>   e           http://10.0.0.9:2380   yes       no       no        ?            ?         -        -           no EtcdMember object; never started
<none>   f           http://stray:2380      no        yes      yes       6            512B      -        -           no EtcdMember object; etcd name "stray"
`,
		},
		{
			name: "nothing at all",
			view: &EtcdView{},
			want: `
NAME   MEMBER ID   PEER URLS   LEARNER   LEADER   HEALTHY   RAFT INDEX   DB SIZE   JOINED   LEAVE
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteRows(&buf, BuildRows(tc.objects, tc.view), OutputTable); err != nil {
				t.Fatal(err)
			}
			if got, want := buf.String(), strings.TrimPrefix(tc.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestJSONFieldsAreStable: scripts rely on every field being present, null when unknown.
func TestJSONFieldsAreStable(t *testing.T) {
	rows := BuildRows([]v1alpha1.EtcdMember{object("node-1", "", false)}, nil)
	var buf bytes.Buffer
	if err := WriteRows(&buf, rows, OutputJSON); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, buf.String())
	}
	want := []string{"name", "etcdName", "memberID", "peerURLs", "learner", "inEtcd", "leader", "healthy", "raftIndex", "dbSize", "joined", "leave", "note"}
	if len(got) != 1 || len(got[0]) != len(want) {
		t.Fatalf("want one row with %d fields, got %s", len(want), buf.String())
	}
	for _, f := range want {
		if _, ok := got[0][f]; !ok {
			t.Errorf("field %q missing in %s", f, buf.String())
		}
	}
	if got[0]["healthy"] != nil || got[0]["inEtcd"] != nil {
		t.Errorf("unknown live fields should be null: %s", buf.String())
	}
}

func TestYAMLMatchesJSON(t *testing.T) {
	rows := BuildRows(threeObjs, &EtcdView{
		Members: []etcd.Member{member(0xa, "node-1")},
		Status:  map[uint64]MemberStatus{0xa: {Leader: 0xa, RaftTerm: 1, RaftIndex: 3, DBSize: 4096}},
	})
	var buf bytes.Buffer
	if err := WriteRows(&buf, rows, OutputYAML); err != nil {
		t.Fatal(err)
	}
	var back []Row
	if err := yaml.UnmarshalStrict(buf.Bytes(), &back); err != nil {
		t.Fatalf("%v in %s", err, buf.String())
	}
	if len(back) != 3 || back[0].Name != "node-1" || back[0].DBSize == nil || *back[0].DBSize != 4096 || back[1].Note != noteNotInEtcd {
		t.Errorf("round trip lost data: %s", buf.String())
	}
}

func TestOutputFlag(t *testing.T) {
	var o Output
	if err := o.Set("yaml"); err != nil || o != OutputYAML {
		t.Errorf("Set(yaml) = %v, %q", err, o)
	}
	if err := o.Set("wide"); err == nil || !strings.Contains(err.Error(), "use table, json or yaml") {
		t.Errorf("Set(wide) = %v", err)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 25 << 20: "25.0MiB", 3 << 30: "3.0GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
