package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The node tier's namespace. A kubelet refuses a loopback node IP, and tests here may reach only
// loopback addresses or addresses inside network namespaces they made themselves; a kubelet also
// writes to fixed host paths. So a node tier test binary runs itself again in a network and mount
// namespace of its own (RunInNodeNamespace): every process it starts (etcd, the apiserver, the
// controllers, containerd, the kubelets and their hostNetwork pods) lives there, on a veth
// interface that carries the tier's addresses, and the host's /etc, /var and /run are overlaid so
// that what those processes write there stays in the namespace.

const (
	// nodeNamespaceEnv marks the test binary that runs inside the tier's namespaces, and holds the
	// directory of its overlays' upper layers.
	nodeNamespaceEnv = "ETCDMEMBER_NODE_NAMESPACE"
	// nodeLink is the veth end that carries the tier's addresses; its peer stays in the namespace.
	nodeLink, nodeLinkPeer = "etm0", "etm1"
	// nodeSubnet is the tier's address range: on the namespace's interface only, never on the host.
	nodeSubnet = "172.29.0.0/16"
)

// overlaidDirs are the host directories a kubelet, containerd and the CNI plugins write to where
// no flag moves them.
var overlaidDirs = []string{"/etc", "/var", "/run"}

// RunInNodeNamespace runs a node tier test binary's tests (m.Run) in a network and mount
// namespace of their own, and restores the host afterwards; call it from TestMain and exit with
// its result. Outside the namespace it needs root; it takes the machine's node tier lock, restores
// what an earlier killed run left, records the host's state, runs the binary again inside fresh
// namespaces, then restores and checks the host (RestoreHost), failing the run when anything
// differs. pkg names the package in the line on its slowest etcd request
// (ReportSlowestEtcdRequest).
func RunInNodeNamespace(m interface{ Run() int }, pkg string) int {
	if dir := os.Getenv(nodeNamespaceEnv); dir != "" {
		if err := setUpNodeNamespace(dir); err != nil {
			fmt.Fprintf(os.Stderr, "node tier namespace: %v\n", err)
			return 1
		}
		code := m.Run()
		ReportSlowestEtcdRequest(pkg)
		return code
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the node tier runs kubelets and containerd: it needs root (make test runs as root in CI)")
		return 1
	}
	before, err := prepareHost()
	if err != nil {
		fmt.Fprintf(os.Stderr, "node tier: %v\n", err)
		return 1
	}
	defer unlockNodeTier()
	upper, err := os.MkdirTemp("", "etcdmember-node-ns-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "node tier: %v\n", err)
		return 1
	}
	code := runInNamespace(upper)
	restored := RestoreHost(before)
	// Only now: a process the run left behind could still use the overlays until RestoreHost.
	if err := os.RemoveAll(upper); err != nil {
		fmt.Fprintf(os.Stderr, "node tier: %v\n", err)
		return 1
	}
	if err := restored; err != nil {
		fmt.Fprintf(os.Stderr, "--- FAIL: node tier host restore\n%v\n", err)
		return 1
	}
	if err := os.Remove(hostRecord()); err != nil {
		fmt.Fprintf(os.Stderr, "node tier: %v\n", err)
		return 1
	}
	return code
}

// prepareHost takes the lock, recovers from a killed run and records the host's state.
func prepareHost() (*HostState, error) {
	if err := lockNodeTier(); err != nil {
		return nil, fmt.Errorf("taking the node tier lock in %s: %w", nodeStateDir, err)
	}
	if err := RecoverKilledRun(); err != nil {
		return nil, err
	}
	before, err := ReadHostState()
	if err != nil {
		return nil, err
	}
	return before, recordHost(before)
}

// runInNamespace runs this binary again with the same arguments in new network and mount
// namespaces, their overlays' upper layers under upper, forwarding SIGINT and SIGTERM so that its
// cleanups run, and returns its exit code.
func runInNamespace(upper string) int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), nodeNamespaceEnv+"="+upper)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "node tier: starting the tests in new namespaces: %v\n", err)
		return 1
	}
	go func() {
		for sig := range signals {
			_ = cmd.Process.Signal(sig) // it may have exited meanwhile
		}
	}()
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() > 0 {
			return exit.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "node tier: the tests in their namespaces: %v\n", err)
		return 1
	}
	return 0
}

