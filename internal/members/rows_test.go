package members

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// now is the fixed clock of the row and plan tests.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

var (
	healthy   = since(cond(v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing), ago(time.Hour))
	unhealthy = since(cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable), ago(time.Minute))
)

// started gives an object the client URL of a member that runs.
func started(m v1alpha1.EtcdMember) v1alpha1.EtcdMember {
	m.Status.ClientURLs = []string{"http://" + m.Name + ":2379"}
	return m
}

func discovered(m v1alpha1.EtcdMember) v1alpha1.EtcdMember {
	m.Labels = map[string]string{v1alpha1.LabelDiscovered: "true"}
	return m
}

func learner(m v1alpha1.EtcdMember) v1alpha1.EtcdMember {
	m.Status.IsLearner = true
	return m
}

// boundTo binds the member to a Node as its agent does, by status.nodeName.
func boundTo(m v1alpha1.EtcdMember, node string) v1alpha1.EtcdMember {
	m.Status.NodeName = node
	return m
}

// boundBy binds the member to a Node as an operator does, by spec.nodeName.
func boundBy(m v1alpha1.EtcdMember, node string) v1alpha1.EtcdMember {
	m.Spec.NodeName = node
	return m
}

func withHealth(m v1alpha1.EtcdMember, h v1alpha1.MemberHealth) v1alpha1.EtcdMember {
	m.Status.Health = &h
	return m
}

// brief is the part of a row the tests compare, on one line.
func brief(r Row) string {
	term := "-"
	if r.RaftTerm != nil {
		term = strconv.FormatUint(*r.RaftTerm, 10)
	}
	live := "api"
	switch {
	case r.Live && r.InEtcd:
		live = "in-etcd"
	case r.Live:
		live = "not-in-etcd"
	}
	name := r.Name
	if r.Object == nil {
		name = "<orphan>"
	}
	return fmt.Sprintf("%s id=%s etcd=%s role=%s joined=%s healthy=%s leave=%s term=%s %s notes=[%s]",
		name, r.MemberID, r.EtcdName, r.Role, r.Joined, r.Healthy, r.Leave, term, live, strings.Join(r.Notes, "; "))
}

