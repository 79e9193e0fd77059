package kubeadm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	// criSocket is kubeadm's default containerd address; each node has its own /run.
	criSocket = "unix:///run/containerd/containerd.sock"
	// sandboxImage is the pause image kubeadm v1.37 names (PauseVersion): it warns when
	// containerd runs another.
	sandboxImage = "registry.k8s.io/pause:3.10.2"
	// kubeadmTimeout bounds one kubeadm command: its own waits are 4 minutes for the kubelet and
	// the control plane, 2 for etcd.
	kubeadmTimeout = 6 * time.Minute
)

// privateDirs are where kubeadm, the kubelet and etcd write at fixed paths: each node has its own,
// on the test's disk, readable from the tier (HostPath) for a failure's logs.
var privateDirs = []string{"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/var/log/pods",
	// The static pod agent's kubeconfig (docs/runbooks.md, "Install on kubeadm").
	"/etc/etcdmember"}

// Node is one control-plane machine: namespaces of its own, its own containerd holding the images
// kubeadm's manifests name and the agent's, and a kubelet that the harness starts from the files
// kubeadm writes, as the kubelet's systemd unit and kubeadm's drop-in would. kubeadm runs in the
// node's namespaces, as an operator runs it on the machine.
type Node struct {
	Name string
	IP   string
	// AgentImage is the image of make image, as imported into the node's containerd.
	AgentImage string
	// EtcdImageTags are the tags of the etcd images the node holds (make kubeadmbin), oldest
	// first: the tier starts on the first and upgrades to the last.
	EtcdImageTags []string

	// owner is the test of NewNode: the node's processes live as long as it does, whichever task
	// started them.
	owner      framework.TB
	ns         *framework.NodeNamespaces
	dir        string
	cgroup     string
	containerd *framework.Containerd
	// runtime starts containerd again on a rebuilt machine (Rebuild).
	runtime framework.ContainerdOptions

	mu      sync.Mutex
	kubelet *framework.Process
	proxy   *framework.Process
}

