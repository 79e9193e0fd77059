package packaging

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// failpointCode is in the name of every symbol that internal/failpoint's real implementation
// (build tag failpoints) links in: its functions, its state, the equality of its types. The no-op
// Hit of a build without the tag is inlined away and leaves none.
const failpointCode = modulePath + "/internal/failpoint."

// symbolNames lists the symbol table of a binary of any release platform.
func symbolNames(p release.Platform, data []byte) ([]string, error) {
	var names []string
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		syms, err := f.Symbols()
		if err != nil {
			return nil, err
		}
		for _, s := range syms {
			names = append(names, s.Name)
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		if f.Symtab == nil {
			return nil, errors.New("no symbol table")
		}
		for _, s := range f.Symtab.Syms {
			names = append(names, s.Name)
		}
	case "windows":
		f, err := pe.NewFile(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		for _, s := range f.Symbols {
			names = append(names, s.Name)
		}
	default:
		return nil, fmt.Errorf("unknown os %s", p.OS)
	}
	if len(names) == 0 {
		return nil, errors.New("no symbols (was the binary stripped?)")
	}
	return names, nil
}

// failpointSymbols are the symbols of internal/failpoint's real implementation in a binary.
func failpointSymbols(p release.Platform, data []byte) ([]string, error) {
	names, err := symbolNames(p, data)
	var found []string
	for _, name := range names {
		if strings.Contains(name, failpointCode) {
			found = append(found, name)
		}
	}
	return found, err
}

// checkNoFailpoints fails when a shipped binary carries internal/failpoint's real implementation.
func checkNoFailpoints(t *testing.T, what string, p release.Platform, data []byte) {
	t.Helper()
	if syms, err := failpointSymbols(p, data); err != nil {
		t.Errorf("%s: reading symbols: %v", what, err)
	} else if len(syms) > 0 {
		t.Errorf("%s carries failpoint code (built with -tags failpoints?): %v", what, syms)
	}
}

// runWithFailpoint runs `bin version` with a malformed failpoint in the environment, which an
// agent with failpoints refuses at start (exit 2) and the shipped plugin never reads.
func runWithFailpoint(t *testing.T, bin string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = append(os.Environ(), failpoint.EnvVar+"="+failpoint.LeaveBeforeRemove+":malformed")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("%s version: %v\n%s", bin, err, out)
	return "", 0
}

// TestShippedBinaryHasNoFailpoints: bin/kubectl-etcdmember, what make build, make install and
// go install produce, links none of internal/failpoint's code and ignores ETCDMEMBER_FAILPOINT,
// while the test framework's agent, bin/failpoints/kubectl-etcdmember, has both: the check would
// see the code if it were there. (The dist archives and so the image are checked by
// TestArchivesHoldWhatTheManifestPromises.)
func TestShippedBinaryHasNoFailpoints(t *testing.T) {
	host := HostPlatform()
	shipped := Need(t, "bin/"+release.Binary, "build")
	agent := Need(t, "bin/"+framework.AgentBinary, "build")

	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	checkNoFailpoints(t, "bin/"+release.Binary, host, data)
	if out, code := runWithFailpoint(t, shipped); code != 0 || strings.Contains(out, failpoint.EnvVar) {
		t.Errorf("bin/%s version with a malformed %s: exit %d, want 0 and no word of it:\n%s", release.Binary, failpoint.EnvVar, code, out)
	}

	data, err = os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	if syms, err := failpointSymbols(host, data); err != nil || len(syms) == 0 {
		t.Errorf("bin/%s has no symbol containing %s (err %v): the check above would miss failpoints; is it built with -tags failpoints?",
			framework.AgentBinary, failpointCode, err)
	}
	if out, code := runWithFailpoint(t, agent); code != 2 || !strings.Contains(out, failpoint.EnvVar) {
		t.Errorf("bin/%s version with a malformed %s: exit %d, want 2 and the failpoint's complaint:\n%s", framework.AgentBinary, failpoint.EnvVar, code, out)
	}
}
