package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// pluginTimeout bounds one `kubectl etcdmember` run; commands that wait pass a shorter --timeout
// so that a hang shows the plugin's own message.
const pluginTimeout = 2 * time.Minute

// PluginRun is what one `kubectl etcdmember ...` run printed, and how it ended.
type PluginRun struct {
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

// Output is both streams, for failure messages.
func (r PluginRun) Output() string {
	return fmt.Sprintf("exit %d after %s\nstdout:\n%sstderr:\n%s", r.Code, r.Took.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// PluginCommand returns `bin/kubectl etcdmember ARGS...` as an operator runs it: bin/ leads PATH,
// so kubectl finds bin/kubectl-etcdmember the way it finds any plugin, and $KUBECONFIG holds the
// admin kubeconfig. env adds or overrides variables ("KEY=value"); the machine's own ETCDCTL_*
// and KUBECONFIG never leak in.
func (a *APIServer) PluginCommand(t TB, ctx context.Context, env []string, args ...string) *exec.Cmd {
	t.Helper()
	return a.Admin().PluginCommand(t, ctx, env, args...)
}

// PluginCommand is APIServer.PluginCommand with the kubeconfig.
func (k Admin) PluginCommand(t TB, ctx context.Context, env []string, args ...string) *exec.Cmd {
	t.Helper()
	return k.kubectlWithPlugin(t, ctx, env, append([]string{"etcdmember"}, args...)...)
}

func (k Admin) kubectlWithPlugin(t TB, ctx context.Context, env []string, args ...string) *exec.Cmd {
	t.Helper()
	kubectl := Binary(t, "kubectl")
	Binary(t, "kubectl-etcdmember")
	cmd := exec.CommandContext(ctx, kubectl, args...)
	cmd.Env = append(pluginEnv(string(k)), env...)
	return cmd
}

// pluginEnv is the environment the plugin runs with: bin/ first on PATH and kubeconfig in
// $KUBECONFIG, with no ETCDCTL_* of the machine's.
func pluginEnv(kubeconfig string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCDCTL_") || strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+BinDir()+string(filepath.ListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
}

// Plugin runs `kubectl etcdmember ARGS...` (see PluginCommand) with stdin from stdin (nil: none,
// as in CI) and returns what it printed and its exit code.
func (a *APIServer) Plugin(t TB, stdin io.Reader, env []string, args ...string) PluginRun {
	t.Helper()
	return a.Admin().Plugin(t, stdin, env, args...)
}

// Plugin is APIServer.Plugin with the kubeconfig.
func (k Admin) Plugin(t TB, stdin io.Reader, env []string, args ...string) PluginRun {
	t.Helper()
	return k.KubectlWithPlugin(t, stdin, env, append([]string{"etcdmember"}, args...)...)
}

// KubectlWithPlugin runs `kubectl ARGS...` where kubectl finds the plugin (see PluginCommand),
// for kubectl's own plugin commands: `plugin list`, `__complete etcdmember ...`.
func (a *APIServer) KubectlWithPlugin(t TB, stdin io.Reader, env []string, args ...string) PluginRun {
	t.Helper()
	return a.Admin().KubectlWithPlugin(t, stdin, env, args...)
}

// KubectlWithPlugin is APIServer.KubectlWithPlugin with the kubeconfig.
func (k Admin) KubectlWithPlugin(t TB, stdin io.Reader, env []string, args ...string) PluginRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pluginTimeout)
	defer cancel()
	cmd := k.kubectlWithPlugin(t, ctx, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	run := PluginRun{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		run.Code = exit.ExitCode()
	default:
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, run.Output())
	}
	return run
}
