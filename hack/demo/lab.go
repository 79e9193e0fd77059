package main

import (
	"errors"
	"fmt"
	"os"
)

// lab implements framework.TB for a program: Fatalf unwinds to run, cleanups run last-in
// first-out, and process logs (which the framework attaches on failure) go to stderr.
type lab struct {
	dir      string
	cleanups []func()
	failed   bool
	err      error
}

func newLab() *lab { return &lab{} }

// run calls body, then the cleanups, and reports a failure.
func (l *lab) run(body func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); !ok || !errors.Is(e, errFatal) {
				l.failed = true
				l.err = fmt.Errorf("panic: %v", r)
			}
		}
		for i := len(l.cleanups) - 1; i >= 0; i-- {
			l.cleanups[i]()
		}
		if l.dir != "" {
			_ = os.RemoveAll(l.dir)
		}
		err = l.err
	}()
	body()
	return nil
}

func (l *lab) Helper() {}

func (l *lab) Logf(format string, args ...any) {
	if l.failed {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

func (l *lab) Fatalf(format string, args ...any) {
	l.failed = true
	l.err = fmt.Errorf(format, args...)
	panic(errFatal)
}

func (l *lab) Cleanup(f func()) { l.cleanups = append(l.cleanups, f) }

func (l *lab) TempDir() string {
	if l.dir == "" {
		dir, err := os.MkdirTemp("", "etcdmember-lab-")
		if err != nil {
			l.Fatalf("temp dir: %v", err)
		}
		l.dir = dir
	}
	dir, err := os.MkdirTemp(l.dir, "")
	if err != nil {
		l.Fatalf("temp dir: %v", err)
	}
	return dir
}

func (l *lab) Failed() bool { return l.failed }

func (l *lab) Name() string { return "demo" }
