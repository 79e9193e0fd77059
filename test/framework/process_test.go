package framework

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
// has not yet marked it exited. Holding p.mu until the OS answers
// ErrProcessDone keeps that goroutine out, so every round hits the window.
func TestSignalAfterOwnExitIsNotRunning(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("this self-test runs /bin/true (coreutils): %v", err)
	}
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
			p := newProcess(t, "exits-alone", filepath.Join(t.TempDir(), "log"))
			start := time.Now()
			for round := range raceRounds {
				if err := p.start(bin); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				reapedBeforeMarked(t, p)
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
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("this self-test runs /bin/true (coreutils): %v", err)
	}
	p := newProcess(t, "exits-alone", filepath.Join(t.TempDir(), "log"))
	for round := range raceRounds {
		if err := p.start(bin); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sig := []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT}[round%2]
		reapedBeforeMarked(t, p)
		if err := p.signal(sig); !errors.Is(err, errNotRunning) {
			t.Fatalf("round %d: %v to a process that exited: got %v, want errNotRunning", round, sig, err)
		}
	}
}

// reapedBeforeMarked returns once p's child has exited and been reaped while
// p still says it runs: the moment in which the race lived.
func reapedBeforeMarked(t *testing.T, p *process) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	deadline := time.Now().Add(killTimeout)
	for {
		err := p.cmd.Process.Signal(syscall.Signal(0))
		if errors.Is(err, os.ErrProcessDone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child of %s not reaped after %s (last answer: %v)", p.name, killTimeout, err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if isClosed(p.done) {
		t.Fatalf("%s marked exited while its lock was held", p.name)
	}
}