// setUpNodeNamespace runs first in the namespaced binary: mounts stay private to it, /etc, /var
// and /run get an overlay whose upper layer is under upper, loopback comes up, and the veth pair
// carries the tier's subnet with a default route (the "kubernetes" Service's ClusterIP needs a
// route before kube-proxy rewrites it).
func setUpNodeNamespace(upper string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	for _, dir := range overlaidDirs {
		u := filepath.Join(upper, strings.TrimPrefix(dir, "/"))
		for _, d := range []string{u + "/upper", u + "/work"} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", dir, u, u)
		if err := syscall.Mount("overlay", dir, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay on %s: %w", dir, err)
		}
	}
	_, subnet, _ := net.ParseCIDR(nodeSubnet)
	gateway := nextIP(subnet.IP)
	ones, _ := subnet.Mask.Size()
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", nodeLink, "type", "veth", "peer", "name", nodeLinkPeer},
		{"link", "set", nodeLink, "up"},
		{"link", "set", nodeLinkPeer, "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", gateway, ones), "dev", nodeLink},
		{"route", "add", "default", "dev", nodeLink},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// InNodeNamespace tells whether this process runs in the node tier's namespaces.
func InNodeNamespace() bool { return os.Getenv(nodeNamespaceEnv) != "" }

var nodeAddresses = struct {
	sync.Mutex
	next net.IP
}{}

// NodeAddress adds a fresh address of the tier's subnet to its interface and returns it: a node's
// address, an etcd member's, the apiserver's. Addresses are never reused within a run.
func NodeAddress(t TB) string {
	t.Helper()
	if !InNodeNamespace() {
		t.Fatalf("NodeAddress: not in the node tier's namespace; call framework.RunInNodeNamespace from TestMain")
	}
	ip := nextNodeAddress()
	if out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", nodeLink).CombinedOutput(); err != nil {
		t.Fatalf("adding %s to %s: %v: %s", ip, nodeLink, err, out)
	}
	return ip
}

// nextNodeAddress hands out the next address of the tier's subnet.
func nextNodeAddress() string {
	nodeAddresses.Lock()
	defer nodeAddresses.Unlock()
	if nodeAddresses.next == nil {
		_, subnet, _ := net.ParseCIDR(nodeSubnet)
		nodeAddresses.next = nextIP(nextIP(subnet.IP)) // the first host address is the interface's own
	}
	ip := nodeAddresses.next
	nodeAddresses.next = nextIP(ip)
	return ip.String()
}

func nextIP(ip net.IP) net.IP {
	next := append(net.IP(nil), ip.To4()...)
	for i := len(next) - 1; i >= 0; i-- {
		next[i]++
		if next[i] != 0 {
			break
		}
	}
	return next
}

// NodeNamespaces are a network and a mount namespace of one node's own inside the tier, as kind
// gives each node a container: a second kubelet needs its own containerd (two kubelets on one
// kill each other's pods), its own fixed host paths and its own loopback (every agent pod binds
// 127.0.0.1:9470). A holder process (bin/pause) keeps them; the node's processes, its etcd member
// included, start inside them (Command). The node's address is on its own interface, a veth whose
// other end is in the tier's namespace, which routes between the nodes, the apiserver and the
// controllers.
type NodeNamespaces struct {
	IP     string
	holder *process
	pid    int
	// private maps each of NodeOptions.Private to the test's directory mounted on it.
	private map[string]string
}

// NodeOptions are what a node's namespaces hold of their own besides /var and /run.
type NodeOptions struct {
	// Private are directories the node has its own of, empty at first, where a program writes at
	// fixed paths that the tier's overlays share between nodes or put on overlayfs (kubeadm's
	// /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd). Each is a directory of the test's,
	// bind-mounted on the path in the node's mount namespace, and read from the tier at HostPath.
	Private []string
	// Name, when set, is the node's hostname (its UTS namespace is its own either way) and its
	// name in an /etc/hosts of its own, at its address: kubeadm's preflight looks the node's name
	// up.
	Name string
}

// nodeLinks numbers the veth ends the tier's namespace holds, one per NodeNamespaces.
var nodeLinks = struct {
	sync.Mutex
	n int
}{}

// NewNodeNamespaces makes a node's namespaces with a fresh address of the tier's subnet on its
// interface, /var and /run overlaid once more (the kubelet's fixed paths are the node's own), and
// a default route to the tier. They go when the holder is killed at t's cleanup and the node's
// processes are gone.
func NewNodeNamespaces(t TB) *NodeNamespaces {
	t.Helper()
	return NewNodeNamespacesWith(t, NodeOptions{})
}

