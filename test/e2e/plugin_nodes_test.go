package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// nodesWarning starts the one line list and prune-stale print when they cannot read Nodes;
// noteNodeGone is list's note of a member whose bound Node does not exist.
const (
	nodesWarning = "warning: cannot read Nodes ("
	noteNodeGone = "node gone"
)

// TestPluginNodesList: list shows the Node each member is bound to under -o wide, and notes
// "node gone" where that Node does not exist, for an operator with the shipped
// etcdmember-operator ClusterRole. Binding is explicit: a Node named like a member's etcd name
// binds nothing. A caller who may read EtcdMembers but not Nodes gets the table and one warning.
func TestPluginNodesList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	healthyWithLeader(e)
	operator := e.operatorKubeconfig()

	unbound := e.plugin("list", "-o", "wide", "--kubeconfig", operator)
	if unbound.Code != 0 || unbound.Stderr != "" {
		t.Fatalf("list -o wide of unbound members: %s", unbound.Output())
	}
	for _, m := range e.cluster.Members() {
		if r := parseTable(t, unbound.Stdout).rows[m.Name]; r == nil || r["NODE"] != "-" {
			t.Errorf("list -o wide: row of the unbound %s is %v, want NODE -", m.Name, r)
		}
	}

	// node-3's Node was never registered; a Node named node-3, like its etcd member, is there.
	e.registerNode("worker-1")
	e.registerNode("worker-2")
	e.registerNode("node-3")
	bound := map[string]string{"node-1": "worker-1", "node-2": "worker-2", "node-3": "worker-3"}
	for member, node := range bound {
		e.bindNode(member, node)
	}

	run := e.plugin("list", "-o", "wide", "--kubeconfig", operator)
	t.Logf("list -o wide:\n%s", run.Output())
	if run.Code != 0 || run.Stderr != "" {
		t.Fatalf("list -o wide as an operator: want exit 0 and nothing on stderr: %s", run.Output())
	}
	wide := parseTable(t, run.Stdout)
	for member, node := range bound {
		r := wide.rows[member]
		wantNote := map[bool]string{true: noteNodeGone, false: ""}[member == "node-3"]
		if r == nil || r["NODE"] != node || r["NOTE"] != wantNote {
			t.Errorf("list -o wide: row of %s is %v, want NODE %s and NOTE %q", member, r, node, wantNote)
		}
	}

	run = e.plugin("list", "--kubeconfig", operator)
	plain := parseTable(t, run.Stdout)
	if run.Code != 0 || plain.rows["node-3"]["NOTE"] != noteNodeGone || plain.rows["node-1"]["NOTE"] != "" ||
		strings.Contains(strings.Join(plain.columns, " "), "NODE") {
		t.Errorf("list: want node-3 noted %q, no other note and no NODE column: %s", noteNodeGone, run.Output())
	}

	t.Run("without permission to read Nodes", func(t *testing.T) {
		_, viewer := e.api.Restricted(t, "member-viewer", []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdmembers"}, Verbs: []string{"get", "list", "watch"},
		}})
		warnedOnce := func(what string, run framework.PluginRun) {
			t.Helper()
			lines := strings.Split(strings.TrimSuffix(run.Stderr, "\n"), "\n")
			if run.Code != 0 || strings.Count(run.Stderr, nodesWarning) != 1 || !strings.HasPrefix(lines[0], nodesWarning) ||
				!strings.Contains(lines[0], "forbidden") || !strings.HasSuffix(lines[0], "not checking whether bound Nodes exist") {
				t.Errorf("%s: want exit 0 and the warning, naming the refusal, once on stderr: %s", what, run.Output())
			}
			if strings.Contains(run.Stdout, noteNodeGone) || strings.Contains(run.Stdout, "warning") {
				t.Errorf("%s: a Node check or the warning on stdout: %s", what, run.Output())
			}
		}

		run := e.plugin("list", "--kubeconfig", viewer)
		t.Logf("list as a viewer of EtcdMembers alone:\n%s", run.Output())
		warnedOnce("list", run)
		if strings.Count(run.Stderr, "\n") != 1 || len(parseTable(t, run.Stdout).rows) != 3 {
			t.Errorf("list: want the 3 rows on stdout and one line on stderr: %s", run.Output())
		}
		run = e.plugin("list", "-o", "wide", "--kubeconfig", viewer)
		warnedOnce("list -o wide", run)
		if r := parseTable(t, run.Stdout).rows["node-3"]; r["NODE"] != "worker-3" {
			t.Errorf("list -o wide: row of node-3 is %v; the binding comes from the object, so want NODE worker-3", r)
		}
		warnedOnce("prune-stale --dry-run", e.plugin("prune-stale", "--dry-run", "--kubeconfig", viewer))

		// A watch checks the Nodes once, for its first list: the rows that follow warn no more.
		ctx, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		watch := e.api.PluginCommand(t, ctx, nil, "list", "-w", "--kubeconfig", viewer)
		var stdout, stderr framework.LockedBuffer
		watch.Stdout, watch.Stderr = &stdout, &stderr
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, settle, pollEvery, "list -w printing its list", func(context.Context) (bool, error) {
			return strings.Contains(stdout.String(), "NAME"), nil
		})
		for i := range 3 {
			e.kubectl("annotate", "--overwrite", "etcdmembers.etcdmember.io", "node-1", fmt.Sprintf("test.etcdmember.io/change=%d", i))
		}
		framework.Eventually(t, settle, pollEvery, "list -w printing the changes", func(context.Context) (bool, error) {
			return strings.Count(stdout.String(), "node-1 ") >= 4, nil
		})
		stop()
		_ = watch.Wait()
		if n := strings.Count(stderr.String(), nodesWarning); n != 1 {
			t.Errorf("list -w warned %d times, want once:\nstdout:\n%s\nstderr:\n%s", n, stdout.String(), stderr.String())
		}
	})
}

