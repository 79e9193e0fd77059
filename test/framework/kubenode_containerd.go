package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// A kubelet node's container runtime: containerd with runc and the CNI plugins, and the images it
// runs, imported from files (there is no registry).
func (n *KubeletNode) startContainerd(t TB) {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("runc not found: run \"make nodebin\" (it installs Debian's runc): %v", err)
	}
	if _, err := os.Stat("/usr/lib/cni/loopback"); err != nil {
		t.Fatalf("the CNI plugins are not in /usr/lib/cni: run \"make nodebin\" (Debian's containernetworking-plugins): %v", err)
	}
	// A CNI config must exist though every pod here is hostNetwork: containerd reports the
	// network ready only with one, and a Node that is not Ready keeps a taint the DaemonSet's pods
	// do not tolerate.
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-lo.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"lo","plugins":[{"type":"loopback"}]}`), 0o644); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	config := fmt.Sprintf(containerdConfig, filepath.Join(n.dir, "containerd"), n.run, n.socket(), pauseImage,
		runc, filepath.Join(n.run, "runc"), filepath.Join(n.dir, "cni"))
	path := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	n.containerd = newProcess(t, "containerd "+n.Name, filepath.Join(n.dir, "containerd.log"))
	// containerd finds its shim on PATH.
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatalf("env(1): %v", err)
	}
	n.start(t, n.containerd, env, "PATH="+BinDir()+":"+os.Getenv("PATH"), Binary(t, "containerd"), "--config", path)
	n.containerd.waitReady(t, 30*time.Second, "containerd not serving at "+n.socket(), func(ctx context.Context) error {
		_, err := n.ctr(ctx, t, "version")
		return err
	})
}

// pauseImage is the reference under which bin/pause.tar stores the sandbox image; containerd pins it.
const pauseImage = "registry.local/pause:1"

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

// ctr runs ctr against the node's containerd in the kubelet's namespace (k8s.io).
func (n *KubeletNode) ctr(ctx context.Context, t TB, args ...string) (string, error) {
	argv := n.command(append([]string{Binary(t, "ctr"), "--address", n.socket(), "--namespace", "k8s.io"}, args...)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// importImages loads the pause image and the agent image of make image (there is no registry):
// the pods' images are present, so the kubelet pulls nothing.
func (n *KubeletNode) importImages(t TB) {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatalf("cannot find the repository root above the working directory")
	}
	agentTar := filepath.Join(root, "dist", "image_linux_"+runtime.GOARCH+".tar")
	if _, err := os.Stat(agentTar); err != nil {
		t.Fatalf("the agent image %s is missing: run \"make image\"", agentTar)
	}
	pauseTar := filepath.Join(BinDir(), "pause.tar")
	if _, err := os.Stat(pauseTar); err != nil {
		t.Fatalf("bin/pause.tar is missing: run \"make nodebin\"")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tar := range []string{pauseTar, agentTar} {
		if _, err := n.ctr(ctx, t, "images", "import", "--platform", "linux/"+runtime.GOARCH, tar); err != nil {
			t.Fatalf("node %s: importing %s: %v", n.Name, tar, err)
		}
	}
	out, err := n.ctr(ctx, t, "images", "ls", "-q")
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	for ref := range strings.FieldsSeq(out) {
		if strings.Contains(ref, "/kubectl-etcdmember:") {
			n.AgentImage = ref
		}
	}
	if n.AgentImage == "" {
		t.Fatalf("node %s: no kubectl-etcdmember image after importing %s:\n%s", n.Name, agentTar, out)
	}
}

// TagAgentImage gives the agent image another tag in the node's containerd, for a rolling update
// to a tag that is present.
func (n *KubeletNode) TagAgentImage(t TB, tag string) string {
	t.Helper()
	ref := n.AgentImage[:strings.LastIndex(n.AgentImage, ":")] + ":" + tag
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := n.ctr(ctx, t, "images", "tag", n.AgentImage, ref); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	return ref
}

// ContainerPID returns the host PID of a container's process, from the pod status's containerID
// ("containerd://<id>").
func (n *KubeletNode) ContainerPID(t TB, containerID string) int {
	t.Helper()
	id := strings.TrimPrefix(containerID, "containerd://")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := n.ctr(ctx, t, "tasks", "ls")
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("node %s: task %s: pid %q: %v", n.Name, id, f[1], err)
			}
			return pid
		}
	}
	t.Fatalf("node %s: no task for container %s:\n%s", n.Name, id, out)
	return 0
}