// NewNode makes a machine named name with containerd running and every image imported; the
// kubelet starts when kubeadm has configured it (Kubeadm). Everything is stopped and removed at
// t's cleanup.
func NewNode(t framework.TB, name string) *Node {
	t.Helper()
	ns := framework.NewNodeNamespacesWith(t, framework.NodeOptions{Private: privateDirs, Name: name})
	n := &Node{Name: name, IP: ns.IP, owner: t, ns: ns, dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// kubeadm's preflight requires forwarding; the setting is the node's network namespace's.
	if out, err := ns.Run(ctx, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	n.cgroup = framework.NodeCgroup(t, name)
	// Registered before the processes start, so it runs after their own cleanups have killed them
	// and printed their logs.
	t.Cleanup(func() {
		n.noteSlowEtcdRequests(t)
		if err := n.tearDown(); err != nil {
			t.Logf("node %s cleanup: %v", name, err)
		}
		if t.Failed() {
			t.Logf("node %s: kubeadm's output and the static pods' logs:\n%s", name, n.logs(t, framework.LogTailLines))
		}
	})
	n.runtime = framework.ContainerdOptions{Node: name, Dir: n.dir,
		Run: "/run/containerd", Socket: strings.TrimPrefix(criSocket, "unix://"), SandboxImage: sandboxImage, Namespaces: ns}
	n.containerd = framework.StartContainerd(t, n.runtime)
	n.importImages(t)
	return n
}

// importImages loads the control plane's images and the agent's; kubeadm's manifests pull
// IfNotPresent and the tier's configuration Never, so nothing is pulled.
func (n *Node) importImages(t framework.TB) {
	t.Helper()
	tars, err := filepath.Glob(filepath.Join(framework.BinDir(), "kubeadm-images", "*.tar"))
	if err != nil || len(tars) == 0 {
		t.Fatalf("no images in bin/kubeadm-images: run \"make kubeadmbin\"")
	}
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatalf("cannot find the repository root above the working directory")
	}
	agentTar := filepath.Join(root, "dist", "image_linux_"+runtime.GOARCH+".tar")
	if _, err := os.Stat(agentTar); err != nil {
		t.Fatalf("the agent image %s is missing: run \"make image\"", agentTar)
	}
	for _, ref := range n.containerd.Import(t, append(tars, agentTar)...) {
		switch {
		case strings.Contains(ref, "/kubectl-etcdmember:"):
			n.AgentImage = ref
		case strings.HasPrefix(ref, "registry.k8s.io/etcd:"):
			n.EtcdImageTags = append(n.EtcdImageTags, strings.TrimPrefix(ref, "registry.k8s.io/etcd:"))
		}
	}
	if n.AgentImage == "" || len(n.EtcdImageTags) < 2 {
		t.Fatalf("node %s: after importing %v, the agent image is %q and etcd's tags %v; want the agent's and two etcd versions to upgrade between: run \"make image kubeadmbin\"",
			n.Name, append(tars, agentTar), n.AgentImage, n.EtcdImageTags)
	}
	versions := map[string]*version.Version{}
	for _, tag := range n.EtcdImageTags {
		v, err := version.ParseGeneric(tag)
		if err != nil {
			t.Fatalf("node %s: etcd image tag %q: %v", n.Name, tag, err)
		}
		versions[tag] = v
	}
	slices.SortFunc(n.EtcdImageTags, func(a, b string) int {
		switch {
		case versions[a].LessThan(versions[b]):
			return -1
		case versions[b].LessThan(versions[a]):
			return 1
		}
		return 0
	})
}

// HostPath is where the tier reads one of the node's files under its private directories.
func (n *Node) HostPath(t framework.TB, path string) string {
	t.Helper()
	return n.ns.HostPath(t, path)
}

// Kubeadm runs `kubeadm args...` on the node to its end, its output appended to the node's
// kubeadm.log, and returns that output. It also does what kubeadm asks of the init system
// (systemd is installed here, but not running, so kubeadm only warns): during init and join it
// starts the kubelet once kubeadm has written its configuration, and again whenever it exits, as
// the kubelet's unit does with Restart=always; during reset it stops the kubelet, and kube-proxy
// with it, within 200 ms of kubeadm saying it stops the kubelet service. kubeadm does not wait
// for that before it removes the containers: Containers tells whether the kubelet started one
// again meanwhile.
func (n *Node) Kubeadm(t framework.TB, args ...string) (string, error) {
	t.Helper()
	out, _, err := n.kubeadm(t, args...)
	return out, err
}

// kubeadm is Kubeadm that also returns what kubeadm wrote to its standard output alone: a
// command's product (a kubeconfig), without the warnings it writes to standard error.
func (n *Node) kubeadm(t framework.TB, args ...string) (combined, stdout string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubeadmTimeout)
	defer cancel()
	argv := append(n.ns.Command(), "env", "PATH="+framework.BinDir()+":"+os.Getenv("PATH"),
		framework.Binary(t, "kubeadm"))
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var all framework.LockedBuffer
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&all, &out), &all
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("kubeadm on %s: %w", n.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(200 * time.Millisecond):
			switch {
			case len(args) > 0 && (args[0] == "init" || args[0] == "join"):
				n.startKubeletWhenConfigured(t)
			case len(args) > 0 && args[0] == "reset" && strings.Contains(all.String(), resetStopsKubelet):
				n.stopServices(t)
			}
		}
	}
	combined = all.String()
	n.log(t, "kubeadm "+strings.Join(args, " "), combined)
	if err != nil {
		return combined, out.String(), fmt.Errorf("kubeadm %s on %s: %w (its output: %s)", strings.Join(args, " "), n.Name,
			err, filepath.Join(n.dir, "kubeadm.log"))
	}
	return combined, out.String(), nil
}

