package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// raceRounds is how often each self-test below replays the race. On the code
// before the fix, a few rounds were enough for an error to escape.
const raceRounds = 200

// TestSignalAfterOwnExitIsNotRunning replays, deterministically, what happens
// when a test stops an etcd member that etcd has just removed: the member has
// exited on its own and been reaped (cmd.Wait returned), but start's goroutine
// has not yet marked it exited. The test holds p.mu from before the child exits
// until the OS answers ErrProcessDone, so every round hits the window.
func TestSignalAfterOwnExitIsNotRunning(t *testing.T) {
	t.Parallel()
	sh, args := exitOnCue(t)
	ops := []struct {
		name string
		do   func(p *process) error
	}{
		{"stop", (*process).stop},
		{"kill", (*process).kill},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			p := newProcess(t, "exits-alone", filepath.Join(dir, "log"))
			start := time.Now()
			for round := range raceRounds {
				cue := filepath.Join(dir, fmt.Sprintf("cue-%d", round))
				if err := p.start(sh, args(cue)...); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				reapedBeforeMarked(t, p, cue)
				if err := op.do(p); err != nil {
					t.Fatalf("round %d: %s of a process that exited on its own: %v", round, op.name, err)
				}
				if p.running() {
					t.Fatalf("round %d: still running after %s", round, op.name)
				}
			}
			t.Logf("%d rounds in %s", raceRounds, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestSignalToExitedProcessSaysNotRunning checks the other signals (a pause,
// a resume) in the same window: they report errNotRunning, which Pause and
// Resume of members and agents accept, and nothing else.
func TestSignalToExitedProcessSaysNotRunning(t *testing.T) {
	t.Parallel()
	sh, args := exitOnCue(t)
	dir := t.TempDir()
	p := newProcess(t, "exits-alone", filepath.Join(dir, "log"))
	for round := range raceRounds {
		cue := filepath.Join(dir, fmt.Sprintf("cue-%d", round))
		if err := p.start(sh, args(cue)...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sig := []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT}[round%2]
		reapedBeforeMarked(t, p, cue)
		if err := p.signal(sig); !errors.Is(err, errNotRunning) {
			t.Fatalf("round %d: %v to a process that exited: got %v, want errNotRunning", round, sig, err)
		}
	}
}

// exitOnCue is a child that exits by itself, but only once its cue file exists, so that a test
// can take p.mu before the exit: start's goroutine then cannot mark it exited until the test lets
// go.
func exitOnCue(t *testing.T) (sh string, args func(cue string) []string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("this self-test runs sh: %v", err)
	}
	return sh, func(cue string) []string {
		return []string{"-c", `while [ ! -e "$0" ]; do sleep 0.002; done`, cue}
	}
}

// reapedBeforeMarked cues p's child to exit while holding p.mu, and returns, releasing it, once
// the child has exited and been reaped while p still says it runs: the moment in which the race
// lived.
func reapedBeforeMarked(t *testing.T, p *process, cue string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.WriteFile(cue, nil, 0o600); err != nil {
		t.Fatalf("cue: %v", err)
	}
	var last error
	err := Poll(killTimeout, 100*time.Microsecond, func(context.Context) (bool, error) {
		last = p.cmd.Process.Signal(syscall.Signal(0))
		return errors.Is(last, os.ErrProcessDone), nil
	})
	if err != nil {
		t.Fatalf("child of %s not reaped after %s (last answer: %v)", p.name, killTimeout, last)
	}
	if isClosed(p.done) {
		t.Fatalf("%s marked exited while its lock was held", p.name)
	}
}

// fatalRecorder is a TB whose Fatalf records instead of ending the test, for a wait that must fail.
type fatalRecorder struct {
	*testing.T
	fatals []string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
}

// TestRemovedExitOneIsToldFromAFailure replays the harness error that stopped chaos run 653118730
// at scenario 174, without its race: etcd, started after the dead-member policy removed it, learns
// of the removal while still starting and exits with status 1. The wait of StartUnlessRemoved
// accepts that exit on the evidence of the log since this start, and only on it: the same exit
// with nothing said, or said in an earlier run's log only, still fails the test.
func TestRemovedExitOneIsToldFromAFailure(t *testing.T) {
	t.Parallel()
	removedLine := fmt.Sprintf(`echo '{"level":"warn","msg":"%s"}'; `, removedLog)
	stopping := `echo '{"level":"fatal","msg":"listener failed","error":"server is stopping"}'; exit 1`
	p := newProcess(t, "etcd-removed-while-starting", filepath.Join(t.TempDir(), "log"))
	wait := func(script string) (exited bool, fatals []string) {
		t.Helper()
		if err := p.start("/bin/sh", "-c", script); err != nil {
			t.Fatal(err)
		}
		rec := &fatalRecorder{T: t}
		exited = p.waitReadyOrExit(rec, 10*time.Second, "not serving", func(context.Context) error {
			return errors.New("not serving yet")
		}, func() bool { return p.loggedSinceStart(removedLog) })
		return exited, rec.fatals
	}

	if exited, fatals := wait(removedLine + stopping); !exited || len(fatals) > 0 {
		t.Errorf("exit 1 after etcd logged its removal: exited %v, failures %q; want an accepted exit", exited, fatals)
	}
	if exited, fatals := wait(stopping); exited || len(fatals) != 1 || !strings.Contains(fatals[0], "exit status 1") {
		t.Errorf("exit 1 with no removal logged since this start: exited %v, failures %q; want one failure naming exit status 1", exited, fatals)
	}
}
