// Command demo runs etcdmember's local lab: three etcd members on their own loopback addresses,
// a kube-apiserver on top, the CRD and a node agent (`kubectl-etcdmember serve`) per member. It
// then uses the plugin as an operator types it, through the real kubectl: `kubectl etcdmember
// list`, `leave` (the member is gone from etcd, its object kept as history), `join` (a learner the
// leader promotes), the node that left coming back wiped under its old name, `prune-stale` on
// the member a rebuilt node left behind, and `kubectl delete node` removing the Node's member
// (--leave-on-node-delete). It cleans everything up.
//
// Run it with `make demo`, which builds the binaries first. `make lab` (demo -lab) starts the same
// lab and keeps it running for a newcomer to type into, until Ctrl-C (keep.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// resource is how every kubectl command names our objects: k0s ships an EtcdMember kind of its
// own, and a bare "etcdmember" may resolve to it.
const resource = "etcdmembers.etcdmember.io"

func main() {
	keep := flag.Bool("lab", false, "start the lab, print how to reach it, and keep it running until interrupted (make lab)")
	flag.Parse()
	// The framework's API clients log through controller-runtime, which warns without a logger.
	logf.SetLogger(logr.Discard())
	l := newLab()
	body, stop := func() { demo(l) }, context.CancelFunc(func() {})
	if *keep {
		// Held until the cleanups are done: a second Ctrl-C while they run is ignored rather
		// than cutting them short.
		var ctx context.Context
		ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		body = func() { keepRunning(ctx, l) }
	}
	err := l.run(body)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
	fmt.Println("\nDone: the lab is stopped and its files are removed.")
}

