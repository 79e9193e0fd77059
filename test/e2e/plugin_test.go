package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// Exit codes the plugin documents.
const (
	exitError   = 1
	exitRefused = 3
	exitTimeout = 124
)

// tableColumns are every header the plugin's tables use, so that a table can be cut at the
// headers' starts although headers themselves have spaces.
var tableColumns = []string{
	"NAME", "MEMBER ID", "PEER URLS", "ROLE", "JOINED", "HEALTHY", "LEAVE", "AGE", "CLIENT URLS",
	"RAFT TERM", "RAFT INDEX", "DB SIZE", "VERSION", "LAST PROBE", "NODE", "WHY STALE", "ACTION", "NOTE",
}

// table is a parsed kubectl-style table: the header's columns and the rows by NAME.
type table struct {
	columns []string
	rows    map[string]map[string]string
}

func parseTable(t *testing.T, out string) table {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("no table in %q", out)
	}
	header := lines[0]
	type col struct {
		name  string
		start int
	}
	var cols []col
	for _, name := range tableColumns {
		if i := strings.Index(header, name); i >= 0 && (i == 0 || header[i-1] == ' ') {
			cols = append(cols, col{name, i})
		}
	}
	slices.SortFunc(cols, func(a, b col) int { return a.start - b.start })
	tb := table{rows: map[string]map[string]string{}}
	for _, c := range cols {
		tb.columns = append(tb.columns, c.name)
	}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, c := range cols {
			end := len(line)
			if i+1 < len(cols) {
				end = min(cols[i+1].start, len(line))
			}
			row[c.name] = strings.TrimSpace(line[min(c.start, end):end])
		}
		tb.rows[row["NAME"]] = row
	}
	return tb
}

// plugin runs `kubectl etcdmember ARGS...` with the admin kubeconfig and no stdin.
func (e *env) plugin(args ...string) framework.PluginRun {
	e.t.Helper()
	return e.api.Plugin(e.t, nil, nil, args...)
}

func (e *env) etcdFlags() []string {
	return []string{"--etcd-endpoints", strings.Join(e.cluster.Endpoints(), ",")}
}

// healthyWithLeader waits until every member is Healthy=True and the objects mark etcd's leader as
// the leader, and no other member: list's ROLE column reads every object's mark, and one left
// from before a change of etcd's leader would show two leaders.
func healthyWithLeader(e *env) {
	e.t.Helper()
	for _, m := range e.cluster.Members() {
		e.waitFor(m.Name, "Healthy=True", func(m *v1alpha1.EtcdMember) bool {
			return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
		})
	}
	leader := e.cluster.Leader(e.t).Name
	for _, m := range e.cluster.Members() {
		isLeader := m.Name == leader
		e.waitFor(m.Name, fmt.Sprintf("recorded with leader=%t (etcd's leader is %s)", isLeader, leader), func(o *v1alpha1.EtcdMember) bool {
			return o.Status.Health != nil && o.Status.Health.Leader == isLeader
		})
	}
}

