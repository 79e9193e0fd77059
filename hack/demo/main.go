// Command demo runs etcdmember's local lab: three etcd members on their own loopback addresses,
// a kube-apiserver on top, the CRD and three agents. It asks one member to leave, shows it gone
// from etcd with its object kept as history, joins a new member as a learner with `etcdmember
// join` and shows the leader promote it, brings the node that left back wiped and re-added, shows
// it re-joined under the same name with a new member ID, and cleans everything up.
//
// Run it with `make demo`, which builds the binaries first.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdmember/etcdmember/test/framework"
)

func main() {
	l := newLab()
	err := l.run(func() { demo(l) })
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

	step("Starting one etcdmember agent per member")
	agents := map[string]*framework.Agent{}
	for _, m := range cluster.Members() {
		agents[m.Name] = framework.StartAgent(l, m, api)
		fmt.Printf("    agent for %s registered its member\n", m.Name)
	}
	show(l, api, "get", "etcdmembers")
	etcdctl(l, cluster, "member", "list", "-w", "table")
	status(l, api, cluster)

	leaving := cluster.Member("node-2")
	oldID := leaving.IDHex()
	step("Asking node-2 to leave, then waiting for Joined=False")
	show(l, api, "patch", "etcdmember", "node-2", "--type", "merge", "-p", `{"spec":{"leave":true}}`)
	show(l, api, "wait", "etcdmember/node-2", "--for=condition=Joined=false", "--timeout=60s")
	etcdctl(l, cluster, "member", "list", "-w", "table")
	fmt.Println("\n    The object stays as history:")
	status(l, api, cluster)
	show(l, api, "get", "etcdmember", "node-2", "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}) {.message}{"\n"}{end}`)
	show(l, api, "get", "events.events.k8s.io", "-n", "kube-system", "--field-selector", "regarding.name=node-2",
		"-o", "custom-columns=TYPE:.type,REASON:.reason,NOTE:.note")

	step("Joining node-4: `etcdmember join` adds a learner and writes the settings its etcd needs")
	node4 := cluster.NewPendingMember(l, "node-4")
	settings := join(l, cluster, "node-4", node4.PeerURL())
	node4.StartWithSettings(l, framework.ReadEnvFile(l, settings))
	agents["node-4"] = framework.StartAgent(l, node4, api)
	fmt.Println("    node-4's etcd started with those settings, and its agent registered it")
	name := objectFor(l, api, node4.IDHex())
	show(l, api, "wait", "etcdmember/"+name, "--for=condition=Promoted", "--timeout=60s")
	show(l, api, "get", "etcdmember", name, "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}) {.message}{"\n"}{end}`)
	show(l, api, "get", "etcdmembers")

	step("Bringing node-2 back: data wiped, re-added to etcd, restarted")
	cluster.Rejoin(l, leaving, false)
	fmt.Printf("    node-2 is now member %s (was %s)\n", leaving.IDHex(), oldID)
	show(l, api, "wait", "etcdmember/node-2", "--for=jsonpath={.status.memberID}="+leaving.IDHex(), "--timeout=60s")
	show(l, api, "get", "etcdmembers")
	show(l, api, "get", "etcdmember", "node-2", "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}) {.message}{"\n"}{end}`)
	status(l, api, cluster)

	step("Cleaning up")
}

func step(title string) { fmt.Printf("\n==> %s\n", title) }

// join runs `etcdmember join` the way an operator on the new node would, prints the settings file
// it wrote, and returns its path.
func join(l *lab, c *framework.Cluster, name, peerURL string) string {
	file := filepath.Join(l.TempDir(), "join.env")
	endpoints := strings.Join(c.Endpoints(), ",")
	fmt.Printf("\n$ etcdmember join --etcd-endpoints %s --name %s --peer-urls %s --output join.env\n", endpoints, name, peerURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, framework.Binary(l, "etcdmember"), "join", "--etcd-endpoints", endpoints,
		"--name", name, "--peer-urls", peerURL, "--output", file).CombinedOutput()
	if err != nil {
		l.Fatalf("etcdmember join: %v\n%s", err, out)
	}
	fmt.Print(indent(string(out)))
	data, err := os.ReadFile(file)
	if err != nil {
		l.Fatalf("reading %s: %v", file, err)
	}
	fmt.Printf("\n$ cat join.env\n%s", indent(string(data)))
	return file
}

// objectFor returns the name of the object recording member id. A learner the leader saw before
// its agent registered it is discovered under another name, and keeps it.
func objectFor(l *lab, api *framework.APIServer, id string) string {
	query := fmt.Sprintf(`jsonpath={range .items[?(@.status.memberID=="%s")]}{.metadata.name}{end}`, id)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if name := api.MustKubectl(l, "get", "etcdmembers", "-o", query); name != "" {
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

// status runs `etcdmember status`, which joins the objects with live etcd, the way an operator
// with KUBECONFIG set would.
func status(l *lab, api *framework.APIServer, c *framework.Cluster) {
	endpoints := strings.Join(c.Endpoints(), ",")
	fmt.Printf("\n$ etcdmember status --etcd-endpoints %s\n", endpoints)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.Binary(l, "etcdmember"), "status", "--etcd-endpoints", endpoints)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+api.Kubeconfig())
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.Fatalf("etcdmember status: %v\n%s", err, out)
	}
	fmt.Print(indent(string(out)))
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
