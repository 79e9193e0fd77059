package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// stopTimeout bounds a graceful stop; an etcd leader hands over leadership
	// before exiting, which takes a few election timeouts at worst.
	stopTimeout = 30 * time.Second
	// killTimeout bounds the wait after SIGKILL, which only fails to reap a
	// process stuck in the kernel.
	killTimeout = 10 * time.Second
	// LogTailLines is how much of each log a failed test prints.
	LogTailLines = 150
)

// process is a restartable child process (an etcd member, the apiserver)
// whose log file accumulates across restarts.
type process struct {
	name    string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd has exited
	exitErr error
	paused  bool
}

// newProcess registers the process's cleanup on owner right away, so it runs
// however the test ends and whichever TB later starts or stops the process.
func newProcess(owner TB, name, logPath string) *process {
	p := &process{name: name, logPath: logPath}
	owner.Cleanup(func() {
		if err := p.kill(); err != nil {
			owner.Logf("cleanup: %v", err)
		}
		if owner.Failed() {
			owner.Logf("last %d lines of %s (%s):\n%s", LogTailLines, p.name, p.logPath, p.tail(LogTailLines))
		}
	})
	return p
}

// start launches bin with args, appending its output to the log file.
func (p *process) start(bin string, args ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running", p.name)
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.name, err)
	}
	// The child gets its own descriptor; the parent's copy only writes the
	// header that separates one run from the next.
	defer func() { _ = log.Close() }()
	if _, err := fmt.Fprintf(log, "%s%s starting: %s %s\n", startHeader, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " ")); err != nil {
		return fmt.Errorf("write log of %s: %w", p.name, err)
	}

	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// A crashed or killed test binary never runs its cleanups; the kernel then
	// kills the children instead of leaving them holding ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr, p.paused = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done != nil && !isClosed(p.done)
}

// responsive reports whether the process runs and is not paused.
func (p *process) responsive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done != nil && !isClosed(p.done) && !p.paused
}

// exited reports why the last run ended, or nil while it is still running, so that readiness
// waits can give up as soon as the process dies.
func (p *process) exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.done == nil || !isClosed(p.done):
		return nil
	case p.exitErr != nil:
		return fmt.Errorf("%s exited: %w", p.name, p.exitErr)
	}
	return fmt.Errorf("%s exited", p.name)
}

// loggedSinceStart tells whether the process wrote s since its last start (after the header
// start writes): an earlier run's words are no evidence about this one.
func (p *process) loggedSinceStart(s string) bool {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return false
	}
	if i := bytes.LastIndex(data, []byte("\n"+startHeader)); i >= 0 {
		data = data[i+1:]
	}
	return bytes.Contains(data, []byte(s))
}

// startHeader begins the line start writes into the log before each run.
const startHeader = "=== "

// errNotRunning says a signal found the process gone: never started, stopped
// before, or exited on its own (a removed etcd member does).
var errNotRunning = errors.New("not running")

// signal sends sig, or returns an error wrapping errNotRunning once the
// process has exited, however close that exit was to the call.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	done := p.done
	if done == nil || isClosed(done) {
		p.mu.Unlock()
		return fmt.Errorf("%s: %w", p.name, errNotRunning)
	}
	err := p.cmd.Process.Signal(sig)
	if err == nil {
		switch sig {
		case syscall.SIGSTOP:
			p.paused = true
		case syscall.SIGCONT:
			p.paused = false
		}
	}
	p.mu.Unlock()
	if errors.Is(err, os.ErrProcessDone) {
		// cmd.Wait has returned in start's goroutine, which closes done as
		// soon as it gets p.mu: until then the process still looks running.
		select {
		case <-done:
			return fmt.Errorf("%s: %w", p.name, errNotRunning)
		case <-time.After(killTimeout):
			return fmt.Errorf("%s was reaped but not marked exited within %s", p.name, killTimeout)
		}
	}
	if err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	return nil
}

// stop sends SIGTERM and waits for the exit, escalating to SIGKILL when the
// process does not exit in time.
func (p *process) stop() error {
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if err := p.signal(syscall.SIGTERM); err != nil {
		// It exited on its own meanwhile, as a removed etcd member does.
		if errors.Is(err, errNotRunning) {
			return nil
		}
		return err
	}
	// A stopped process only acts on SIGTERM once it is continued.
	if paused {
		if err := p.signal(syscall.SIGCONT); err != nil && !errors.Is(err, errNotRunning) {
			return err
		}
	}
	if p.wait(stopTimeout) {
		return nil
	}
	if err := p.kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s ignored SIGTERM for %s and was killed (log: %s)", p.name, stopTimeout, p.logPath)
}

// kill sends SIGKILL and waits for the exit; it is a no-op when the process is
// not running, or exits on its own while being killed.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		if errors.Is(err, errNotRunning) {
			return nil
		}
		return err
	}
	if !p.wait(killTimeout) {
		return fmt.Errorf("%s did not exit within %s of SIGKILL", p.name, killTimeout)
	}
	return nil
}

func (p *process) wait(timeout time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// waitReady polls check until it succeeds, failing the test when the deadline
// passes or the process exits first.
func (p *process) waitReady(t TB, timeout time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	p.waitReadyOrExit(t, timeout, what, check, nil)
}

// waitReadyOrExit is waitReady that also ends, and reports it, at an exit that exitOK (nil: none)
// accepts: a removed etcd member exits, with status 0 or 1 depending on how far its start got.
func (p *process) waitReadyOrExit(t TB, timeout time.Duration, what string, check func(context.Context) error, exitOK func() bool) (exited bool) {
	t.Helper()
	err := Poll(timeout, pollInterval, PerAttempt(attemptTimeout, func(ctx context.Context) (bool, error) {
		err := check(ctx)
		if err == nil {
			return true, nil
		}
		aerr := p.exited()
		switch {
		case aerr == nil:
			return false, err
		case exitOK != nil && exitOK():
			exited = true
			return true, nil
		}
		return false, Stop(fmt.Errorf("%w (last error: %w)", aerr, err))
	}))
	if err != nil {
		t.Fatalf("%s: %s: %v (log: %s)", p.name, what, err, p.logPath)
	}
	return exited
}

// tail returns the last n lines of the log, each prefixed with the process
// name so that interleaved tails of several processes stay readable.
func (p *process) tail(n int) string { return LogTail(p.name, p.logPath, n) }

// LogTail returns the last n lines of the log at path, each prefixed with name so that
// interleaved tails of several logs stay readable.
func LogTail(name, path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("[%s] cannot read log: %v", name, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-n):]
	var b strings.Builder
	for _, line := range lines {
		fmt.Fprintf(&b, "[%s] %s\n", name, line)
	}
	return b.String()
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

const (
	pollInterval = 50 * time.Millisecond
	// attemptTimeout bounds each single check so that one hung call cannot eat
	// the whole deadline.
	attemptTimeout = 2 * time.Second
)

// poll is the framework's own wait for a process or cluster state: check runs
// every pollInterval, each attempt within attemptTimeout, until it returns nil
// or timeout passes. A check returns Stop(err) for an error retrying cannot fix.
func poll(timeout time.Duration, check func(context.Context) error) error {
	return Poll(timeout, pollInterval, PerAttempt(attemptTimeout, Succeeds(check)))
}
