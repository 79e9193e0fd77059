package framework

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
)

// modulePath identifies the repository root when walking up from the working
// directory, so tests find bin/ no matter which package directory they run in.
const modulePath = "github.com/etcdmember/kubectl-etcdmember"

// binDirEnv overrides the discovered bin/ directory, e.g. to point a test at
// binaries built elsewhere.
const binDirEnv = "ETCDMEMBER_BIN_DIR"

// TB is the subset of testing.TB the framework needs, so a non-test program
// (the demo) can drive it too.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
	Name() string
}

// BinDir returns the absolute path of the directory holding the test binaries:
// $ETCDMEMBER_BIN_DIR if set, else bin/ at the repository root. When the root
// cannot be found it falls back to bin/ under the working directory, so the
// error from Binary still names a concrete place to look.
func BinDir() string {
	if dir := os.Getenv(binDirEnv); dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			return abs
		}
		return dir
	}
	if root, ok := RepoRoot(); ok {
		return filepath.Join(root, "bin")
	}
	wd, err := os.Getwd()
	if err != nil {
		return "bin"
	}
	return filepath.Join(wd, "bin")
}

func isModuleRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) >= 2 && string(fields[0]) == "module" {
			return string(fields[1]) == modulePath
		}
	}
	return false
}

// Binary returns the absolute path of bin/<name>. A missing binary fails the
// test rather than skipping it: a skipped integration test looks green in CI
// while testing nothing.
func Binary(t TB, name string) string {
	t.Helper()
	dir := BinDir()
	path := filepath.Join(dir, name)
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		t.Fatalf("bin/%s not found (looked in %s): run \"%s\"", name, dir, buildCommand(name))
		return ""
	}
	return path
}

// AgentBinary is the agent the framework runs, relative to bin/: the plugin built with the
// failpoints tag, so that tests can arm internal/failpoint. The shipped bin/kubectl-etcdmember has
// none; the plugin tests reach it through kubectl and PATH. Its directory keeps it off PATH, and
// its base name is the plugin's, so that the process looks like the agent it stands for.
const AgentBinary = "failpoints/kubectl-etcdmember"

// buildCommand names the make target that builds bin/<name>.
func buildCommand(name string) string {
	switch name {
	case "kubectl-etcdmember", "kubectl_complete-etcdmember", AgentBinary:
		return "make build"
	case "kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "pause":
		return "make nodebin"
	case "kubeadm":
		return "make kubeadmbin"
	}
	return "make testbin"
}
