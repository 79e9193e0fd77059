package framework

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// startContainerd starts the node's containerd, its sandbox image the one of bin/pause.tar.
func (n *KubeletNode) startContainerd(t TB) {
	t.Helper()
	n.containerd = StartContainerd(t, ContainerdOptions{Node: n.Name, Dir: n.dir, Run: n.run,
		Socket: n.socket(), SandboxImage: pauseImage, Namespaces: n.ns})
}

// pauseImage is the reference under which bin/pause.tar stores the sandbox image; containerd pins it.
const pauseImage = "registry.local/pause:1"

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
	refs := n.containerd.Import(t, pauseTar, agentTar)
	for _, ref := range refs {
		if strings.Contains(ref, "/kubectl-etcdmember:") {
			n.AgentImage = ref
		}
	}
	if n.AgentImage == "" {
		t.Fatalf("node %s: no kubectl-etcdmember image after importing %s: %v", n.Name, agentTar, refs)
	}
}

// TagAgentImage gives the agent image another tag in the node's containerd, for a rolling update
// to a tag that is present.
func (n *KubeletNode) TagAgentImage(t TB, tag string) string {
	t.Helper()
	ref := n.AgentImage[:strings.LastIndex(n.AgentImage, ":")] + ":" + tag
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := n.containerd.Ctr(ctx, t, "images", "tag", n.AgentImage, ref); err != nil {
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
	out, err := n.containerd.Ctr(ctx, t, "tasks", "ls")
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
