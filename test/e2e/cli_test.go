package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// runAgentCLI runs bin/kubectl-etcdmember directly, as a node's init system runs `serve`, and
// returns its combined output and exit code.
func runAgentCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, framework.Binary(t, "kubectl-etcdmember"), args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("running kubectl-etcdmember %v: %v", args, err)
		return "", -1
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, code := runAgentCLI(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "kubectl-etcdmember version ") || strings.Contains(out, "version dev") {
		t.Fatalf("--version: exit %d, %q; want the version make build stamps", code, out)
	}
}

// TestAgentRefusesBadConfiguration: configuration that cannot work ends the agent with a clear
// error and a non-zero exit, instead of a crash loop of retries.
func TestAgentRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint", []string{"serve", "--kubeconfig", kubeconfig}, "--etcd-endpoints is required"},
		{"cert without key", []string{"serve", "--kubeconfig", kubeconfig, "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-cert", "c.pem"}, "--etcd-cert and --etcd-key go together"},
		{"unreadable certificates", []string{"serve", "--kubeconfig", kubeconfig, "--etcd-endpoints", "https://127.0.0.1:1",
			"--etcd-cacert", filepath.Join(dir, "missing-ca.pem"), "--etcd-cert", filepath.Join(dir, "missing.pem"), "--etcd-key", filepath.Join(dir, "missing-key.pem")}, "loading etcd TLS files"},
		{"missing kubeconfig", []string{"serve", "--kubeconfig", filepath.Join(dir, "nope"), "--etcd-endpoints", "http://127.0.0.1:1"}, "loading kubeconfig"},
		{"unreachable etcd", []string{"serve", "--kubeconfig", kubeconfig, "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-wait-timeout", "1s"}, "did not answer within 1s"},
		{"bad leader election timing", []string{"serve", "--kubeconfig", kubeconfig, "--etcd-endpoints", "http://127.0.0.1:1", "--leader-elect-retry-period", "10s"}, "leader election needs retry period"},
		{"unknown flag", []string{"serve", "--etcd-endpoint", "x"}, "unknown flag: --etcd-endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runAgentCLI(t, tc.args...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, output %q; want a non-zero exit and %q", code, out, tc.want)
			}
		})
	}
}
