package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// unitName is deploy/systemd's unit, as an operator installs it.
const unitName = "etcdmember-agent.service"

// TestSystemdUnitVerifies runs `systemd-analyze verify` on deploy/systemd's unit, installed as its
// header says into a root of the test's own: the binary at /usr/local/bin/kubectl-etcdmember, the
// unit in /etc/systemd/system, next to the machine's own system units (which it orders itself
// after). systemd does not need to run. verify exits 0 on unknown keys and unparsable values, which
// it only warns about, so any line that names the unit fails the test too.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze not found: run \"make node-packages\" (Debian's systemd): %v", err)
	}
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	plugin := framework.Binary(t, "kubectl-etcdmember")
	dir := t.TempDir()
	install(t, plugin, filepath.Join(dir, "usr/local/bin/kubectl-etcdmember"), 0o755)
	install(t, filepath.Join(root, "deploy/systemd", unitName), filepath.Join(dir, "etc/systemd/system", unitName), 0o644)
	// The machine's units, copied as they are: their absolute symlinks then resolve inside the root.
	if err := os.MkdirAll(filepath.Join(dir, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", filepath.Join(dir, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copying the system units: %v: %s", err, out)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", "--root="+dir, unitName).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify %s: %v:\n%s", unitName, err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, unitName) {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}

func install(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}
