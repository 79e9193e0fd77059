package framework

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// documentedTimeout bounds one documented block: its kubectl calls carry timeouts of their own.
const documentedTimeout = 2 * time.Minute

// DocumentedCommand returns the sh block that follows the marker comment <!-- marker... --> in
// docs/install.md, so that the docs say exactly what a test ran.
func DocumentedCommand(t TB, marker string) string {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatalf("repository root not found")
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	_, after, found := strings.Cut(string(data), "<!-- "+marker)
	if !found {
		t.Fatalf("docs/install.md has no <!-- %s --> marker", marker)
	}
	_, block, found := strings.Cut(after, "```sh\n")
	if !found {
		t.Fatalf("no sh block after the %s marker in docs/install.md", marker)
	}
	command, _, found := strings.Cut(block, "```")
	if !found || strings.TrimSpace(command) == "" {
		t.Fatalf("the sh block after the %s marker in docs/install.md is empty or unterminated", marker)
	}
	return command
}

// RunDocumented runs the sh block of docs/install.md after the marker as an operator would, from
// the repository's root with the admin kubeconfig and bin/ first on PATH, fails t when it fails,
// and returns how long it took.
func (a *APIServer) RunDocumented(t TB, marker string) time.Duration {
	t.Helper()
	command := DocumentedCommand(t, marker)
	root, _ := RepoRoot()
	ctx, cancel := context.WithTimeout(context.Background(), documentedTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", command)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+a.Kubeconfig(), "PATH="+BinDir()+":"+os.Getenv("PATH"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the documented %s block failed after %s: %v\n%s", marker, took, err, out)
	}
	t.Logf("documented %s block: %s\n%s", marker, took, out)
	return took
}