func checkRows(t *testing.T, rows []Row, want []string) {
	t.Helper()
	got := make([]string, len(rows))
	for i, r := range rows {
		got[i] = brief(r)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBuildRowsFromObjectsOnly(t *testing.T) {
	renamed := started(object("odd-name", "9", false, joined, healthy))
	renamed.Status.Name = "Odd_Name"
	objects := []v1alpha1.EtcdMember{
		withHealth(started(object("node-1", "a", false, joined, healthy)), v1alpha1.MemberHealth{Reachable: true, Leader: true, RaftTerm: 5, LastProbeTime: ago(time.Minute)}),
		learner(started(object("node-2", "b", false, joined, unhealthy))),
		started(object("node-3", "c", true, joined, healthy)),
		started(object("node-4", "d", true, joined, healthy, atRisk)),
		object("gone", "e", false, removed, leftDone),
		started(object("cancelled", "f", false, joined, healthy, atRisk)),
		discovered(started(object("disc", "10", false, joined))),
		object("fresh", "", false),
		renamed,
	}
	rows := BuildRows(objects, nil, nil, now, DefaultUnreachableFor)
	checkRows(t, rows, []string{
		"cancelled id=f etcd=cancelled role=voter joined=True healthy=True leave= term=- api notes=[]",
		"disc id=10 etcd=disc role=voter joined=True healthy= leave= term=- api notes=[discovered]",
		"fresh id= etcd= role= joined= healthy= leave= term=- api notes=[no member ID recorded]",
		"gone id=e etcd= role= joined=False healthy= leave=Removed term=- api notes=[]",
		"node-1 id=a etcd=node-1 role=leader joined=True healthy=True leave= term=5 api notes=[]",
		"node-2 id=b etcd=node-2 role=learner joined=True healthy=False leave= term=- api notes=[]",
		"node-3 id=c etcd=node-3 role=voter joined=True healthy=True leave=Requested term=- api notes=[]",
		"node-4 id=d etcd=node-4 role=voter joined=True healthy=True leave=QuorumAtRisk term=- api notes=[]",
		"odd-name id=9 etcd=Odd_Name role=voter joined=True healthy=True leave= term=- api notes=[]",
	})
	if r := rows[4]; r.LastProbe == nil || !r.LastProbe.Equal(&objects[0].Status.Health.LastProbeTime) || r.Object == nil || r.Created == nil {
		t.Errorf("node-1 row lost the object's record: %+v", r)
	}
}

func TestBuildRowsWithLiveView(t *testing.T) {
	objects := []v1alpha1.EtcdMember{
		// Recorded as leader in an earlier term; etcd now has another leader.
		withHealth(started(object("node-1", "a", false, joined, healthy)), v1alpha1.MemberHealth{Reachable: true, Leader: true, RaftTerm: 1}),
		learner(started(object("node-2", "b", false, joined, healthy))),
		started(object("node-3", "c", false, joined, healthy)),
		started(object("node-5", "5", false, joined, unhealthy)),
		object("gone", "d", false, removed, leftDone),
		started(object("old", "e", false, joined, healthy)),
		object("left", "9", false, removed),
		object("reset", "8", false, notFound),
		object("back", "6", false, notFound),
		object("fresh", "", false),
		learner(object("learner-x", "7", false, joined,
			since(cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonNotStarted), ago(time.Hour)))),
	}
	moved := member(0xb, "node-2")
	moved.PeerURLs = []string{"http://10.0.0.2:2380"}
	live := &Live{
		Members: []etcd.Member{
			member(0xa, "node-1"), moved, member(0xc, "node-3"), member(0x5, "node-5"), member(0xd, "gone"), member(0x6, "back"),
			{ID: 0x7, PeerURLs: []string{"http://learner-x:2380"}, IsLearner: true},
			member(0xf, "stray"), member(0x20, "another"),
			{ID: 0x2f, PeerURLs: []string{"http://10.0.0.47:2380"}},
			{ID: 0x1f, PeerURLs: []string{"http://10.0.0.31:2380"}, IsLearner: true},
		},
		// node-1 still names itself leader in term 2; the others answer from term 3.
		Status: map[uint64]etcd.EndpointStatus{
			0xa:  {MemberID: 0xa, Leader: 0xa, RaftTerm: 2, RaftIndex: 50, DBSize: 1024, Version: "3.6.0"},
			0xb:  {MemberID: 0xb, Leader: 0xf, RaftTerm: 3},
			0x5:  {MemberID: 0x5, Leader: 0xf, RaftTerm: 3},
			0xd:  {MemberID: 0xd, Leader: 0xf, RaftTerm: 3},
			0x6:  {MemberID: 0x6, Leader: 0xf, RaftTerm: 3},
			0xf:  {MemberID: 0xf, Leader: 0xf, RaftTerm: 3},
			0x20: {MemberID: 0x20, Leader: 0xf, RaftTerm: 3},
		},
	}
	rows := BuildRows(objects, live, nil, now, DefaultUnreachableFor)
	checkRows(t, rows, []string{
		"back id=6 etcd=back role=voter joined=False healthy=True leave= term=3 in-etcd notes=[in etcd, object says left]",
		"fresh id= etcd= role= joined= healthy= leave= term=- not-in-etcd notes=[no member ID recorded]",
		"gone id=d etcd=gone role=voter joined=False healthy=True leave=Removed term=3 in-etcd notes=[in etcd, object says left]",
		"learner-x id=7 etcd= role=learner joined=True healthy=False leave= term=- in-etcd notes=[never started; stale: learner that never started; unhealthy for 60m]",
		"left id=9 etcd= role= joined=False healthy= leave= term=- not-in-etcd notes=[]",
		"node-1 id=a etcd=node-1 role=voter joined=True healthy=True leave= term=2 in-etcd notes=[]",
		"node-2 id=b etcd=node-2 role=voter joined=True healthy=True leave= term=3 in-etcd notes=[etcd says voter, object says learner; etcd peer URLs differ from the object's http://node-2:2380]",
		"node-3 id=c etcd=node-3 role=voter joined=True healthy=False leave= term=- in-etcd notes=[object says Healthy=True]",
		"node-5 id=5 etcd=node-5 role=voter joined=True healthy=True leave= term=3 in-etcd notes=[object says Healthy=False]",
		"old id=e etcd=old role= joined=True healthy= leave= term=- not-in-etcd notes=[not in etcd]",
		"reset id=8 etcd= role= joined=False healthy= leave= term=- not-in-etcd notes=[removed from etcd, not by etcdmember]",
		"<orphan> id=1f etcd= role=learner joined= healthy=False leave= term=- in-etcd notes=[no EtcdMember object; never started]",
		"<orphan> id=2f etcd= role=voter joined= healthy=False leave= term=- in-etcd notes=[no EtcdMember object; never started]",
		"<orphan> id=20 etcd=another role=voter joined= healthy=True leave= term=3 in-etcd notes=[no EtcdMember object]",
		"<orphan> id=f etcd=stray role=leader joined= healthy=True leave= term=3 in-etcd notes=[no EtcdMember object]",
	})
	i := slices.IndexFunc(rows, func(r Row) bool { return r.Name == "node-1" })
	if r := rows[i]; r.Version != "3.6.0" || r.RaftIndex == nil || *r.RaftIndex != 50 || r.DBSize == nil || *r.DBSize != 1024 {
		t.Errorf("node-1 row lacks etcd's live figures: %+v", r)
	}
}

func TestBuildRowsLiveWithoutAnswers(t *testing.T) {
	objects := []v1alpha1.EtcdMember{
		withHealth(started(object("node-1", "a", false, joined, healthy)), v1alpha1.MemberHealth{Reachable: true, Leader: true, RaftTerm: 4}),
	}
	live := &Live{Members: []etcd.Member{member(0xa, "node-1")}}
	checkRows(t, BuildRows(objects, live, nil, now, DefaultUnreachableFor), []string{
		// No answer names a leader; the figures recorded by the last probe stay.
		"node-1 id=a etcd=node-1 role=voter joined=True healthy=False leave= term=4 in-etcd notes=[object says Healthy=True]",
	})
	checkRows(t, BuildRows(nil, &Live{}, nil, now, DefaultUnreachableFor), nil)
}

func TestLiveLeader(t *testing.T) {
	cases := []struct {
		name   string
		live   *Live
		want   uint64
		wantOK bool
	}{
		{"etcd not asked", nil, 0, false},
		{"no answers", &Live{}, 0, false},
		{"no leader known", &Live{Status: map[uint64]etcd.EndpointStatus{1: {RaftTerm: 9}}}, 0, false},
		{"highest term wins", &Live{Status: map[uint64]etcd.EndpointStatus{
			1: {Leader: 1, RaftTerm: 7}, 2: {Leader: 3, RaftTerm: 8}, 3: {Leader: 3, RaftTerm: 8}, 4: {RaftTerm: 9},
		}}, 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := tc.live.leader(); got != tc.want || ok != tc.wantOK {
				t.Errorf("leader() = %x, %t; want %x, %t", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestLeaveColumnIgnoresAnEarlierRequestsAnswer: right after a new request, a Left condition
// computed for an older generation answers the earlier request, not this one.
func TestLeaveColumnIgnoresAnEarlierRequestsAnswer(t *testing.T) {
	stale := atRisk
	stale.ObservedGeneration = 1
	m := started(object("node-4", "d", true, joined, healthy, stale))
	m.Generation = 2
	if got := ObjectRow(&m).Leave; got != LeaveRequested {
		t.Errorf("LEAVE = %q, want %q while the controller has not answered generation 2", got, LeaveRequested)
	}
	m.Status.Conditions[len(m.Status.Conditions)-1].ObservedGeneration = 2
	if got := ObjectRow(&m).Leave; got != v1alpha1.ReasonQuorumAtRisk {
		t.Errorf("LEAVE = %q, want %q once answered", got, v1alpha1.ReasonQuorumAtRisk)
	}
}

func TestBuildRowsBoundNodes(t *testing.T) {
	objects := []v1alpha1.EtcdMember{
		boundTo(started(object("node-1", "a", false, joined, healthy)), "worker-1"),
		boundTo(started(object("node-2", "b", false, joined, healthy)), "worker-2"),
		boundTo(started(object("node-3", "c", false, joined, downFor(20*time.Minute))), "worker-3"),
		boundTo(started(object("node-4", "d", false, joined, healthy)), "worker-4"),
		boundBy(boundTo(started(object("node-5", "e", false, joined, healthy)), "worker-1"), "worker-2"),
		started(object("node-6", "f", false, joined, healthy)),
		// History: the member left with its Node, which is no news.
		boundTo(object("node-7", "7", true, removed, leftDone), "worker-2"),
	}
	live := liveView([]etcd.Member{
		member(0xa, "node-1"), member(0xb, "node-2"), member(0xc, "node-3"), member(0xd, "node-4"),
		member(0xe, "node-5"), member(0xf, "node-6"), member(0x10, "stray"),
	}, 0xa, 0xb, 0xd, 0xe, 0xf, 0x10)
	// worker-4 is unknown: bound, but not among the Nodes read.
	nodes := Nodes{"worker-1": true, "worker-2": false, "worker-3": false}
	withNode := func(rows []Row) []string {
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = fmt.Sprintf("%s node=%s notes=[%s]", r.Name, r.Node, strings.Join(r.Notes, "; "))
		}
		return out
	}
	check := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: rows\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	check("Nodes read", withNode(BuildRows(objects, live, nodes, now, DefaultUnreachableFor)), []string{
		"node-1 node=worker-1 notes=[]",
		"node-2 node=worker-2 notes=[node gone]",
		"node-3 node=worker-3 notes=[node gone; stale: bound Node worker-3 does not exist; unhealthy for 20m]",
		"node-4 node=worker-4 notes=[]",
		"node-5 node=worker-2 notes=[node gone]",
		"node-6 node= notes=[]",
		"node-7 node=worker-2 notes=[]",
		" node= notes=[no EtcdMember object]",
	})
	check("Nodes not read", withNode(BuildRows(objects, live, nil, now, DefaultUnreachableFor)), []string{
		"node-1 node=worker-1 notes=[]",
		"node-2 node=worker-2 notes=[]",
		"node-3 node=worker-3 notes=[]",
		"node-4 node=worker-4 notes=[]",
		"node-5 node=worker-2 notes=[]",
		"node-6 node= notes=[]",
		"node-7 node=worker-2 notes=[]",
		" node= notes=[no EtcdMember object]",
	})
	check("without etcd access", withNode(BuildRows(objects, nil, nodes, now, DefaultUnreachableFor)), []string{
		"node-1 node=worker-1 notes=[]",
		"node-2 node=worker-2 notes=[node gone]",
		"node-3 node=worker-3 notes=[node gone; stale: bound Node worker-3 does not exist; unhealthy for 20m]",
		"node-4 node=worker-4 notes=[]",
		"node-5 node=worker-2 notes=[node gone]",
		"node-6 node= notes=[]",
		"node-7 node=worker-2 notes=[]",
	})
	if got := ObjectRow(&objects[4]).Node; got != "worker-2" {
		t.Errorf("ObjectRow of node-5: Node %q, want spec.nodeName worker-2 over status.nodeName", got)
	}
}
