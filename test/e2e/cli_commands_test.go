package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
)

// statusColumns are the status table's headers, in order.
var statusColumns = []string{"NAME", "MEMBER ID", "PEER URLS", "LEARNER", "LEADER", "HEALTHY", "RAFT INDEX", "DB SIZE", "JOINED", "LEAVE", "NOTE"}

// statusRow is the documented JSON row of "etcdmember status -o json"; decoding with
// DisallowUnknownFields keeps the field set honest.
type statusRow struct {
	Name      string   `json:"name"`
	EtcdName  string   `json:"etcdName"`
	MemberID  string   `json:"memberID"`
	PeerURLs  []string `json:"peerURLs"`
	Learner   bool     `json:"learner"`
	InEtcd    *bool    `json:"inEtcd"`
	Leader    *bool    `json:"leader"`
	Healthy   *bool    `json:"healthy"`
	RaftIndex *uint64  `json:"raftIndex"`
	DBSize    *int64   `json:"dbSize"`
	Joined    string   `json:"joined"`
	Leave     string   `json:"leave"`
	Note      string   `json:"note"`
}

// statusTable cuts the table at the header's column starts, since headers themselves have
// spaces, and returns the rows by NAME, each as column -> cell.
func statusTable(t *testing.T, out string) map[string]map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	var starts []int
	var names []string
	for _, col := range statusColumns {
		if i := strings.Index(header, col); i >= 0 {
			starts = append(starts, i)
			names = append(names, col)
		}
	}
	rows := map[string]map[string]string{}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, start := range starts {
			end := len(line)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(line))
			}
			row[names[i]] = strings.TrimSpace(line[min(start, end):end])
		}
		rows[row["NAME"]] = row
	}
	return rows
}

func TestStatusCommand(t *testing.T) {
	e := newEnv(t, envConfig{size: 3})
	kubeconfig := e.api.Kubeconfig()
	endpoints := strings.Join(e.cluster.Endpoints(), ",")

	out, code := runAgentCLI(t, "status", "--kubeconfig", kubeconfig, "--etcd-endpoints", endpoints)
	t.Logf("etcdmember status:\n%s", out)
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	rows := statusTable(t, out)
	if len(rows) != 3 {
		t.Fatalf("want 3 rows, got %d", len(rows))
	}
	etcdLeader := e.cluster.Leader(t).Name
	for _, m := range e.cluster.Members() {
		r := rows[m.Name]
		if r == nil {
			t.Fatalf("no row for %s", m.Name)
		}
		wantLeader := map[bool]string{true: "yes", false: "no"}[m.Name == etcdLeader]
		if r["MEMBER ID"] != m.IDHex() || r["PEER URLS"] != m.PeerURL() || r["HEALTHY"] != "yes" || r["LEADER"] != wantLeader ||
			r["JOINED"] != "True" || r["LEAVE"] != "-" || r["RAFT INDEX"] == "?" || r["DB SIZE"] == "?" {
			t.Errorf("row of %s: %v; want ID %s, peer URL %s, healthy, LEADER %s, joined, no leave", m.Name, r, m.IDHex(), m.PeerURL(), wantLeader)
		}
	}

	out, code = runAgentCLI(t, "status", "--kubeconfig", kubeconfig, "--etcd-endpoints", endpoints, "-o", "json")
	if code != 0 {
		t.Fatalf("status -o json: exit %d: %s", code, out)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	dec.DisallowUnknownFields()
	var parsed []statusRow
	if err := dec.Decode(&parsed); err != nil {
		t.Fatalf("status -o json: %v in %s", err, out)
	}
	leaders := 0
	for _, r := range parsed {
		m := e.cluster.Member(r.Name)
		if m == nil || r.MemberID != m.IDHex() || r.EtcdName != m.EtcdName() || r.InEtcd == nil || !*r.InEtcd ||
			r.Healthy == nil || !*r.Healthy || r.RaftIndex == nil || *r.RaftIndex == 0 || r.DBSize == nil || *r.DBSize == 0 || r.Leader == nil {
			t.Errorf("JSON row %+v does not describe a healthy framework member", r)
			continue
		}
		if *r.Leader {
			leaders++
		}
	}
	if len(parsed) != 3 || leaders != 1 {
		t.Errorf("want 3 JSON rows with one leader, got %d rows, %d leaders:\n%s", len(parsed), leaders, out)
	}

	// An object whose member etcd does not list stands out.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ghost := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}}
	if err := e.client.Create(ctx, ghost); err != nil {
		t.Fatalf("create ghost: %v", err)
	}
	// The leader reconciles the new object at once and may write its status first.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(ghost), ghost); err != nil {
			return err
		}
		ghost.Status.MemberID = "abc"
		return e.client.Status().Update(ctx, ghost)
	})
	if err != nil {
		t.Fatalf("ghost status: %v", err)
	}
	out, code = runAgentCLI(t, "status", "--kubeconfig", kubeconfig, "--etcd-endpoints", endpoints)
	t.Logf("etcdmember status with an object etcd does not list:\n%s", out)
	rows = statusTable(t, out)
	if r := rows["ghost"]; code != 0 || r == nil || r["NOTE"] != "not in etcd" || r["MEMBER ID"] != "abc" || r["HEALTHY"] != "-" {
		t.Errorf("exit %d, ghost row %v; want NOTE \"not in etcd\"", code, r)
	}

	// Without etcd the objects are still listed, live columns unknown.
	out, code = runAgentCLI(t, "status", "--kubeconfig", kubeconfig)
	t.Logf("etcdmember status without etcd:\n%s", out)
	rows = statusTable(t, out)
	if code != 0 || len(rows) != 4 {
		t.Fatalf("without etcd: exit %d, %d rows, want 4", code, len(rows))
	}
	for name, r := range rows {
		for _, col := range []string{"LEADER", "HEALTHY", "RAFT INDEX", "DB SIZE"} {
			if r[col] != "?" {
				t.Errorf("without etcd, %s of %s is %q, want ?", col, name, r[col])
			}
		}
	}

	// Unreachable etcd: the objects are still printed, and the failure is an error.
	out, code = runAgentCLI(t, "status", "--kubeconfig", kubeconfig, "--etcd-endpoints", "http://127.0.0.1:1", "--timeout", "1s")
	if rows = statusTable(t, out); code == 0 || rows["node-1"] == nil || !strings.Contains(out, "Error: live columns unknown: etcd member list") {
		t.Errorf("status with etcd unreachable: exit %d:\n%s", code, out)
	}

	out, code = runAgentCLI(t, "status", "--kubeconfig", kubeconfig, "-o", "yaml")
	if code != 0 || !strings.Contains(out, "memberID: abc") || !strings.Contains(out, "healthy: null") {
		t.Errorf("status -o yaml: exit %d:\n%s", code, out)
	}
}

