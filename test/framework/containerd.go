package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Containerd is one node's container runtime: containerd with runc and the CNI plugins, started in
// the node's namespaces, and the images it runs, imported from files (there is no registry). Two
// kubelets never share one: each removes the pods it does not know, and kubeadm reset removes
// every sandbox on its socket.
type Containerd struct {
	// Socket is containerd's address, as the node's own processes see it.
	Socket string

	name    string
	command []string // the prefix that runs a program in the node's namespaces
	// mountNS is the node's mount namespace (readlink of /proc/<pid>/ns/mnt), "" for the tier's:
	// containerd and its shims run in it, and nodes of their own may use one socket path.
	mountNS string
	proc    *process
}

// ContainerdOptions place one node's containerd.
type ContainerdOptions struct {
	// Node names it in logs and errors.
	Node string
	// Dir holds its configuration, CNI configuration, log and root (images and snapshots). It
	// must not be on overlayfs: the overlayfs snapshotter cannot put its upper directories there.
	Dir string
	// Run holds its state and runc's; Socket is its address. Both are paths in the node's mount
	// namespace.
	Run, Socket string
	// SandboxImage is the pause image containerd pins and runs every pod's sandbox from; it must
	// be among the images imported.
	SandboxImage string
	// Namespaces runs it in a node's own namespaces; nil: the tier's.
	Namespaces *NodeNamespaces
}

// StartContainerd starts a node's containerd and returns once it serves. It is killed at t's
// cleanup; its containers are not (KillContainers).
func StartContainerd(t TB, o ContainerdOptions) *Containerd {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("runc not found: run \"make nodebin\" (it installs Debian's runc): %v", err)
	}
	if _, err := os.Stat("/usr/lib/cni/loopback"); err != nil {
		t.Fatalf("the CNI plugins are not in /usr/lib/cni: run \"make nodebin\" (Debian's containernetworking-plugins): %v", err)
	}
	c := &Containerd{Socket: o.Socket, name: "containerd " + o.Node}
	if o.Namespaces != nil {
		c.command = o.Namespaces.Command()
		if c.mountNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", o.Namespaces.pid)); err != nil {
			t.Fatalf("node %s: %v", o.Node, err)
		}
	}
	cni := filepath.Join(o.Dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		t.Fatalf("node %s: %v", o.Node, err)
	}
	// A CNI config must exist though every pod here is hostNetwork: containerd reports the
	// network ready only with one, and a Node that is not Ready keeps a taint the DaemonSet's pods
	// do not tolerate.
	if err := os.WriteFile(filepath.Join(cni, "10-lo.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"lo","plugins":[{"type":"loopback"}]}`), 0o644); err != nil {
		t.Fatalf("node %s: %v", o.Node, err)
	}
	runStep(t, c.in("mkdir", "-p", o.Run, filepath.Dir(o.Socket)))
	config := fmt.Sprintf(containerdConfig, filepath.Join(o.Dir, "containerd"), o.Run, o.Socket, o.SandboxImage,
		runc, filepath.Join(o.Run, "runc"), cni)
	path := filepath.Join(o.Dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatalf("node %s: %v", o.Node, err)
	}
	c.proc = newProcess(t, c.name, filepath.Join(o.Dir, "containerd.log"))
	// containerd finds its shim on PATH.
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatalf("env(1): %v", err)
	}
	argv := c.in(env, "PATH="+BinDir()+":"+os.Getenv("PATH"), Binary(t, "containerd"), "--config", path)
	if err := c.proc.start(argv[0], argv[1:]...); err != nil {
		t.Fatalf("%v", err)
	}
	c.proc.waitReady(t, 30*time.Second, "containerd not serving at "+c.Socket, func(ctx context.Context) error {
		_, err := c.Ctr(ctx, t, "version")
		return err
	})
	return c
}

// containerdConfig: restrict_oom_score_adj because root on these machines lacks CAP_SYS_RESOURCE
// (without it every sandbox fails in runc), NRI off, the cgroupfs driver.
const containerdConfig = `version = 3
root = %q
state = "%s/state"
[grpc]
  address = %q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %q
`

// Ctr runs ctr against this containerd, in the kubelet's namespace (k8s.io).
func (c *Containerd) Ctr(ctx context.Context, t TB, args ...string) (string, error) {
	argv := c.in(append([]string{Binary(t, "ctr"), "--address", c.Socket, "--namespace", "k8s.io"}, args...)...)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Import loads image tarballs for the machine's platform and returns every image reference
// containerd then holds.
func (c *Containerd) Import(t TB, tars ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tar := range tars {
		if _, err := c.Ctr(ctx, t, "images", "import", "--platform", "linux/"+runtime.GOARCH, tar); err != nil {
			t.Fatalf("%s: importing %s: %v", c.name, tar, err)
		}
	}
	out, err := c.Ctr(ctx, t, "images", "ls", "-q")
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return strings.Fields(out)
}

// KillContainers kills the containers in cgroup (every process in it, in every hierarchy) and
// this containerd's shims, until none is left. A shim is this containerd's when it names its
// socket and runs in its mount namespace: the kubeadm tier's nodes all use kubeadm's default path.
func (c *Containerd) KillContainers(cgroup string) {
	killMatching(func(p procInfo) bool {
		if strings.Contains(p.cgroup, "/"+cgroup) {
			return true
		}
		if !strings.Contains(p.cmdline, "containerd-shim") || !strings.Contains(p.cmdline, c.Socket) {
			return false
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.pid))
		return err == nil && (c.mountNS == "" || ns == c.mountNS)
	})
}

// in is argv run in the node's namespaces.
func (c *Containerd) in(argv ...string) []string {
	return append(append([]string{}, c.command...), argv...)
}

// Kill kills containerd itself.
func (c *Containerd) Kill() error { return c.proc.kill() }
