package framework_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// recordingTB records Fatalf instead of stopping the goroutine, so a test can
// inspect how the framework fails.
type recordingTB struct {
	*testing.T
	fatals []string
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
}

// TestBinaryMissingFailsNamingTheMakeTarget: a missing binary fails, never skips, with the make
// command that builds it; the agent with failpoints comes from make build, like the plugin.
func TestBinaryMissingFailsNamingTheMakeTarget(t *testing.T) {
	for name, target := range map[string]string{
		"etcd":                "make testbin",
		"kubelet":             "make nodebin",
		"kubectl-etcdmember":  "make build",
		framework.AgentBinary: "make build",
	} {
		t.Run(name, func(t *testing.T) {
			empty := t.TempDir()
			t.Setenv("ETCDMEMBER_BIN_DIR", empty)
			rec := &recordingTB{T: t}

			framework.Binary(rec, name)

			if len(rec.fatals) != 1 {
				t.Fatalf("Binary called Fatalf %d times, want once: %q", len(rec.fatals), rec.fatals)
			}
			want := fmt.Sprintf(`bin/%s not found (looked in %s): run "%s"`, name, empty, target)
			if rec.fatals[0] != want {
				t.Errorf("Fatalf message = %q, want %q", rec.fatals[0], want)
			}
		})
	}
}

// TestAgentBinaryIsNotTheShippedPlugin: the framework's agent is the failpoints build, kept off
// PATH (not directly in bin/, which the plugin tests put first on PATH) under the plugin's name.
func TestAgentBinaryIsNotTheShippedPlugin(t *testing.T) {
	if dir, base := filepath.Split(framework.AgentBinary); dir == "" || base != "kubectl-etcdmember" {
		t.Errorf("AgentBinary = %q, want kubectl-etcdmember in a directory under bin/", framework.AgentBinary)
	}
}

func TestBinDirIsRepositoryBin(t *testing.T) {
	t.Setenv("ETCDMEMBER_BIN_DIR", "")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// This package lives in test/framework, two levels below the root.
	want := filepath.Join(filepath.Dir(filepath.Dir(wd)), "bin")
	if got := framework.BinDir(); got != want {
		t.Errorf("BinDir() = %q, want %q", got, want)
	}
	if got := framework.Binary(t, "etcd"); !strings.HasPrefix(got, want) {
		t.Errorf("Binary(etcd) = %q, want it under %q", got, want)
	}
}