func demo(l *lab) {
	step("Starting the lab: 3 etcd members, each on its own loopback address")
	cluster := framework.NewCluster(l, framework.ClusterConfig{Size: 3})
	for _, m := range cluster.Members() {
		fmt.Printf("    %s  member %-16s  %s\n", m.Name, m.IDHex(), m.ClientURL())
	}
	api := framework.StartAPIServer(l, cluster)
	fmt.Printf("    kube-apiserver at %s, storing in that etcd cluster\n", api.URL())

	step("Installing the CRD and the agent's RBAC")
	show(l, api, "apply", "-k", "config/default")

	step("Registering a Node per member, as each node's kubelet would, and starting the node agent")
	for _, m := range cluster.Members() {
		startNodeAgent(l, api, m)
		fmt.Printf("    Node %s registered; its agent (kubectl-etcdmember serve %s) registered the member\n", m.Name, strings.Join(nodeArgs(m), " "))
	}
	waitHealthy(l, api, cluster)
	plugin(l, api, nil, "list")
	plugin(l, api, nil, "list", "-o", "wide", "--etcd-endpoints", strings.Join(cluster.Endpoints(), ","))

	leaving := cluster.Member("node-2")
	oldID := leaving.IDHex()
	step("Removing node-2: leave marks it and waits until etcd no longer has it")
	plugin(l, api, nil, "leave", "node-2")
	etcdctl(l, cluster, "member", "list", "-w", "table")
	fmt.Println("\n    The object stays as history:")
	plugin(l, api, nil, "list")
	show(l, api, "get", "events.events.k8s.io", "-n", "kube-system", "--field-selector", "regarding.name=node-2",
		"-o", "custom-columns=TYPE:.type,REASON:.reason,NOTE:.note")

	step("Joining node-4: `kubectl etcdmember join` adds a learner and writes the settings its etcd needs")
	node4 := cluster.NewPendingMember(l, "node-4")
	file := filepath.Join(l.TempDir(), "join.env")
	plugin(l, api, nil, "join", "--etcd-endpoints", strings.Join(cluster.Endpoints(), ","), "--name", "node-4",
		"--peer-urls", node4.PeerURL(), "--output", file)
	data, err := os.ReadFile(file)
	if err != nil {
		l.Fatalf("reading %s: %v", file, err)
	}
	fmt.Printf("\n$ cat join.env\n%s", indent(string(data)))
	node4.StartWithSettings(l, framework.ReadEnvFile(l, file))
	startNodeAgent(l, api, node4)
	fmt.Println("    node-4's etcd started with those settings, and its agent registered it")
	name := objectFor(l, api, node4.IDHex())
	show(l, api, "wait", resource+"/"+name, "--for=condition=Promoted", "--timeout=60s")
	plugin(l, api, nil, "list")

	step("Bringing node-2 back: data wiped, re-added to etcd, restarted")
	cluster.Rejoin(l, leaving, false)
	fmt.Printf("    node-2 is now member %s (was %s)\n", leaving.IDHex(), oldID)
	show(l, api, "wait", resource+"/node-2", "--for=jsonpath={.status.memberID}="+leaving.IDHex(), "--timeout=60s")
	show(l, api, "get", resource, "node-2", "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}) {.message}{"\n"}{end}`)

	step("A stale member: node-5 (no agent) is rebuilt at a new address, its old member stays behind")
	// etcd refuses any member add while a voter is down: the rebuilt node joins while the old
	// machine still runs, then the old machine goes for good.
	old := cluster.AddMember(l, "node-5", false)
	rebuilt := cluster.AddMemberAs(l, "node-5-rebuilt", "node-5", true)
	fmt.Printf("    node-5 was member %s at %s; rebuilt, it is member %s at %s\n", old.IDHex(), old.PeerURL(), rebuilt.IDHex(), rebuilt.PeerURL())
	waitFor(l, api, "the rebuilt node-5 promoted", func(items []v1alpha1.EtcdMember) bool {
		for _, m := range items {
			if m.Status.MemberID == rebuilt.IDHex() && !m.Status.IsLearner && isTrue(&m, v1alpha1.ConditionJoined) {
				return true
			}
		}
		return false
	})
	old.Stop(l)
	fmt.Println("    the old node-5 machine is gone")
	waitFor(l, api, "the old node-5 recorded unhealthy", func(items []v1alpha1.EtcdMember) bool {
		for _, m := range items {
			if m.Status.MemberID == old.IDHex() {
				c := condition(&m, v1alpha1.ConditionHealthy)
				return c != nil && c.Status == "False" && time.Since(c.LastTransitionTime.Time) > 3*time.Second
			}
		}
		return false
	})
	plugin(l, api, nil, "list")
	plugin(l, api, nil, "prune-stale", "--unreachable-for", "3s", "--dry-run")
	plugin(l, api, nil, "prune-stale", "--unreachable-for", "3s", "--yes")

	step("Deleting node-3's Node: with --leave-on-node-delete, kubectl delete node is the leave")
	show(l, api, "get", "nodes", "-o", "custom-columns=NAME:.metadata.name,FINALIZERS:.metadata.finalizers")
	show(l, api, "delete", "node", "node-3")
	fmt.Println("\n    kubectl delete node returned once etcd no longer listed node-3's member:")
	etcdctl(l, cluster, "member", "list", "-w", "table")
	show(l, api, "get", "events.events.k8s.io", "-n", "kube-system", "--field-selector", "regarding.name=node-3",
		"-o", "custom-columns=TYPE:.type,REASON:.reason,NOTE:.note")
	// A removed member's etcd exits by itself; the lab stops it in case it has not yet, so that
	// the listing below waits only for the members that stay.
	cluster.Member("node-3").Stop(l)

	step("Where things stand")
	waitHealthy(l, api, cluster)
	plugin(l, api, nil, "list", "-o", "wide", "--etcd-endpoints", strings.Join(cluster.Endpoints(), ","))
	etcdctl(l, cluster, "member", "list", "-w", "table")

	step("Cleaning up")
}

// nodeArgs are the agent flags of the lab: the member's Node, and deleting that Node removes the
// member.
func nodeArgs(m *framework.Member) []string {
	return []string{"--node-name=" + m.Name, "--leave-on-node-delete"}
}

// startNodeAgent registers m's Node, as its kubelet would, and starts m's agent bound to it.
func startNodeAgent(l *lab, api *framework.APIServer, m *framework.Member) {
	api.RegisterNode(l, m.Name)
	framework.StartAgent(l, m, api, nodeArgs(m)...)
}

// plugin runs `kubectl etcdmember ARGS...` through the real kubectl with the plugin on PATH and
// KUBECONFIG set, as an operator would, and prints it with its output (stderr's progress and
// stdout's data interleaved as a terminal shows them).
func plugin(l *lab, api *framework.APIServer, env []string, args ...string) {
	fmt.Printf("\n$ kubectl etcdmember %s\n", quoteArgs(args))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := api.PluginCommand(l, ctx, env, args...)
	out, err := cmd.CombinedOutput()
	fmt.Print(indent(string(out)))
	if err != nil {
		l.Fatalf("kubectl etcdmember %s: %v", strings.Join(args, " "), err)
	}
}

// waitHealthy waits until every object of a running member says Healthy=True, so that a listing
// does not show a member as down from a probe made before it came back.
func waitHealthy(l *lab, api *framework.APIServer, c *framework.Cluster) {
	running := map[string]bool{}
	for _, m := range c.Members() {
		if m.Running() {
			running[m.IDHex()] = true
		}
	}
	waitFor(l, api, "every running member Healthy=True", func(items []v1alpha1.EtcdMember) bool {
		healthy := 0
		for _, m := range items {
			if running[m.Status.MemberID] && isTrue(&m, v1alpha1.ConditionHealthy) {
				healthy++
			}
		}
		return healthy == len(running)
	})
}

func waitFor(l *lab, api *framework.APIServer, what string, ok func([]v1alpha1.EtcdMember) bool) {
	c := api.ObjectClient(l, 0)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var list v1alpha1.EtcdMemberList
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.List(ctx, &list)
		cancel()
		if err == nil && ok(list.Items) {
			return
		}
	}
	l.Fatalf("waiting for %s: not within a minute", what)
}

