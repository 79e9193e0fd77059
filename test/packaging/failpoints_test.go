package packaging

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
	"github.com/etcdmember/kubectl-etcdmember/internal/failpoint"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// failpointsTag is the build tag that links internal/failpoint's real implementation in. The
// shipped binaries are stripped (-s -w), so their symbols cannot tell; their build info, which
// stripping keeps, records the tags they were built with.
const failpointsTag = "failpoints"

// buildTags are the -tags a Go binary of any platform was built with, from its build info.
func buildTags(data []byte) ([]string, error) {
	info, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading build info: %w", err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			return strings.Split(s.Value, ","), nil
		}
	}
	return nil, nil
}

// checkNoFailpoints fails when a shipped binary was built with internal/failpoint's real implementation.
func checkNoFailpoints(t *testing.T, what string, data []byte) {
	t.Helper()
	if tags, err := buildTags(data); err != nil {
		t.Errorf("%s: %v", what, err)
	} else if slices.Contains(tags, failpointsTag) {
		t.Errorf("%s carries failpoint code: built with -tags %s", what, strings.Join(tags, ","))
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
// go install produce, is built without internal/failpoint's code and ignores ETCDMEMBER_FAILPOINT,
// while the test framework's agent, bin/failpoints/kubectl-etcdmember, has both: the check would
// see the code if it were there. (The dist archives and so the image are checked by
// TestArchivesHoldWhatTheManifestPromises.)
func TestShippedBinaryHasNoFailpoints(t *testing.T) {
	shipped := Need(t, "bin/"+release.Binary, "build")
	agent := Need(t, "bin/"+framework.AgentBinary, "build")

	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	checkNoFailpoints(t, "bin/"+release.Binary, data)
	if out, code := runWithFailpoint(t, shipped); code != 0 || strings.Contains(out, failpoint.EnvVar) {
		t.Errorf("bin/%s version with a malformed %s: exit %d, want 0 and no word of it:\n%s", release.Binary, failpoint.EnvVar, code, out)
	}

	data, err = os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	if tags, err := buildTags(data); err != nil || !slices.Contains(tags, failpointsTag) {
		t.Errorf("bin/%s's build info has tags %q (err %v), not %s: the check above would miss failpoints",
			framework.AgentBinary, tags, err, failpointsTag)
	}
	if out, code := runWithFailpoint(t, agent); code != 2 || !strings.Contains(out, failpoint.EnvVar) {
		t.Errorf("bin/%s version with a malformed %s: exit %d, want 2 and the failpoint's complaint:\n%s", framework.AgentBinary, failpoint.EnvVar, code, out)
	}
}