// TestPluginNodesPruneStale: prune-stale removes a member whose bound Node is gone once it has
// been down for --unreachable-for, from a kubeconfig alone, and leaves a healthy member whose
// Node is gone alone. Without a Node, the stopped member would be a registered member merely
// down, which prune-stale never prunes.
func TestPluginNodesPruneStale(t *testing.T) {
	t.Parallel()
	// newEnv waits until every agent has registered its own object: list notes a discovered one
	// "discovered", and prune-stale prunes it as registered by nobody, whatever its Node.
	e := newEnv(t, envConfig{size: 3})
	healthyWithLeader(e)
	operator := e.operatorKubeconfig()
	others := nonLeaders(e)
	down, up := others[0], others[1]
	var kept *framework.Member
	for _, m := range e.cluster.Members() {
		if m != down && m != up {
			kept = m
		}
	}
	e.registerNode("worker-kept")
	e.bindNode(kept.Name, "worker-kept")
	e.bindNode(up.Name, "worker-up")
	e.bindNode(down.Name, "worker-down")

	const unreachableFor = 2 * time.Second
	flag := "--unreachable-for=" + unreachableFor.String()
	run := e.plugin("prune-stale", "--dry-run", flag, "--kubeconfig", operator)
	if run.Code != 0 || run.Stdout != "" || strings.TrimSpace(run.Stderr) != "No stale members." {
		t.Fatalf("prune-stale with every member healthy, two of them on Nodes that are gone: %s", run.Output())
	}

	down.Stop(t)
	e.waitFor(down.Name, "Healthy=False", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	})
	time.Sleep(unreachableFor)
	why := "bound Node worker-down does not exist; unhealthy for "

	run = e.plugin("list", flag, "--kubeconfig", operator)
	rows := parseTable(t, run.Stdout).rows
	if run.Code != 0 || !strings.HasPrefix(rows[down.Name]["NOTE"], noteNodeGone+"; stale: "+why) ||
		rows[up.Name]["NOTE"] != noteNodeGone || rows[kept.Name]["NOTE"] != "" {
		t.Errorf("list: want %s noted node gone and stale, %s node gone only, %s nothing: %s", down.Name, up.Name, kept.Name, run.Output())
	}

	run = e.plugin("prune-stale", "--dry-run", flag, "--kubeconfig", operator)
	t.Logf("prune-stale --dry-run:\n%s", run.Output())
	plan := parseTable(t, run.Stdout)
	if r := plan.rows[down.Name]; run.Code != 0 || r == nil || r["MEMBER ID"] != down.IDHex() ||
		r["ACTION"] != "leave (object stays as history)" || !strings.HasPrefix(r["WHY STALE"], why) {
		t.Errorf("prune-stale --dry-run: row of the stopped %s is %v, want it pruned because its Node is gone: %s", down.Name, r, run.Output())
	}
	if len(plan.rows) != 1 || strings.Contains(run.Stderr, "warning") {
		t.Errorf("prune-stale --dry-run: want the stopped %s alone, and no warning: %s", down.Name, run.Output())
	}

	run = e.plugin("prune-stale", "--yes", flag, "--timeout", "45s", "--kubeconfig", operator)
	t.Logf("prune-stale --yes:\n%s", run.Output())
	if run.Code != 0 || !strings.Contains(run.Stdout, fmt.Sprintf("%s: member %s left etcd", down.Name, down.IDHex())) {
		t.Fatalf("prune-stale --yes: %s", run.Output())
	}
	ids := e.etcdMemberIDs()
	if ids[down.ID()] {
		t.Errorf("the stopped %s is still in etcd", down.Name)
	}
	for _, m := range []*framework.Member{up, kept} {
		if !ids[m.ID()] {
			t.Errorf("%s was removed", m.Name)
		}
		if obj := e.get(m.Name); obj.Spec.Leave {
			t.Errorf("%s was asked to leave: %s", m.Name, describe(obj))
		}
	}
	if obj := e.get(down.Name); obj.Status.MemberID != down.IDHex() {
		t.Errorf("the object of the registered %s does not stay as history: %s", down.Name, describe(obj))
	}
}

// operatorKubeconfig returns the kubeconfig of an operator bound to the etcdmember-operator
// ClusterRole that config/default ships, once RBAC lets it read Nodes.
func (e *env) operatorKubeconfig() string {
	e.t.Helper()
	const user = "etcdmember-operator-user"
	_, kubeconfig := e.api.User(e.t, user)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "etcdmember-operator"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := e.client.Create(ctx, binding); err != nil {
		e.t.Fatalf("bind %s to etcdmember-operator: %v", user, err)
	}
	e.retry("RBAC letting "+user+" get Nodes", func(ctx context.Context) error {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: "any"},
		}}
		if err := e.client.Create(ctx, review); err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("not allowed yet: %s", review.Status.Reason)
		}
		return nil
	})
	return kubeconfig
}

// registerNode creates a Node as a kubelet registers its own; the test bed runs no kubelet.
func (e *env) registerNode(name string) {
	e.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux",
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := e.client.Create(ctx, node); err != nil {
		e.t.Fatalf("register Node %s: %v", name, err)
	}
}

// bindNode binds a member to a Node as an operator does, by spec.nodeName.
func (e *env) bindNode(member, node string) {
	e.t.Helper()
	e.kubectl("patch", "etcdmembers.etcdmember.io", member, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"nodeName":%q}}`, node))
}