// NewNodeNamespacesWith makes a node's namespaces as NewNodeNamespaces does, with the directories
// and the name of its own that o gives.
func NewNodeNamespacesWith(t TB, o NodeOptions) *NodeNamespaces {
	t.Helper()
	if !InNodeNamespace() {
		t.Fatalf("NewNodeNamespaces: not in the node tier's namespace; call framework.RunInNodeNamespace from TestMain")
	}
	ns := &NodeNamespaces{IP: nextNodeAddress()}
	dir := t.TempDir()
	ns.holder = newProcess(t, "namespaces of "+ns.IP, filepath.Join(dir, "holder.log"))
	if err := ns.holder.start("unshare", "--net", "--mount", "--uts", "--propagation", "private", Binary(t, "pause")); err != nil {
		t.Fatalf("%v", err)
	}
	ns.pid = ns.holder.cmd.Process.Pid
	// unshare execs the holder once the namespaces exist; until then /proc/<pid>/ns names the
	// tier's own.
	own, _ := os.Readlink("/proc/self/ns/net")
	if err := Poll(10*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", ns.pid))
		return err == nil && theirs != own, nil
	}); err != nil {
		t.Fatalf("the namespaces of %s did not appear: %v", ns.IP, err)
	}
	nodeLinks.Lock()
	nodeLinks.n++
	link := fmt.Sprintf("etn%d", nodeLinks.n)
	nodeLinks.Unlock()
	_, subnet, _ := net.ParseCIDR(nodeSubnet)
	gateway := nextIP(subnet.IP).String()
	for _, step := range [][]string{
		{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(ns.pid)},
		{"ip", "link", "set", link, "up"},
		{"ip", "route", "add", ns.IP + "/32", "dev", link},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		runStep(t, step)
	}
	for _, step := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "addr", "add", ns.IP + "/32", "dev", "eth0"},
		{"ip", "route", "add", gateway + "/32", "dev", "eth0"},
		{"ip", "route", "add", "default", "via", gateway, "dev", "eth0"},
	} {
		runStep(t, append(ns.Command(), step...))
	}
	for _, d := range []string{"/var", "/run"} {
		u := filepath.Join(dir, strings.TrimPrefix(d, "/"))
		for _, sub := range []string{u + "/upper", u + "/work"} {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatalf("%v", err)
			}
		}
		runStep(t, append(ns.Command(), "mount", "-t", "overlay", "overlay", "-o",
			fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", d, u, u), d))
	}
	ns.private = map[string]string{}
	for _, p := range o.Private {
		src := filepath.Join(dir, "private", strings.TrimPrefix(p, "/"))
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
		runStep(t, append(ns.Command(), "mkdir", "-p", p))
		runStep(t, append(ns.Command(), "mount", "--bind", src, p))
		ns.private[p] = src
	}
	if o.Name != "" {
		// A machine's hostname is its own: kube-apiserver names its identity Lease after it
		// (apiserver-<hash of the hostname>), and three apiservers under one hostname fight over
		// one Lease ("Failed to update lease ... the object has been modified" every 10 s).
		runStep(t, append(ns.Command(), "hostname", o.Name))
		hosts := filepath.Join(dir, "hosts")
		content := "127.0.0.1 localhost\n" + ns.IP + " " + o.Name + "\n"
		if err := os.WriteFile(hosts, []byte(content), 0o644); err != nil {
			t.Fatalf("%v", err)
		}
		runStep(t, append(ns.Command(), "mount", "--bind", hosts, "/etc/hosts"))
	}
	return ns
}

// HostPath is where the tier reads path of the node's: in the directory of the test's that is
// mounted on one of NodeOptions.Private. It fails t for a path in no private directory.
func (ns *NodeNamespaces) HostPath(t TB, path string) string {
	t.Helper()
	for p, src := range ns.private {
		if path == p || strings.HasPrefix(path, p+"/") {
			return filepath.Join(src, strings.TrimPrefix(path, p))
		}
	}
	t.Fatalf("%s is in none of the private directories of node %s", path, ns.IP)
	return ""
}

// Run runs argv in the node's namespaces to its end and returns its output, stdout and stderr
// together.
func (ns *NodeNamespaces) Run(ctx context.Context, argv ...string) (string, error) {
	cmd := append(ns.Command(), argv...)
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on node %s: %w", strings.Join(argv, " "), ns.IP, err)
	}
	return string(out), nil
}

// Command is the prefix that runs a program in the node's namespaces: nsenter execs it there, so
// the process the framework signals and waits for is the program itself.
func (ns *NodeNamespaces) Command() []string {
	return []string{"nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", ns.pid), fmt.Sprintf("--mount=/proc/%d/ns/mnt", ns.pid),
		fmt.Sprintf("--uts=/proc/%d/ns/uts", ns.pid), "--"}
}

func runStep(t TB, step []string) {
	t.Helper()
	if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(step, " "), err, out)
	}
}
