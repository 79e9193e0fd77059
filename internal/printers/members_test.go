package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/internal/members"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *metav1.Time {
	t := metav1.NewTime(now.Add(-d))
	return &t
}

func ptr[T any](v T) *T { return &v }

// healthyRows have no notes, so their table has no NOTE column.
var healthyRows = []members.Row{
	{
		Name: "node-1", MemberID: "8e9e05c52164694d", EtcdName: "node-1",
		PeerURLs: []string{"https://10.0.0.1:2380"}, ClientURLs: []string{"https://10.0.0.1:2379"},
		Role: members.RoleLeader, Joined: "True", Healthy: "True",
		RaftTerm: ptr[uint64](3), RaftIndex: ptr[uint64](1234567), DBSize: ptr[int64](25 << 20), Version: "3.6.0",
		LastProbe: ago(12 * time.Second), Created: ago(49 * time.Hour), Node: "worker-1", Live: true, InEtcd: true,
	},
	{
		Name: "node-2", MemberID: "91bc3c398fb3c146", EtcdName: "node-2",
		PeerURLs:   []string{"https://10.0.0.2:2380", "https://[fd00::2]:2380"},
		ClientURLs: []string{"https://10.0.0.2:2379"},
		Role:       members.RoleLearner, Joined: "True", Healthy: "False", Leave: "QuorumAtRisk",
		RaftTerm: ptr[uint64](3), RaftIndex: ptr[uint64](1200000), DBSize: ptr[int64](512),
		Created: ago(90 * time.Minute), Live: true, InEtcd: true,
	},
}

// noteRows add rows with notes, one of them with no object and nothing known but its ID.
var noteRows = append(append([]members.Row{}, healthyRows...),
	members.Row{
		Name: "node-3", MemberID: "fd422379fda50e48", PeerURLs: []string{"https://10.0.0.3:2380"},
		Role: members.RoleVoter, Joined: "True", Healthy: "False", Leave: members.LeaveRequested,
		Created: ago(20 * 24 * time.Hour), LastProbe: ago(11 * time.Minute),
		Notes: []string{`stale: superseded by node-1 (same etcd name "node-1"); unhealthy for 20m`},
	},
	members.Row{
		Name: "node-4", MemberID: "4b", PeerURLs: []string{"https://10.0.0.4:2380"}, Role: members.RoleVoter,
		Joined: "True", Healthy: "False", Created: ago(3 * time.Hour), LastProbe: ago(15 * time.Minute), Node: "worker-4",
		Notes: []string{members.NoteNodeGone, "stale: bound Node worker-4 does not exist; unhealthy for 15m"},
	},
	members.Row{
		MemberID: "1f", PeerURLs: []string{"http://10.0.0.9:2380"}, Role: members.RoleLearner, Healthy: "False",
		Live: true, InEtcd: true, Notes: []string{members.NoteNoObject, members.NoteNeverStarted},
	},
)

func writeTable(t *testing.T, tbl Table, noHeaders bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tbl.Write(&buf, noHeaders); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMemberTable(t *testing.T) {
	cases := []struct {
		name      string
		rows      []members.Row
		wide      bool
		noHeaders bool
	}{
		{"members-plain", healthyRows, false, false},
		{"members-wide", healthyRows, true, false},
		{"members-notes", noteRows, false, false},
		{"members-notes-wide", noteRows, true, false},
		{"members-no-headers", noteRows, false, true},
		{"members-empty", nil, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := writeTable(t, MemberTable(tc.rows, tc.wide, now), tc.noHeaders)
			golden(t, tc.name, out)
			checkLayout(t, out)
		})
	}
}

func TestMemberTableColumns(t *testing.T) {
	cases := []struct {
		name string
		rows []members.Row
		wide bool
		want []string
	}{
		{"plain", healthyRows, false, []string{"NAME", "MEMBER ID", "PEER URLS", "ROLE", "JOINED", "HEALTHY", "LEAVE", "AGE"}},
		{"notes", noteRows, false, []string{"NAME", "MEMBER ID", "PEER URLS", "ROLE", "JOINED", "HEALTHY", "LEAVE", "AGE", "NOTE"}},
		{"wide", noteRows, true, []string{
			"NAME", "MEMBER ID", "PEER URLS", "ROLE", "JOINED", "HEALTHY", "LEAVE", "AGE",
			"CLIENT URLS", "RAFT TERM", "RAFT INDEX", "DB SIZE", "VERSION", "LAST PROBE", "NODE", "NOTE",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tbl := MemberTable(tc.rows, tc.wide, now)
			if strings.Join(tbl.Header, "|") != strings.Join(tc.want, "|") {
				t.Errorf("header %q, want %q", tbl.Header, tc.want)
			}
			for i, r := range tbl.Rows {
				if len(r) != len(tbl.Header) {
					t.Errorf("row %d has %d cells for %d columns: %q", i, len(r), len(tbl.Header), r)
				}
				for j, cell := range r {
					// Only NOTE may be empty: it is the last column, and rows without a note leave it blank.
					if cell == "" && tbl.Header[j] != "NOTE" {
						t.Errorf("row %d column %s is empty", i, tbl.Header[j])
					}
				}
			}
		})
	}
	// A wide table must not grow the header plain tables share.
	_ = MemberTable(healthyRows, true, now)
	if got := MemberTable(healthyRows, false, now).Header; len(got) != 8 {
		t.Errorf("a wide table changed the plain header: %q", got)
	}
}

func TestPlanTable(t *testing.T) {
	plan := []members.Candidate{
		{
			MemberID: "2f", PeerURLs: []string{"http://10.0.0.47:2380"}, Action: members.ActionNone,
			Why: "no EtcdMember object yet; unhealthy for 0s (the leading agent creates one)",
		},
		{
			Name: "node-3", MemberID: "3a019a45f6d9e447", PeerURLs: []string{"http://127.243.243.243:2380"},
			Why: `superseded by node-3-f2ad25c43ecd2ca7 (same etcd name "node-3"); unhealthy for 17s`, Action: members.ActionPrune, Discovered: true,
		},
		{
			Name: "node-4", MemberID: "4b", PeerURLs: []string{"http://10.0.0.4:2380", "http://10.0.1.4:2380"},
			Why: "registered member unhealthy for 60m: not pruned, may be under maintenance; use leave", Action: members.ActionNone,
		},
		{
			Name: "node-5", MemberID: "5c", Why: "learner that never started; unhealthy for 20m", Action: members.ActionPrune,
		},
		{
			Name: "node-6", MemberID: "6d", PeerURLs: []string{"http://10.0.0.6:2380"}, Discovered: true,
			Why: "discovered object whose member is gone from etcd", Action: members.ActionDelete,
		},
	}
	out := writeTable(t, PlanTable(plan), false)
	golden(t, "plan", out)
	checkLayout(t, out)
}

func TestHumanBytes(t *testing.T) {
	cases := []struct {
		n    int64
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1023, "1023B"},
		{1024, "1.0KiB"},
		{1536, "1.5KiB"},
		{20480, "20.0KiB"},
		{25 << 20, "25.0MiB"},
		{3 << 30, "3.0GiB"},
		{5 << 40, "5.0TiB"},
		{2048 << 40, "2048.0TiB"},
	}
	for _, tc := range cases {
		if got := HumanBytes(tc.n); got != tc.want {
			t.Errorf("HumanBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestObjectName(t *testing.T) {
	if got, want := ObjectName("node-1"), "etcdmember.etcdmember.io/node-1"; got != want {
		t.Errorf("ObjectName = %q, want %q", got, want)
	}
}
