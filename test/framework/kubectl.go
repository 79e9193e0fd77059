package framework

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kubectlTimeout bounds one kubectl run; `kubectl wait` calls pass their own shorter --timeout.
const kubectlTimeout = 2 * time.Minute

// Admin is the path of a cluster-admin's kubeconfig: what a test does as the operator, on the
// framework's apiserver (APIServer.Admin) or on a control plane kubeadm built.
type Admin string

// Admin is the apiserver's admin kubeconfig.
func (a *APIServer) Admin() Admin { return Admin(a.Kubeconfig()) }

// Kubectl runs bin/kubectl with the admin kubeconfig and returns its combined output.
func (a *APIServer) Kubectl(t TB, args ...string) (string, error) {
	t.Helper()
	return a.Admin().Kubectl(t, args...)
}

// Kubectl runs bin/kubectl with the kubeconfig and returns its combined output.
func (k Admin) Kubectl(t TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t, "kubectl"), append([]string{"--kubeconfig", string(k)}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// MustKubectl is Kubectl that fails the test on error.
func (a *APIServer) MustKubectl(t TB, args ...string) string {
	t.Helper()
	return a.Admin().MustKubectl(t, args...)
}

// MustKubectl is Kubectl that fails the test on error.
func (k Admin) MustKubectl(t TB, args ...string) string {
	t.Helper()
	out, err := k.Kubectl(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// InstallEtcdmember applies config/default, as an operator would, and waits for the CRD.
func (a *APIServer) InstallEtcdmember(t TB) {
	t.Helper()
	a.Admin().InstallEtcdmember(t)
}

// InstallEtcdmember applies config/default, as an operator would, and waits for the CRD.
func (k Admin) InstallEtcdmember(t TB) {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatalf("cannot find the repository root (the directory with %s's go.mod) above the working directory", modulePath)
	}
	k.MustKubectl(t, "apply", "-k", filepath.Join(root, "config", "default"))
	k.MustKubectl(t, "wait", "--for=condition=Established", "--timeout=30s", "crd/etcdmembers.etcdmember.io")
}