// TestLeaveCommand runs on four members so that one leave can succeed and, with a member
// killed afterwards, the next one is refused by the quorum guard.
func TestLeaveCommand(t *testing.T) {
	e := newEnv(t, envConfig{size: 4})
	kubeconfig := e.api.Kubeconfig()
	others := nonLeaders(e)
	target, dead, refusedTarget := others[0], others[1], others[2]

	out, code := runAgentCLI(t, "leave", "nosuch", "--kubeconfig", kubeconfig)
	if code == 0 || !strings.Contains(out, `EtcdMember "nosuch" not found; existing: `) || !strings.Contains(out, target.Name) {
		t.Errorf("leave nosuch: exit %d, %q", code, out)
	}

	e.waitFor(target.Name, "Removable=True/QuorumKept", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept)
	})
	out, code = runAgentCLI(t, "leave", target.Name, "--dry-run", "--kubeconfig", kubeconfig)
	t.Logf("etcdmember leave %s --dry-run:\n%s", target.Name, out)
	if code != 0 || !strings.Contains(out, "Removable=True QuorumKept") || !strings.Contains(out, "Joined=True") {
		t.Errorf("dry run: exit %d, %q", code, out)
	}
	if obj := e.get(target.Name); obj.Spec.Leave {
		t.Fatalf("the dry run set spec.leave")
	}

	_, viewer := e.api.Restricted(t, "viewer", []rbacv1.PolicyRule{{
		APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdmembers"}, Verbs: []string{"get", "list", "watch"},
	}})
	out, code = runAgentCLI(t, "leave", target.Name, "--kubeconfig", viewer)
	t.Logf("etcdmember leave as viewer:\n%s", out)
	if code == 0 || !strings.Contains(out, `forbidden to patch etcdmembers.etcdmember.io "`+target.Name+`"`) || !strings.Contains(out, "patch") {
		t.Errorf("leave without patch rights: exit %d, %q", code, out)
	}
	if obj := e.get(target.Name); obj.Spec.Leave {
		t.Fatalf("spec.leave set without patch rights")
	}

	// --timeout stays under runAgentCLI's 30s, so a hang shows the command's own message.
	out, code = runAgentCLI(t, "leave", target.Name, "--wait", "--timeout", "25s", "--kubeconfig", kubeconfig)
	t.Logf("etcdmember leave %s --wait:\n%s", target.Name, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[len(lines)-1], target.Name+": Left=True Removed: ") {
		t.Fatalf("leave --wait: exit %d, want progress lines ending in Left=True Removed:\n%s", code, out)
	}
	if e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("%s is still in etcd", target.Name)
	}

	// Three members left; with one dead, removing a healthy one would leave 1 healthy voter of 2.
	dead.Kill(t)
	out, code = runAgentCLI(t, "leave", refusedTarget.Name, "--wait", "--timeout", "25s", "--kubeconfig", kubeconfig)
	t.Logf("etcdmember leave %s --wait with %s dead:\n%s", refusedTarget.Name, dead.Name, out)
	if code == 0 || !strings.Contains(out, "would leave 1 healthy voter of 2") || !strings.Contains(out, "refused (QuorumAtRisk)") {
		t.Errorf("refused leave: exit %d, %q", code, out)
	}
	if !e.etcdMemberIDs()[refusedTarget.ID()] {
		t.Fatalf("refused member %s was removed", refusedTarget.Name)
	}
}
