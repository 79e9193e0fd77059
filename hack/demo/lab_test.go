package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestLabRunsUntilInterrupted: `make lab`'s program starts the lab and prints its settings;
// kubectl etcdmember list works against exactly those; an interrupt stops every process of the
// lab and removes its files.
func TestLabRunsUntilInterrupted(t *testing.T) {
	kubectl := framework.Binary(t, "kubectl")
	framework.Binary(t, "kubectl-etcdmember")
	prog := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", prog, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/demo: %v\n%s", err, out)
	}
	lab := exec.Command(prog, "-lab")
	lab.Dir = "../.."
	stdout, err := lab.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	lab.Stderr = os.Stderr
	if err := lab.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.Process.Kill() })

	exports, rest := readSettings(t, stdout)
	for _, key := range []string{"PATH", "KUBECONFIG", "ETCDCTL_ENDPOINTS"} {
		if exports[key] == "" {
			t.Fatalf("the lab printed no export of %s: %v", key, exports)
		}
	}
	env := append(os.Environ(), "PATH="+strings.ReplaceAll(exports["PATH"], "$PATH", os.Getenv("PATH")),
		"KUBECONFIG="+exports["KUBECONFIG"], "ETCDCTL_ENDPOINTS="+exports["ETCDCTL_ENDPOINTS"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list := exec.CommandContext(ctx, kubectl, "etcdmember", "list")
	list.Env = env
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl etcdmember list with the lab's settings: %v\n%s", err, out)
	}
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		if !strings.Contains(string(out), name) {
			t.Errorf("kubectl etcdmember list does not show %s:\n%s", name, out)
		}
	}

	if err := lab.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// The output to its end before Wait: Wait closes the pipe, and what was not read by then is
	// lost (os/exec's StdoutPipe), which once cost this test the lab's last line.
	var tail string
	select {
	case tail = <-rest:
	case <-time.After(time.Minute):
		t.Fatal("the lab still runs a minute after the interrupt")
	}
	if err := lab.Wait(); err != nil {
		t.Errorf("the lab exited with %v after the interrupt, want 0", err)
	}
	if !strings.Contains(tail, "the lab is stopped and its files are removed") {
		t.Error("the lab did not say it stopped")
	}

	dir := labDir(t, exports["KUBECONFIG"])
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lab's directory %s is still there (%v)", dir, err)
	}
	if left := processesMentioning(t, dir); len(left) > 0 {
		t.Errorf("processes of the lab still run: %v", left)
	}
	for _, endpoint := range strings.Split(exports["ETCDCTL_ENDPOINTS"], ",") {
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
			_ = conn.Close()
			t.Errorf("etcd endpoint %s still accepts connections", endpoint)
		}
	}
}

// readSettings reads the lab's output up to the line that says how to stop it, and returns its
// export lines; the rest of the output arrives on the channel once the lab closes it.
func readSettings(t *testing.T, stdout io.Reader) (map[string]string, <-chan string) {
	t.Helper()
	lines := bufio.NewScanner(stdout)
	exports := map[string]string{}
	ready := make(chan bool, 1)
	go func() {
		for lines.Scan() {
			line := lines.Text()
			if kv, ok := strings.CutPrefix(line, "export "); ok {
				key, value, _ := strings.Cut(kv, "=")
				exports[key] = value
			}
			if strings.HasPrefix(line, "Ctrl-C here stops") {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("the lab ended its output before it was ready (err %v)", lines.Err())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the lab was not ready within 3 minutes")
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	return exports, rest
}

// labDir is the lab's own directory, the one under the temporary directory that holds the
// kubeconfig it printed.
func labDir(t *testing.T, kubeconfig string) string {
	t.Helper()
	rel, err := filepath.Rel(os.TempDir(), kubeconfig)
	if err != nil || strings.HasPrefix(rel, "..") || !strings.HasPrefix(rel, "etcdmember-lab-") {
		t.Fatalf("the lab's kubeconfig %s is not in a directory etcdmember-lab-* of %s", kubeconfig, os.TempDir())
	}
	return filepath.Join(os.TempDir(), strings.SplitN(rel, string(filepath.Separator), 2)[0])
}

// processesMentioning lists the running processes whose command line names dir.
func processesMentioning(t *testing.T, dir string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		cmdline := strings.ReplaceAll(string(raw), "\x00", " ")
		if strings.Contains(cmdline, dir) && !isZombie(filepath.Dir(p)) {
			found = append(found, cmdline)
		}
	}
	return found
}

func isZombie(procDir string) bool {
	raw, err := os.ReadFile(filepath.Join(procDir, "stat"))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}