// MustKubeadm is Kubeadm that fails t when kubeadm does.
func (n *Node) MustKubeadm(t framework.TB, args ...string) string {
	t.Helper()
	out, err := n.Kubeadm(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// AgentCredential writes the static pod agent's kubeconfig, /etc/etcdmember/kubeconfig, as
// docs/runbooks.md makes it ("Install on kubeadm", step 2) and renews it: `kubeadm kubeconfig user
// --client-name=etcdmember-agent-<node> --org=<group>`, its standard output into a file only root
// reads, written beside the old one and renamed over it.
func (n *Node) AgentCredential(t framework.TB, group string) {
	t.Helper()
	_, kubeconfig, err := n.kubeadm(t, "kubeconfig", "user", "--client-name=etcdmember-agent-"+n.Name, "--org="+group)
	if err != nil {
		t.Fatalf("%v", err)
	}
	path := n.HostPath(t, "/etc/etcdmember/kubeconfig")
	if err := os.WriteFile(path+".new", []byte(kubeconfig), 0o600); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
}

// Run runs argv on the machine, in its namespaces, as an operator's shell there would, and
// returns its combined output.
func (n *Node) Run(t framework.TB, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.ns.Run(ctx, argv...)
}

// Containers are the IDs of the containers the node's containerd holds for the kubelet, running
// or not: none once kubeadm reset has cleaned the machine.
func (n *Node) Containers(t framework.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := n.containerd.Ctr(ctx, t, "containers", "ls", "-q")
	if err != nil {
		t.Fatalf("node %s: %v\n%s", n.Name, err, out)
	}
	// ctr's own warnings (cgroup v1's deprecation) come on the same output, as logfmt lines.
	var ids []string
	for line := range strings.SplitSeq(out, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "time=") {
			ids = append(ids, line)
		}
	}
	return ids
}

func (n *Node) log(t framework.TB, what, out string) {
	f, err := os.OpenFile(filepath.Join(n.dir, "kubeadm.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Logf("node %s: %v", n.Name, err)
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(f, "=== %s %s\n%s", time.Now().Format(time.RFC3339Nano), what, out)
}

// resetStopsKubelet is what kubeadm reset prints as it asks the init system to stop the kubelet.
const resetStopsKubelet = "[reset] Stopping the kubelet service"

// stopServices stops the kubelet and kube-proxy, as a machine's init system would stop the
// kubelet and kubeadm reset's removal of every container would end a kube-proxy pod.
func (n *Node) stopServices(t framework.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range []*framework.Process{n.kubelet, n.proxy} {
		if p != nil && p.Exited() == nil {
			if err := p.Stop(); err != nil {
				t.Logf("node %s: %v", n.Name, err)
			}
		}
	}
}

// StopKubelet stops the node's kubelet, as `systemctl stop kubelet` would: the containers it
// started keep running, and nothing starts one again once it exits.
func (n *Node) StopKubelet(t framework.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubelet != nil && n.kubelet.Exited() == nil {
		if err := n.kubelet.Stop(); err != nil {
			t.Fatalf("node %s: stopping the kubelet: %v", n.Name, err)
		}
	}
}

// kubeletFlagsFile is where kubeadm writes the flags of this node's kubelet (KUBELET_KUBEADM_ARGS).
const kubeletFlagsFile = "/var/lib/kubelet/kubeadm-flags.env"

// startKubeletWhenConfigured starts the kubelet once kubeadm has written its configuration and
// flags, unless it runs: what `systemctl restart kubelet` does in kubeadm's kubelet-start phase. A
// kubelet that read a file kubeadm was still writing exits, and starts again here.
func (n *Node) startKubeletWhenConfigured(t framework.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubelet != nil && n.kubelet.Exited() == nil {
		return
	}
	flags, err := kubeadmFlags(n.ns.HostPath(t, kubeletFlagsFile))
	if err != nil {
		return // not written yet
	}
	if _, err := os.Stat(n.ns.HostPath(t, "/var/lib/kubelet/config.yaml")); err != nil {
		return
	}
	// The flags of kubeadm's systemd drop-in (10-kubeadm.conf), and the node's own cgroup: the
	// cluster-wide KubeletConfiguration cannot give each node its own.
	argv := append([]string{framework.Binary(t, "kubelet"),
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml", "--cgroup-root=/" + n.cgroup}, flags...)
	if n.kubelet == nil {
		n.kubelet = n.ns.Start(n.machine(t), "kubelet "+n.Name, filepath.Join(n.dir, "kubelet.log"), argv...)
		return
	}
	if err := n.kubelet.Restart(); err != nil {
		t.Logf("node %s: restarting the kubelet: %v", n.Name, err)
	}
}

// kubeadmFlags reads KUBELET_KUBEADM_ARGS="..." from kubeadm-flags.env: flags without spaces in
// their values, which is all kubeadm writes.
func kubeadmFlags(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "KUBELET_KUBEADM_ARGS="); ok {
			return strings.Fields(strings.Trim(v, `"`)), nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no KUBELET_KUBEADM_ARGS", path)
}

// logs are the last lines of kubeadm's output on the node and of every container's log the
// kubelet kept (etcd, the control plane, the agent), as kinder keeps each node's logs when a task
// fails.
func (n *Node) logs(t framework.TB, lines int) string {
	var b strings.Builder
	b.WriteString(framework.LogTail("kubeadm "+n.Name, filepath.Join(n.dir, "kubeadm.log"), lines))
	pods := n.HostPath(t, "/var/log/pods")
	_ = filepath.WalkDir(pods, func(path string, d fs.DirEntry, err error) error {
		// A log the kubelet removed meanwhile is skipped: the dump goes on.
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(pods, path)
		b.WriteString(framework.LogTail(n.Name+" "+rel, path, lines))
		return nil
	})
	return b.String()
}

// StartProxy runs the node's kube-proxy as a process of the node, with kubeconfig: kubeadm's
// kube-proxy addon is skipped (proxy.disabled), since its image would need nftables' libraries.
// It routes the "kubernetes" Service, through which the agent pods reach the API.
func (n *Node) StartProxy(t framework.TB, kubeconfig string) {
	t.Helper()
	path := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(framework.KubeProxyConfig(kubeconfig, n.Name, n.IP)), 0o644); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.proxy = n.ns.Start(n.machine(t), "kube-proxy "+n.Name, filepath.Join(n.dir, "kube-proxy.log"), framework.Binary(t, "kube-proxy"), "--config="+path)
}

// noteSlowEtcdRequests keeps the slowest request of the node's etcd member, from its static pod's
// container logs, as the framework keeps its own members'.
func (n *Node) noteSlowEtcdRequests(t framework.TB) {
	logs, _ := filepath.Glob(filepath.Join(n.ns.HostPath(t, "/var/log/pods"), "kube-system_etcd-*", "etcd", "*.log"))
	for _, path := range logs {
		framework.NoteSlowEtcdRequests(t.Name(), n.Name, path)
	}
}

// Die stops the machine as a power loss would: the kubelet, kube-proxy, every container (etcd and
// the control plane among them) and containerd, all killed. Its Node and its etcd member stay,
// as a dead machine's do.
func (n *Node) Die(t framework.TB) {
	t.Helper()
	if err := n.kill(); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
}

// Rebuild makes the dead machine anew under its name and address, as a replacement server would
// come: nothing left of what kubeadm, the kubelet, etcd and containerd wrote, containerd running
// again with the images imported. `kubeadm join` then configures it.
func (n *Node) Rebuild(t framework.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The kubelet's volumes and containerd's rootfs and shm mounts are in the node's mount
	// namespace, and go before the directories under them do.
	root := filepath.Join(n.dir, "containerd")
	unmount := fmt.Sprintf(`findmnt -rn -o TARGET | grep -e '^/var/lib/kubelet/' -e '^%s/' -e '^%s/' | sort -r | xargs -r -n1 umount -l`,
		n.runtime.Run, root)
	if out, err := n.ns.Run(ctx, "sh", "-c", unmount); err != nil {
		t.Fatalf("node %s: unmounting what the dead machine mounted: %v\n%s", n.Name, err, out)
	}
	// Old containers in containerd would be the new kubelet's to take over: a DaemonSet pod that
	// outlived its deleted Node would count a restart.
	if out, err := n.ns.Run(ctx, "rm", "-rf", root, n.runtime.Run); err != nil {
		t.Fatalf("node %s: wiping containerd's state: %v\n%s", n.Name, err, out)
	}
	for _, dir := range privateDirs {
		host := n.HostPath(t, dir)
		entries, err := os.ReadDir(host)
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(host, e.Name())); err != nil {
				t.Fatalf("node %s: wiping %s: %v", n.Name, dir, err)
			}
		}
	}
	n.containerd = framework.StartContainerd(n.machine(t), n.runtime)
	n.importImages(t)
}

// machine is t for starting one of the node's processes: a failure to start fails t, while the
// process lives, and its log is kept, as long as the node.
func (n *Node) machine(t framework.TB) framework.TB { return machineTB{TB: n.owner, caller: t} }

type machineTB struct {
	framework.TB // the node's owner: Cleanup, Logf and Failed at its end
	caller       framework.TB
}

func (m machineTB) Helper() { m.caller.Helper() }

func (m machineTB) Fatalf(format string, args ...any) {
	m.caller.Helper()
	m.caller.Fatalf(format, args...)
}

// tearDown kills what is left of the node, and removes its cgroup. The namespaces go with the
// holder.
func (n *Node) tearDown() error {
	return errors.Join(n.kill(), framework.RemoveNodeCgroup(n.cgroup))
}

// kill kills the kubelet first, so that it restarts nothing, then kube-proxy, the containers and
// containerd.
func (n *Node) kill() error {
	var errs []error
	n.mu.Lock()
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.Kill())
	}
	if n.proxy != nil {
		errs = append(errs, n.proxy.Kill())
	}
	n.mu.Unlock()
	if n.containerd != nil {
		n.containerd.KillContainers(n.cgroup)
		errs = append(errs, n.containerd.Kill())
	}
	return errors.Join(errs...)
}