// pluginList: `kubectl etcdmember list` through the real kubectl, from the objects alone and
// with etcd's live view, in every output format, with kubectl's connection flags. The apiserver
// has its own etcd, so that a frozen member of the cluster under test slows only etcd's view.
func pluginList(t *testing.T) {
	e := newEnv(t, envConfig{size: 3, separateStorage: true})
	healthyWithLeader(e)
	leader := e.cluster.Leader(t).Name

	plugins := e.api.KubectlWithPlugin(t, nil, nil, "plugin", "list")
	if want := filepath.Join(framework.BinDir(), "kubectl-etcdmember"); plugins.Code != 0 || !strings.Contains(plugins.Stdout, want) {
		t.Fatalf("kubectl plugin list does not show %s: %s", want, plugins.Output())
	}

	checkRows := func(what string, run framework.PluginRun, live bool) table {
		t.Helper()
		if run.Code != 0 {
			t.Fatalf("%s: %s", what, run.Output())
		}
		tb := parseTable(t, run.Stdout)
		want := []string{"NAME", "MEMBER ID", "PEER URLS", "ROLE", "JOINED", "HEALTHY", "LEAVE", "AGE"}
		if !slices.Equal(tb.columns[:min(len(want), len(tb.columns))], want) || len(tb.rows) != 3 {
			t.Fatalf("%s: columns %v, %d rows; want %v and 3 rows:\n%s", what, tb.columns, len(tb.rows), want, run.Stdout)
		}
		for _, m := range e.cluster.Members() {
			r := tb.rows[m.Name]
			role := map[bool]string{true: "leader", false: "voter"}[m.Name == leader]
			if r == nil || r["MEMBER ID"] != m.IDHex() || r["PEER URLS"] != m.PeerURL() || r["ROLE"] != role ||
				r["JOINED"] != "True" || r["HEALTHY"] != "True" || r["LEAVE"] != "-" || r["AGE"] == "-" {
				t.Errorf("%s: row of %s is %v; want ID %s, peer URL %s, role %s, joined, healthy, no leave", what, m.Name, r, m.IDHex(), m.PeerURL(), role)
			}
		}
		t.Logf("%s (live=%v):\n%s", what, live, run.Stdout)
		return tb
	}
	checkRows("list", e.plugin("list"), false)
	checkRows("list --etcd-endpoints", e.plugin(append([]string{"list"}, e.etcdFlags()...)...), true)
	envRun := e.api.Plugin(t, nil, []string{"ETCDCTL_ENDPOINTS=" + strings.Join(e.cluster.Endpoints(), ",")}, "list", "-o", "wide")
	wide := checkRows("list -o wide with ETCDCTL_ENDPOINTS", envRun, true)
	for name, r := range wide.rows {
		if !strings.HasPrefix(r["VERSION"], "3.") || r["RAFT INDEX"] == "-" || r["CLIENT URLS"] != e.cluster.Member(name).ClientURL() {
			t.Errorf("-o wide with etcd: row of %s is %v; want etcd's version, raft index and client URL", name, r)
		}
	}
	if apiOnly := parseTable(t, e.plugin("list", "-o", "wide").Stdout); apiOnly.rows["node-1"]["VERSION"] != "-" || apiOnly.rows["node-1"]["LAST PROBE"] == "-" {
		t.Errorf("-o wide without etcd: %v; want no version (only etcd knows it) and the last probe's age", apiOnly.rows["node-1"])
	}

	t.Run("object formats", func(t *testing.T) {
		var ids []string
		for _, m := range e.cluster.Members() {
			ids = append(ids, m.IDHex())
		}
		slices.Sort(ids)

		run := e.plugin("list", "-o", "json")
		var list v1alpha1.EtcdMemberList
		if err := json.Unmarshal([]byte(run.Stdout), &list); err != nil || run.Code != 0 {
			t.Fatalf("-o json: %v\n%s", err, run.Output())
		}
		checkList(t, "-o json", &list)

		run = e.plugin("list", "-o", "yaml")
		list = v1alpha1.EtcdMemberList{}
		if err := yaml.UnmarshalStrict([]byte(run.Stdout), &list); err != nil || run.Code != 0 {
			t.Fatalf("-o yaml: %v\n%s", err, run.Output())
		}
		checkList(t, "-o yaml", &list)

		run = e.plugin("list", "-o", "name")
		if want := "etcdmember.etcdmember.io/node-1\netcdmember.etcdmember.io/node-2\netcdmember.etcdmember.io/node-3\n"; run.Stdout != want || run.Code != 0 {
			t.Errorf("-o name: %s", run.Output())
		}

		run = e.plugin("list", "-o", "jsonpath={.items[*].status.memberID}")
		got := strings.Fields(run.Stdout)
		slices.Sort(got)
		if !slices.Equal(got, ids) || run.Code != 0 {
			t.Errorf("-o jsonpath: %v, want %v: %s", got, ids, run.Output())
		}

		run = e.plugin("list", "-o", "custom-columns=NAME:.metadata.name,ID:.status.memberID,LEAVE:.spec.leave", "--no-headers")
		lines := strings.Split(strings.TrimSpace(run.Stdout), "\n")
		if len(lines) != 3 || run.Code != 0 || strings.Fields(lines[0])[0] != "node-1" || strings.Fields(lines[0])[1] != e.cluster.Member("node-1").IDHex() ||
			strings.Fields(lines[0])[2] != "false" {
			t.Errorf("-o custom-columns --no-headers: %s", run.Output())
		}

		run = e.plugin("list", "-o", "bogus")
		if run.Code != exitError || !strings.Contains(run.Stderr, "bogus") {
			t.Errorf("-o bogus: want exit 1 naming the format: %s", run.Output())
		}

		run = e.plugin("list", "-l", v1alpha1.LabelDiscovered+"=true")
		if run.Code != 0 || run.Stdout != "" || strings.TrimSpace(run.Stderr) != "No EtcdMember objects found." {
			t.Errorf("list of no objects: want exit 0, nothing on stdout, one line on stderr: %s", run.Output())
		}
	})

	t.Run("connection flags", func(t *testing.T) {
		// A kubeconfig whose current context points nowhere: only --context makes it work.
		cfg, err := clientcmd.LoadFromFile(e.api.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		good := cfg.CurrentContext
		cfg.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		cfg.Contexts["wrong"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: cfg.Contexts[good].AuthInfo}
		cfg.CurrentContext = "wrong"
		path := filepath.Join(t.TempDir(), "two-contexts")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		kc := []string{"KUBECONFIG=" + path}
		if run := e.api.Plugin(t, nil, kc, "list", "--request-timeout", "3s"); run.Code == 0 {
			t.Errorf("list against the wrong current context succeeded: %s", run.Output())
		}
		if run := e.api.Plugin(t, nil, kc, "list", "--context", good); run.Code != 0 || len(parseTable(t, run.Stdout).rows) != 3 {
			t.Errorf("list --context %s: %s", good, run.Output())
		}
		if run := e.api.Plugin(t, nil, nil, "list", "--kubeconfig", path, "--context", good); run.Code != 0 {
			t.Errorf("list --kubeconfig --context: %s", run.Output())
		}

		// A read-only operator's token: it lists, and cannot ask for a leave.
		token := e.api.Token(t, "viewer", []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdmembers"}, Verbs: []string{"get", "list", "watch"},
		}})
		empty := filepath.Join(t.TempDir(), "empty")
		if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		asViewer := []string{"--server", e.api.URL(), "--certificate-authority", e.api.CAFile(), "--token", token}
		noKC := []string{"KUBECONFIG=" + empty}
		if run := e.api.Plugin(t, nil, noKC, append([]string{"list"}, asViewer...)...); run.Code != 0 || len(parseTable(t, run.Stdout).rows) != 3 {
			t.Errorf("list --token of a viewer: %s", run.Output())
		}
		target := e.cluster.Member("node-2").Name
		run := e.api.Plugin(t, nil, noKC, append([]string{"leave", target}, asViewer...)...)
		if run.Code != exitError || !strings.Contains(run.Stderr, `forbidden to patch etcdmembers.etcdmember.io "`+target+`"`) {
			t.Errorf("leave as a viewer: want exit 1 and Forbidden: %s", run.Output())
		}
		if e.get(target).Spec.Leave {
			t.Fatalf("a viewer's leave set spec.leave")
		}
	})

	t.Run("completion", func(t *testing.T) {
		run := e.api.KubectlWithPlugin(t, nil, nil, "__complete", "etcdmember", "leave", "node-")
		if run.Code != 0 {
			t.Fatalf("kubectl __complete: %s", run.Output())
		}
		for _, m := range e.cluster.Members() {
			if !slices.Contains(strings.Split(run.Stdout, "\n"), m.Name) {
				t.Errorf("completion of leave misses %s:\n%s", m.Name, run.Output())
			}
		}
	})

	t.Run("etcd faults", func(t *testing.T) {
		// A frozen member costs one timeout, not one per call: the member list and every Status
		// run side by side within it.
		frozen := e.cluster.Member(nonLeaders(e)[0].Name)
		frozen.Pause(t)
		const timeout = 3 * time.Second
		run := e.plugin(append([]string{"list", "--timeout", timeout.String()}, e.etcdFlags()...)...)
		frozen.Resume(t)
		if run.Code != 0 {
			t.Fatalf("list with %s frozen: %s", frozen.Name, run.Output())
		}
		if limit := timeout + time.Second; run.Took > limit {
			t.Errorf("list with %s frozen took %s, want at most --timeout plus a second (%s)", frozen.Name, run.Took, limit)
		}
		if r := parseTable(t, run.Stdout).rows[frozen.Name]; r["HEALTHY"] != "False" {
			t.Errorf("frozen %s: row %v, want HEALTHY False", frozen.Name, r)
		}
		t.Logf("list with %s frozen took %s:\n%s", frozen.Name, run.Took.Round(time.Millisecond), run.Stdout)

		run = e.plugin("list", "--etcd-endpoints", "http://127.0.0.1:1", "--timeout", "1s")
		if run.Code != exitError || len(parseTable(t, run.Stdout).rows) != 3 || !strings.Contains(run.Stderr, "live view unknown") {
			t.Errorf("list with etcd unreachable: want the objects and exit 1: %s", run.Output())
		}
	})

	t.Run("next to k0s's EtcdMember", func(t *testing.T) {
		installK0sCRD(t, e)
		run := e.plugin("list", "-o", "name")
		if run.Code != 0 || strings.Count(run.Stdout, "etcdmember.etcdmember.io/") != 3 || strings.Contains(run.Stdout, "k0sproject") {
			t.Errorf("list next to k0s's CRD: %s", run.Output())
		}
		run = e.plugin("leave", "node-3", "--dry-run=server", "-o", "name")
		if run.Code != 0 || run.Stdout != "etcdmember.etcdmember.io/node-3\n" {
			t.Errorf("leave --dry-run=server next to k0s's CRD: %s", run.Output())
		}
		out := e.kubectl("get", "etcdmembers.etcd.k0sproject.io", "node-3", "-o", "jsonpath={.spec.leave}")
		if out != "false" {
			t.Errorf("k0s's node-3 was touched: spec.leave=%q", out)
		}
	})
}

