// Package packaging checks what a user installs: the krew manifest and archives of `make dist`,
// `go install`, and the agent image of `make image`, each with the real tools built into bin/.
// Its helpers are exported so that other tests (the e2e test bed) can install the plugin the way
// a user does and run it through kubectl.
package packaging

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// modulePath is the root module's path; its last element names the binary go install writes.
const modulePath = "github.com/etcdmember/kubectl-etcdmember"

// RepoRoot is the directory of the root go.mod, found by walking up from the working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	return framework.MustRepoRoot(t)
}

// Need returns the absolute path of rel (relative to the repository root) and fails the test,
// naming the make target that produces it, when it is missing. Never a skip: a skipped packaging
// test looks green while nothing was checked.
func Need(t testing.TB, rel, target string) string {
	t.Helper()
	path := filepath.Join(RepoRoot(t), rel)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (%v): run make %s", rel, err, target)
	}
	return path
}

// HostPlatform is the release platform of this machine.
func HostPlatform() release.Platform {
	return release.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// ExpectedVersion is the version `make dist` stamps from this tree: $VERSION when make was given
// one (make exports command-line variables), else what the Makefile computes.
func ExpectedVersion(t testing.TB) string {
	t.Helper()
	if v := os.Getenv("VERSION"); v != "" {
		return v
	}
	cmd := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

// KubectlDir is a directory holding only a link to bin/kubectl. PATH gets it instead of bin/,
// whose own kubectl-etcdmember would shadow the plugin under test and make `kubectl plugin list`
// fail with an overshadowing warning.
func KubectlDir(t testing.TB) string {
	t.Helper()
	kubectl := Need(t, "bin/kubectl", "testbin")
	dir := t.TempDir()
	if err := os.Symlink(kubectl, filepath.Join(dir, "kubectl")); err != nil {
		t.Fatalf("link kubectl: %v", err)
	}
	return dir
}

// Env is the environment with PATH set to exactly dirs and HOME to an empty directory, so neither
// a plugin installed on this machine nor the user's ~/.krew or ~/.kube takes part.
func Env(t testing.TB, dirs ...string) []string {
	t.Helper()
	env := []string{"PATH=" + strings.Join(dirs, string(os.PathListSeparator)), "HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "HOME" && k != "KREW_ROOT" && k != "KUBECONFIG" {
			env = append(env, kv)
		}
	}
	return env
}

// Run runs name with args in env and returns stdout and stderr together, failing the test on a
// non-zero exit or after timeout.
func Run(t testing.TB, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Dir = RepoRoot(t)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s (%s)", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(10*time.Millisecond))
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// KrewInstall installs the plugin the way a krew user does, offline: the real bin/krew, with a
// fresh KREW_ROOT, installs dist/etcdmember.yaml from this machine's archive in dist/ (krew
// checks its sha256 against the manifest). It returns $KREW_ROOT/bin, which holds
// kubectl-etcdmember; put it on PATH together with KubectlDir.
func KrewInstall(t testing.TB) (pathDir string) {
	t.Helper()
	krew := Need(t, "bin/krew", "krew")
	manifest := Need(t, "dist/"+release.ManifestName, "dist")
	archive := Need(t, "dist/"+HostPlatform().ArchiveName(), "dist")
	root := t.TempDir()
	env := append(Env(t, filepath.Join(root, "bin")), "KREW_ROOT="+root)
	Run(t, env, 2*time.Minute, krew, "install", "--manifest="+manifest, "--archive="+archive)
	bin := filepath.Join(root, "bin", HostPlatform().BinaryName())
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("krew install left no %s: %v", bin, err)
	}
	return filepath.Join(root, "bin")
}