func condition(m *v1alpha1.EtcdMember, condType string) *metav1.Condition {
	return meta.FindStatusCondition(m.Status.Conditions, condType)
}

func isTrue(m *v1alpha1.EtcdMember, condType string) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, condType)
}

func step(title string) { fmt.Printf("\n==> %s\n", title) }

// objectFor returns the name of the object recording member id. A learner the leader saw before
// its agent registered it is discovered under another name, and keeps it.
func objectFor(l *lab, api *framework.APIServer, id string) string {
	query := fmt.Sprintf(`jsonpath={range .items[?(@.status.memberID=="%s")]}{.metadata.name}{end}`, id)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if name := api.MustKubectl(l, "get", resource, "-o", query); name != "" {
			return name
		}
	}
	l.Fatalf("no EtcdMember records member %s", id)
	return ""
}

// show prints a kubectl command the way an operator would type it, then its output.
func show(l *lab, api *framework.APIServer, args ...string) {
	fmt.Printf("\n$ kubectl %s\n", quoteArgs(args))
	fmt.Print(indent(api.MustKubectl(l, args...)))
}

func etcdctl(l *lab, c *framework.Cluster, args ...string) {
	fmt.Printf("\n$ etcdctl %s\n", quoteArgs(args))
	out, err := framework.Etcdctl(l, c, args...)
	if err != nil {
		l.Fatalf("%v\n%s", err, out)
	}
	fmt.Print(indent(out))
}

func quoteArgs(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, ` {}"'$`) {
			a = "'" + a + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}

// errFatal unwinds the demo from lab.Fatalf, as testing.T.FailNow does for tests.
var errFatal = errors.New("demo step failed")