func checkList(t *testing.T, what string, list *v1alpha1.EtcdMemberList) {
	t.Helper()
	if list.APIVersion != "etcdmember.io/v1alpha1" || len(list.Items) != 3 {
		t.Errorf("%s: apiVersion %q, %d items", what, list.APIVersion, len(list.Items))
	}
	for _, m := range list.Items {
		if m.APIVersion != "etcdmember.io/v1alpha1" || m.Kind != "EtcdMember" || m.Status.MemberID == "" {
			t.Errorf("%s: item %s has apiVersion %q kind %q memberID %q", what, m.Name, m.APIVersion, m.Kind, m.Status.MemberID)
		}
	}
}

// installK0sCRD installs a CRD shaped like k0s's (etcdmembers.etcd.k0sproject.io, kind
// EtcdMember) with an object named like one of ours, as a k0s cluster has them.
func installK0sCRD(t *testing.T, e *env) {
	t.Helper()
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: etcdmembers.etcd.k0sproject.io
spec:
  group: etcd.k0sproject.io
  names: {kind: EtcdMember, listKind: EtcdMemberList, plural: etcdmembers, singular: etcdmember}
  scope: Cluster
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                leave: {type: boolean}
`
	obj := `apiVersion: etcd.k0sproject.io/v1beta1
kind: EtcdMember
metadata:
  name: node-3
spec:
  leave: false
`
	dir := t.TempDir()
	for name, body := range map[string]string{"crd.yaml": crd, "obj.yaml": obj} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.kubectl("apply", "-f", filepath.Join(dir, "crd.yaml"))
	e.kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/etcdmembers.etcd.k0sproject.io")
	e.kubectl("apply", "-f", filepath.Join(dir, "obj.yaml"))
}

// TestPluginLeave runs on five members: two leave one after the other in one command, then,
// with one of the three left dead, a third leave is refused by the quorum guard.
func TestPluginLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 5})
	healthyWithLeader(e)
	others := nonLeaders(e)
	first, second, dead, refusedTarget := others[0], others[1], others[2], others[3]

	run := e.plugin("leave", "nosuch")
	if run.Code != exitError || !strings.Contains(run.Stderr, `EtcdMember "nosuch" not found; existing: `) {
		t.Errorf("leave nosuch: %s", run.Output())
	}

	e.waitFor(first.Name, "Removable=True/QuorumKept", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept)
	})
	run = e.plugin("leave", first.Name, "--dry-run=client")
	if run.Code != 0 || !strings.Contains(run.Stdout, "Removable=True QuorumKept") || !strings.Contains(run.Stderr, "Joined=True") {
		t.Errorf("--dry-run=client: %s", run.Output())
	}
	run = e.plugin("leave", first.Name, "--dry-run=server")
	if run.Code != 0 || !strings.Contains(run.Stdout, "server dry run") {
		t.Errorf("--dry-run=server: %s", run.Output())
	}
	if e.get(first.Name).Spec.Leave {
		t.Fatalf("a dry run set spec.leave")
	}

	// A watch running alongside prints the leave as it happens.
	watchCtx, stopWatch := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stopWatch()
	watch := e.api.PluginCommand(t, watchCtx, nil, "list", "-w")
	var watched framework.LockedBuffer
	watch.Stdout = &watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	// The leave starts once the list is printed, so the watch is open from the list's resource
	// version: a CI run of 79e7004 on a loaded machine had the leave done before the watch
	// printed anything, and stopped it empty.
	framework.Eventually(t, settle, pollEvery, "list -w printing its list", func(context.Context) (bool, error) {
		return strings.Contains(watched.String(), "NAME"), nil
	})

	// --timeout stays under the framework's own bound, so that a hang shows the plugin's message.
	run = e.plugin("leave", first.Name, second.Name, "--timeout", "45s")
	t.Logf("leave %s %s:\n%s", first.Name, second.Name, run.Output())
	if run.Code != 0 {
		t.Fatalf("leave of two members: %s", run.Output())
	}
	ids := e.etcdMemberIDs()
	for _, m := range []*framework.Member{first, second} {
		if ids[m.ID()] {
			t.Errorf("%s is still in etcd when leave returned", m.Name)
		}
		if !strings.Contains(run.Stdout, fmt.Sprintf("%s: member %s left etcd", m.Name, m.IDHex())) {
			t.Errorf("no result line for %s on stdout", m.Name)
		}
		if !strings.Contains(run.Stderr, m.Name+": Left=True Removed") {
			t.Errorf("no progress line for %s on stderr", m.Name)
		}
	}
	if done, asked := strings.Index(run.Stderr, first.Name+": Left=True"), strings.Index(run.Stderr, second.Name+": leave requested"); done < 0 || asked < done {
		t.Errorf("the second leave was not asked after the first completed:\n%s", run.Stderr)
	}
	stopWatch()
	_ = watch.Wait()
	if !strings.Contains(watched.String(), v1alpha1.ReasonRemoved) || !strings.Contains(watched.String(), first.Name) {
		t.Errorf("list -w printed no row of the removal:\n%s", watched.String())
	}

	run = e.plugin("leave", first.Name)
	if run.Code != exitError || !strings.Contains(run.Stderr, "already left etcd") {
		t.Errorf("leave of a member that left: %s", run.Output())
	}

	// Three members left; with one dead, removing a healthy one would leave 1 healthy voter of 2.
	dead.Kill(t)
	run = e.plugin("leave", refusedTarget.Name, "--timeout", "45s")
	t.Logf("leave %s with %s dead:\n%s", refusedTarget.Name, dead.Name, run.Output())
	if run.Code != exitRefused || !strings.Contains(run.Stderr, "would leave 1 healthy voter of 2") ||
		!strings.Contains(run.Stderr, "leave "+refusedTarget.Name+" --cancel") || !strings.Contains(run.Stderr, "stays pending") {
		t.Errorf("refused leave: want exit %d with the guard's numbers and how to cancel: %s", exitRefused, run.Output())
	}
	if !e.etcdMemberIDs()[refusedTarget.ID()] {
		t.Fatalf("refused member %s was removed", refusedTarget.Name)
	}
	e.waitFor(refusedTarget.Name, "Removable=False", func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk)
	})
	run = e.plugin("leave", refusedTarget.Name, "--dry-run=client")
	if run.Code != exitRefused || !strings.Contains(run.Stderr, "not removable now") {
		t.Errorf("--dry-run=client of a refused member: %s", run.Output())
	}
	run = e.plugin("leave", refusedTarget.Name, "--cancel", "-o", "name")
	if run.Code != 0 || run.Stdout != "etcdmember.etcdmember.io/"+refusedTarget.Name+"\n" || e.get(refusedTarget.Name).Spec.Leave {
		t.Errorf("--cancel: %s", run.Output())
	}

	// With no agent running nobody answers a leave: it ends with the timeout's own exit code.
	for _, a := range e.agents {
		a.Stop(t)
	}
	run = e.plugin("leave", refusedTarget.Name, "--timeout", "3s")
	if run.Code != exitTimeout || !strings.Contains(run.Stderr, "waiting for the controller") {
		t.Errorf("leave with no agent running: want exit %d and the last state: %s", exitTimeout, run.Output())
	}
}

// TestPluginLeaveRidesOutAPassingRefusal: with one of three members dead, a leave of another is
// refused (1 healthy voter of 2 would remain). --refusal-grace 0 ends the wait at once with exit
// 3; a grace the refusal outlasts ends it with exit 3 no sooner than the grace; and with the
// default grace, the dead member started again while the wait rides the refusal out, the leave
// completes with exit 0, as a leave asked just as a member restarts must.
func TestPluginLeaveRidesOutAPassingRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	healthyWithLeader(e)
	others := nonLeaders(e)
	dead, target := others[0], others[1]
	dead.Kill(t)

	run := e.plugin("leave", target.Name, "--refusal-grace", "0", "--timeout", "45s")
	t.Logf("leave %s --refusal-grace 0 with %s dead:\n%s", target.Name, dead.Name, run.Output())
	if run.Code != exitRefused || !strings.Contains(run.Stderr, "would leave 1 healthy voter of 2") || strings.Contains(run.Stderr, "waiting up to") {
		t.Errorf("--refusal-grace 0: want exit %d at once with the guard's numbers: %s", exitRefused, run.Output())
	}

	const grace = 3 * time.Second
	run = e.plugin("leave", target.Name, "--refusal-grace", grace.String(), "--timeout", "45s")
	t.Logf("leave %s --refusal-grace %s:\n%s", target.Name, grace, run.Output())
	if run.Code != exitRefused || run.Took < grace || !strings.Contains(run.Stderr, "waiting up to "+grace.String()) ||
		!strings.Contains(run.Stderr, "still refused after "+grace.String()) || !strings.Contains(run.Stderr, "would leave 1 healthy voter of 2") {
		t.Errorf("a refusal lasting the grace: want exit %d after at least %s, saying it waited: %s", exitRefused, grace, run.Output())
	}
	if !e.etcdMemberIDs()[target.ID()] {
		t.Fatalf("refused member %s was removed", target.Name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	leave := e.api.PluginCommand(t, ctx, nil, "leave", target.Name, "--timeout", "45s")
	var stdout, stderr framework.LockedBuffer
	leave.Stdout, leave.Stderr = &stdout, &stderr
	if err := leave.Start(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, settle, pollEvery, "leave riding out the refusal", func(context.Context) (bool, error) {
		// The documented default grace.
		return strings.Contains(stderr.String(), "waiting up to 10s"), nil
	})
	dead.Start(t)
	err := leave.Wait()
	t.Logf("leave %s, %s started again meanwhile: %v\nstdout:\n%sstderr:\n%s", target.Name, dead.Name, err, stdout.String(), stderr.String())
	if err != nil || !strings.Contains(stdout.String(), target.Name+": member "+target.IDHex()+" left etcd") {
		t.Errorf("a refusal that passed within the grace: want exit 0 and the member gone: %v", err)
	}
	if e.etcdMemberIDs()[target.ID()] {
		t.Errorf("%s is still in etcd after its leave returned", target.Name)
	}
}

// TestPluginPruneStale: the IP-change case on real etcd. node-3 ran without an agent (its object
// is a discovered one); the node came back at a new address as a new member under the same etcd
// name, added as a learner while the old machine still ran (etcd refuses any member add while a
// voter is down), promoted, and then the old machine stopped for good. node-4 is a registered
// member that is merely stopped. prune-stale must remove exactly the old node-3 and delete its
// discovered object, and leave node-4 and every healthy member alone.
func TestPluginPruneStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 4, agents: []string{"node-1", "node-2", "node-4"}})
	old := e.cluster.Member("node-3")
	stopped := e.cluster.Member("node-4")
	e.waitFor(old.Name, "discovered", func(m *v1alpha1.EtcdMember) bool {
		return m.Labels[v1alpha1.LabelDiscovered] == "true" && m.Status.MemberID == old.IDHex()
	})

	rebuilt := e.cluster.AddMemberAs(t, "node-3-rebuilt", old.EtcdName(), true)
	e.waitForMember(rebuilt.ID(), "promoted to voter", func(m *v1alpha1.EtcdMember) bool {
		return !m.Status.IsLearner && hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionTrue, v1alpha1.ReasonServing)
	})
	old.Stop(t)
	stopped.Stop(t)
	unhealthy := func(m *v1alpha1.EtcdMember) bool {
		return hasCondition(m, v1alpha1.ConditionHealthy, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	}
	e.waitFor(old.Name, "Healthy=False", unhealthy)
	e.waitFor(stopped.Name, "Healthy=False", unhealthy)
	const unreachableFor = 2 * time.Second
	time.Sleep(unreachableFor)

	checkPlan := func(what string, run framework.PluginRun) {
		t.Helper()
		t.Logf("%s:\n%s", what, run.Output())
		if run.Code != 0 {
			t.Fatalf("%s: %s", what, run.Output())
		}
		plan := parseTable(t, run.Stdout)
		if r := plan.rows[old.Name]; r == nil || r["MEMBER ID"] != old.IDHex() || r["ACTION"] != "leave, then delete object" ||
			!strings.Contains(r["WHY STALE"], "superseded by") {
			t.Errorf("%s: row of the old %s is %v, want it pruned as superseded", what, old.Name, r)
		}
		if r := plan.rows[stopped.Name]; r == nil || r["ACTION"] != "none" || !strings.Contains(r["WHY STALE"], "use leave") {
			t.Errorf("%s: row of the stopped %s is %v, want it listed and left alone", what, stopped.Name, r)
		}
		if len(plan.rows) != 2 {
			t.Errorf("%s: %d rows, want exactly the old %s and the stopped %s", what, len(plan.rows), old.Name, stopped.Name)
		}
	}
	flag := "--unreachable-for=" + unreachableFor.String()
	checkPlan("prune-stale --dry-run", e.plugin("prune-stale", "--dry-run", flag))
	etcdEnv := []string{"ETCDCTL_ENDPOINTS=" + strings.Join(e.cluster.Endpoints(), ",")}
	checkPlan("prune-stale --dry-run with etcd", e.api.Plugin(t, nil, etcdEnv, "prune-stale", "--dry-run", flag))

	run := e.plugin("prune-stale", flag)
	if run.Code != exitError || !strings.Contains(run.Stderr, "pass --yes") {
		t.Errorf("prune-stale without a terminal and without --yes: %s", run.Output())
	}
	if !e.etcdMemberIDs()[old.ID()] || e.get(old.Name).Spec.Leave {
		t.Fatalf("a dry run or an unconfirmed run changed %s", old.Name)
	}

	run = e.api.Plugin(t, nil, etcdEnv, "prune-stale", "--yes", flag, "--timeout", "45s")
	t.Logf("prune-stale --yes:\n%s", run.Output())
	if run.Code != 0 || !strings.Contains(run.Stdout, old.Name+": discovered object deleted") {
		t.Fatalf("prune-stale --yes: %s", run.Output())
	}
	ids := e.etcdMemberIDs()
	if ids[old.ID()] {
		t.Errorf("the old %s is still in etcd", old.Name)
	}
	for _, m := range []*framework.Member{e.cluster.Member("node-1"), e.cluster.Member("node-2"), stopped, rebuilt} {
		if !ids[m.ID()] {
			t.Errorf("%s was removed", m.Name)
		}
	}
	var list v1alpha1.EtcdMemberList
	e.retry("list", func(ctx context.Context) error { return e.client.List(ctx, &list) })
	if m := list.FindByMemberID(old.IDHex()); m != nil {
		t.Errorf("object %s of the pruned member still exists", m.Name)
	}
	if obj := e.get(stopped.Name); obj.Spec.Leave || obj.Status.MemberID != stopped.IDHex() {
		t.Errorf("the stopped %s was touched: %s", stopped.Name, describe(obj))
	}

	run = e.plugin("prune-stale", flag)
	if run.Code != 0 || !strings.Contains(run.Stderr, "Nothing to prune.") {
		t.Errorf("prune-stale after pruning: %s", run.Output())
	}
}
