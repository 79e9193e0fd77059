package members

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

func downFor(d time.Duration) metav1.Condition {
	return since(cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable), ago(d))
}

func etcdNamed(m v1alpha1.EtcdMember, name string) v1alpha1.EtcdMember {
	m.Status.Name = name
	return m
}

func peers(m v1alpha1.EtcdMember, urls ...string) v1alpha1.EtcdMember {
	m.Status.PeerURLs = urls
	return m
}

// candidateLine is one candidate on one line: NAME ID [discovered] ACTION: WHY.
func candidateLine(c Candidate) string {
	d := ""
	if c.Discovered {
		d = " discovered"
	}
	return fmt.Sprintf("%s %s%s %s: %s", c.Name, c.MemberID, d, c.ActionText(), c.Why)
}

// liveView is etcd listing members, of which those in answering answer.
func liveView(members []etcd.Member, answering ...uint64) *Live {
	l := &Live{Members: members, Status: map[uint64]etcd.EndpointStatus{}}
	for _, id := range answering {
		l.Status[id] = etcd.EndpointStatus{MemberID: id, Leader: answering[0], RaftTerm: 2}
	}
	return l
}

func TestPlan(t *testing.T) {
	node1 := started(object("node-1", "a", false, joined, healthy))
	oldNode1 := func(down time.Duration) v1alpha1.EtcdMember {
		return etcdNamed(started(object("node-1-old", "1", false, joined, downFor(down))), "node-1")
	}
	oldMember1 := member(0x1, "node-1")
	oldMember1.PeerURLs = []string{"http://10.0.0.1:2380"}
	newHost := peers(started(object("new-host", "b", false, joined, healthy)), "https://10.0.0.5:2380")
	oldHost := peers(started(object("old-host", "2", false, joined, downFor(20*time.Minute))), "http://10.0.0.5:2380")
	// Several members on one host (a test bed, a lab) are other members, not successors.
	sameHostOtherPort := peers(started(object("other-port", "6", false, joined, downFor(20*time.Minute))), "https://10.0.0.5:12380")
	twinA := etcdNamed(started(object("twin-a", "3", false, joined, downFor(time.Hour))), "twin")
	twinB := etcdNamed(started(object("twin-b", "4", false, joined, downFor(time.Hour))), "twin")
	disc := discovered(started(object("disc", "5", false, joined, downFor(20*time.Minute))))
	reg := started(object("reg", "6", false, joined, downFor(time.Hour)))
	neverStarted := learner(object("learner-x", "7", false, joined,
		since(cond(v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonNotStarted), ago(20*time.Minute))))
	discGone := discovered(object("disc-gone", "8", false, removed))
	deleting := started(object("deleting", "9", false, joined, downFor(time.Hour)))
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	unprobed := started(object("unprobed", "c", false, joined))
	// node-2 and node-3 run where Kubernetes no longer has their Nodes; node-1's Node is there.
	nodeBound := boundTo(node1, "worker-1")
	nodeGone := boundTo(started(object("node-3", "3", false, joined, downFor(20*time.Minute))), "worker-3")
	nodeGoneHealthy := boundTo(started(object("node-2", "2", false, joined, healthy)), "worker-2")
	nodes := Nodes{"worker-1": true, "worker-2": false, "worker-3": false}
	boundLive := liveView([]etcd.Member{member(0xa, "node-1"), member(0x2, "node-2"), member(0x3, "node-3")}, 0xa, 0x2)

	cases := []struct {
		name           string
		objects        []v1alpha1.EtcdMember
		live           *Live
		nodes          Nodes
		unreachableFor time.Duration
		want           []string
	}{
		{
			name:    "superseded by the same etcd name",
			objects: []v1alpha1.EtcdMember{node1, oldNode1(20 * time.Minute)},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), oldMember1}, 0xa),
			want:    []string{`node-1-old 1 leave (object stays as history): superseded by node-1 (same etcd name "node-1"); unhealthy for 20m`},
		},
		{
			name:    "superseded for exactly --unreachable-for",
			objects: []v1alpha1.EtcdMember{node1, oldNode1(10 * time.Minute)},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), oldMember1}, 0xa),
			want:    []string{`node-1-old 1 leave (object stays as history): superseded by node-1 (same etcd name "node-1"); unhealthy for 10m`},
		},
		{
			name:    "superseded for less than --unreachable-for",
			objects: []v1alpha1.EtcdMember{node1, oldNode1(5 * time.Minute)},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), oldMember1}, 0xa),
			want:    []string{`node-1-old 1 none: superseded by node-1 (same etcd name "node-1"); unhealthy for 5m, less than --unreachable-for 10m`},
		},
		{
			name:           "a longer --unreachable-for",
			objects:        []v1alpha1.EtcdMember{node1, oldNode1(20 * time.Minute)},
			live:           liveView([]etcd.Member{member(0xa, "node-1"), oldMember1}, 0xa),
			unreachableFor: time.Hour,
			want:           []string{`node-1-old 1 none: superseded by node-1 (same etcd name "node-1"); unhealthy for 20m, less than --unreachable-for 60m`},
		},
		{
			name:    "superseded by a member on the same peer host",
			objects: []v1alpha1.EtcdMember{newHost, oldHost},
			live: liveView([]etcd.Member{
				{ID: 0xb, Name: "new-host", PeerURLs: newHost.Status.PeerURLs, ClientURLs: newHost.Status.ClientURLs},
				{ID: 0x2, Name: "old-host", PeerURLs: oldHost.Status.PeerURLs, ClientURLs: oldHost.Status.ClientURLs},
			}, 0xb),
			want: []string{"old-host 2 leave (object stays as history): superseded by new-host (same peer address 10.0.0.5:2380); unhealthy for 20m"},
		},
		{
			name:    "a member on the same host but another port supersedes nothing",
			objects: []v1alpha1.EtcdMember{newHost, sameHostOtherPort},
			live: liveView([]etcd.Member{
				{ID: 0xb, Name: "new-host", PeerURLs: newHost.Status.PeerURLs, ClientURLs: newHost.Status.ClientURLs},
				{ID: 0x6, Name: "other-port", PeerURLs: sameHostOtherPort.Status.PeerURLs, ClientURLs: sameHostOtherPort.Status.ClientURLs},
			}, 0xb),
			want: []string{"other-port 6 none: registered member unhealthy for 20m: not pruned, may be under maintenance; use leave"},
		},
		{
			name:    "unhealthy members do not supersede each other",
			objects: []v1alpha1.EtcdMember{twinA, twinB, node1},
			live: liveView([]etcd.Member{
				member(0xa, "node-1"),
				{ID: 0x3, Name: "twin", PeerURLs: twinA.Status.PeerURLs},
				{ID: 0x4, Name: "twin", PeerURLs: twinB.Status.PeerURLs},
			}, 0xa),
			want: []string{
				"twin-a 3 none: registered member unhealthy for 60m: not pruned, may be under maintenance; use leave",
				"twin-b 4 none: registered member unhealthy for 60m: not pruned, may be under maintenance; use leave",
			},
		},
		{
			name:    "discovered and unhealthy",
			objects: []v1alpha1.EtcdMember{node1, disc},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0x5, "disc")}, 0xa),
			want:    []string{"disc 5 discovered leave, then delete object: discovered: no agent registered it; unhealthy for 20m"},
		},
		{
			name:    "registered and merely down",
			objects: []v1alpha1.EtcdMember{node1, reg},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0x6, "reg")}, 0xa),
			want:    []string{"reg 6 none: registered member unhealthy for 60m: not pruned, may be under maintenance; use leave"},
		},
		{
			name:    "all healthy",
			objects: []v1alpha1.EtcdMember{node1, disc, reg},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0x5, "disc"), member(0x6, "reg")}, 0xa, 0x5, 0x6),
		},
		{
			name:    "learner that never started",
			objects: []v1alpha1.EtcdMember{node1, neverStarted},
			live: liveView([]etcd.Member{
				member(0xa, "node-1"),
				{ID: 0x7, PeerURLs: neverStarted.Status.PeerURLs, IsLearner: true},
			}, 0xa),
			want: []string{"learner-x 7 leave (object stays as history): learner that never started; unhealthy for 20m"},
		},
		{
			name:    "discovered object whose member is gone",
			objects: []v1alpha1.EtcdMember{node1, discGone, discovered(object("disc-joined", "d", false, joined))},
			live:    liveView([]etcd.Member{member(0xa, "node-1")}, 0xa),
			want: []string{
				"disc-gone 8 discovered delete object: discovered object whose member is gone from etcd",
				"disc-joined d discovered delete object: discovered object whose member is gone from etcd",
			},
		},
		{
			name:    "etcd member without an object",
			objects: []v1alpha1.EtcdMember{node1},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0xe, "node-1")}, 0xa),
			want:    []string{" e none: no EtcdMember object yet; unhealthy for 0s (the leading agent creates one)"},
		},
		{
			name:    "an object being deleted does not count",
			objects: []v1alpha1.EtcdMember{node1, deleting},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0x9, "deleting")}, 0xa),
			want:    []string{" 9 none: no EtcdMember object yet; unhealthy for 0s (the leading agent creates one)"},
		},
		{
			name:    "a member etcd does not answer for while its object says healthy",
			objects: []v1alpha1.EtcdMember{node1, started(object("node-2", "b", false, joined, healthy))},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0xb, "node-2")}, 0xa),
			want:    []string{"node-2 b none: registered member unhealthy for 0s: not pruned, may be under maintenance; use leave"},
		},
		{
			name: "without etcd access, by the Healthy conditions",
			objects: []v1alpha1.EtcdMember{
				node1, oldNode1(20 * time.Minute), disc, reg, neverStarted, discGone, unprobed,
				discovered(object("disc-unknown", "f", false)),
				started(object("left", "e", false, removed, leftDone)),
			},
			want: []string{
				"disc 5 discovered leave, then delete object: discovered: no agent registered it; unhealthy for 20m",
				"disc-gone 8 discovered delete object: discovered object whose member is gone from etcd",
				"learner-x 7 leave (object stays as history): learner that never started; unhealthy for 20m",
				`node-1-old 1 leave (object stays as history): superseded by node-1 (same etcd name "node-1"); unhealthy for 20m`,
				"reg 6 none: registered member unhealthy for 60m: not pruned, may be under maintenance; use leave",
			},
		},
		{
			name:    "without etcd access, recently down",
			objects: []v1alpha1.EtcdMember{node1, oldNode1(time.Minute), disc},
			want: []string{
				"disc 5 discovered none: discovered: no agent registered it; unhealthy for 20m, less than --unreachable-for 60m",
				`node-1-old 1 none: superseded by node-1 (same etcd name "node-1"); unhealthy for 60s, less than --unreachable-for 60m`,
			},
			unreachableFor: time.Hour,
		},
		{
			name:    "bound Node gone",
			objects: []v1alpha1.EtcdMember{nodeBound, nodeGoneHealthy, nodeGone},
			live:    boundLive,
			nodes:   nodes,
			want:    []string{"node-3 3 leave (object stays as history): bound Node worker-3 does not exist; unhealthy for 20m"},
		},
		{
			name:    "bound Node gone, without etcd access",
			objects: []v1alpha1.EtcdMember{nodeBound, nodeGoneHealthy, nodeGone},
			nodes:   nodes,
			want:    []string{"node-3 3 leave (object stays as history): bound Node worker-3 does not exist; unhealthy for 20m"},
		},
		{
			name:           "bound Node gone for less than --unreachable-for",
			objects:        []v1alpha1.EtcdMember{nodeBound, nodeGoneHealthy, nodeGone},
			live:           boundLive,
			nodes:          nodes,
			unreachableFor: time.Hour,
			want:           []string{"node-3 3 none: bound Node worker-3 does not exist; unhealthy for 20m, less than --unreachable-for 60m"},
		},
		{
			name:    "the operator's spec.nodeName wins over the agent's",
			objects: []v1alpha1.EtcdMember{nodeBound, boundBy(boundTo(nodeGone, "worker-1"), "worker-3")},
			live:    boundLive,
			nodes:   nodes,
			want:    []string{"node-3 3 leave (object stays as history): bound Node worker-3 does not exist; unhealthy for 20m"},
		},
		{
			name:    "bound Node there",
			objects: []v1alpha1.EtcdMember{nodeBound, boundTo(nodeGone, "worker-1")},
			live:    boundLive,
			nodes:   nodes,
			want:    []string{"node-3 3 none: registered member unhealthy for 20m: not pruned, may be under maintenance; use leave"},
		},
		{
			name:    "Nodes not read",
			objects: []v1alpha1.EtcdMember{nodeBound, nodeGoneHealthy, nodeGone},
			live:    boundLive,
			want:    []string{"node-3 3 none: registered member unhealthy for 20m: not pruned, may be under maintenance; use leave"},
		},
		{
			name:    "bound Node not among those read",
			objects: []v1alpha1.EtcdMember{nodeBound, nodeGone},
			live:    boundLive,
			nodes:   Nodes{"worker-1": true},
			want:    []string{"node-3 3 none: registered member unhealthy for 20m: not pruned, may be under maintenance; use leave"},
		},
		{
			name:    "the only voter whose Node is gone",
			objects: []v1alpha1.EtcdMember{learner(nodeBound), nodeGone},
			live: liveView([]etcd.Member{
				{ID: 0xa, Name: "node-1", PeerURLs: []string{"http://node-1:2380"}, ClientURLs: []string{"http://node-1:2379"}, IsLearner: true},
				member(0x3, "node-3"),
			}, 0xa),
			nodes: nodes,
			want:  []string{"node-3 3 none: bound Node worker-3 does not exist; unhealthy for 20m: not pruned, the only voter"},
		},
		{
			name:    "the only voter whose Node is gone, without etcd access",
			objects: []v1alpha1.EtcdMember{learner(nodeBound), nodeGone},
			nodes:   nodes,
			want:    []string{"node-3 3 none: bound Node worker-3 does not exist; unhealthy for 20m: not pruned, the only voter"},
		},
		{
			name:    "other reasons come first",
			objects: []v1alpha1.EtcdMember{nodeBound, boundTo(disc, "worker-3")},
			live:    liveView([]etcd.Member{member(0xa, "node-1"), member(0x5, "disc")}, 0xa),
			nodes:   nodes,
			want:    []string{"disc 5 discovered leave, then delete object: discovered: no agent registered it; unhealthy for 20m"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			unreachableFor := tc.unreachableFor
			if unreachableFor == 0 {
				unreachableFor = DefaultUnreachableFor
			}
			var got []string
			for _, c := range Plan(tc.objects, tc.live, tc.nodes, now, unreachableFor) {
				got = append(got, candidateLine(c))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestPlanCandidateFields: the plan carries what Prune and the table need, not only text.
func TestPlanCandidateFields(t *testing.T) {
	disc := discovered(started(object("disc", "5", false, joined, downFor(time.Hour))))
	plan := Plan([]v1alpha1.EtcdMember{disc}, nil, nil, now, DefaultUnreachableFor)
	if len(plan) != 1 {
		t.Fatalf("plan %+v, want one candidate", plan)
	}
	c := plan[0]
	if c.Name != "disc" || c.MemberID != "5" || c.Action != ActionPrune || !c.Discovered ||
		len(c.PeerURLs) != 1 || c.PeerURLs[0] != "http://disc:2380" {
		t.Errorf("candidate %+v", c)
	}
}

func TestActionText(t *testing.T) {
	cases := []struct {
		c    Candidate
		want string
	}{
		{Candidate{Action: ActionPrune, Discovered: true}, "leave, then delete object"},
		{Candidate{Action: ActionPrune}, "leave (object stays as history)"},
		{Candidate{Action: ActionDelete, Discovered: true}, "delete object"},
		{Candidate{Action: ActionNone}, "none"},
		{Candidate{Action: ActionNone, Discovered: true}, "none"},
	}
	for _, tc := range cases {
		if got := tc.c.ActionText(); got != tc.want {
			t.Errorf("%+v: ActionText() = %q, want %q", tc.c, got, tc.want)
		}
	}
}
